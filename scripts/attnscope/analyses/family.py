"""Family declarations: the type in which every analysis family declares, once, what the
pipeline needs to know of it (its tables and figures, its jobs' memory, its configuration
checks, its local rules), and the registry that finds them.

A family's `analyses/<family>/outputs.py` defines `FAMILY = Family(...)`; `families()` finds
every one (the registry). From that one declaration follow the rule outputs (rules ask
`table()` for a declared path), the figure rules (`<family>_figures...`: one job per
`FigureGroup`, each figure drawn by the function `<figure>` of `analyses/<family>/plots.py`),
the report entries (caption
`report/<family>/<figure>.rst`), the targets of `rule all` and of `snakemake <family>`, the
Snakefile's local rules, the memory estimate (`jobs`: every job of `rules/<family>.smk`), the
configuration checks, and the checks that the docs list every output and family
(tests/test_docs.py, tests/test_layout.py).

Scopes, with where their files go:
    corpus  results/{model}/{corpus}/<family>/<table>   one model on one corpus
    model   results/{model}/model/<table>               one model, no corpus
    all     results/<family>_<figure>.{svg,png}          every configured model on one figure
Figures of a scope go to `<folder>/figures/<figure>.{svg,png}` (corpus, model).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from attnscope.analyses.job_memory import Memory

FOLDERS = {
    "corpus": "results/{{model}}/{{corpus}}/{family}",
    "model": "results/{{model}}/model",
}
FIGURE_SUFFIXES = ("svg", "png")


@dataclass(frozen=True)
class ModelFacts:
    """What a family's `model_checks` may read of one model on this machine: its name, its
    number of layers and of heads per layer, its analysed layers (0-based), and its folder
    (None: a GGUF file still to dequantise, `gguf_file`)."""

    name: str
    n_layers: int
    n_heads: int
    layers: list[int]
    folder: Path | None = None
    gguf_file: Path | None = None

    def head_tokenizer(self):
        """The tokenizer of the pieces the model predicts; None for a model without a
        language-model head (a GGUF is a causal LM: the tokenizer it carries)."""
        from transformers import AutoTokenizer

        from attnscope.architectures import lm_head_kind
        from attnscope.model import gguf

        if self.folder is None and self.gguf_file is None:
            return None  # nothing on this machine to read it from
        if self.folder is None or gguf.is_gguf(Path(self.folder)):
            return gguf.gguf_tokenizer(Path(self.folder or self.gguf_file))  # or GGUFError
        if lm_head_kind(str(self.folder)) is None:
            return None
        return AutoTokenizer.from_pretrained(self.folder)


@dataclass(frozen=True)
class Figure:
    """One figure, drawn by the function `name` of the family's plots module from its tables,
    in the rule of its `FigureGroup` (rules/figures.smk).

    tables    table file names of the figure's scope folder, passed by stem as keyword
              arguments (an `all` figure reads its tables from the `model` scope, one per model)
    settings  keys of the family's config block passed to the drawing function
    """

    name: str
    scope: str
    tables: tuple[str, ...]
    settings: tuple[str, ...] = ()


@dataclass(frozen=True)
class FigureGroup:
    """The figures one job draws (rules/figures.smk): a family's figures of one scope that
    are made for the same corpora (`Family.corpus_roles`) and need the same layers
    (`Family.every_layer`), so that every run wanting one wants them all. One job per group
    pays the start of Python, pandas and matplotlib once rather than once per figure.

    name     the rule: `<family>_figures`, then `_<scope>` for a model or all-model scope,
             `_<role>` for a corpus role (probing's `syntax`), `_every_layer` for figures
             drawn from tables that need every layer (norms_figures_every_layer)
    """

    name: str
    scope: str
    figures: tuple[Figure, ...]


@dataclass(frozen=True)
class Needs:
    """What a family's jobs read from another family: the declared way across families (no
    family imports another family's modules; shared maps live in `attnscope.maps`).

    family    the other family's name
    settings  keys of the other family's config block, passed to the jobs as params of the
              same names, so that changing one reruns them (views read mixing's contrast)
    bounds    keys of the other family's config block that the jobs' scripts read from the
              config: check bounds, which change no result and so rerun nothing (views read
              mixing's max_rel_residual)
    tables    own settings -> the other family's corpus tables the jobs read, for the same
              model and corpus (probing reads mixing's maps.h5 when its sources name scopes)
    corpus    (own settings, the other family's settings) -> the corpus whose tables are read,
              in place of the job's own (heads reads weights' tables of its tables_corpus)
    optional  True: a table the run does not make (the other family switched off or not
              reading that corpus, a table that needs every layer under a subset of `layers:`,
              a table the other family does not declare) is left out of the inputs, and the
              job says what it could not judge; False: the run is refused before any job
    """

    family: str
    settings: tuple[str, ...] = ()
    bounds: tuple[str, ...] = ()
    tables: Callable[[dict], tuple[str, ...]] = lambda settings: ()
    corpus: Callable[[dict, dict], str] | None = None
    optional: bool = False


@dataclass(frozen=True)
class ModelShape:
    """What the size of a layer shard's accumulators depends on: layers, heads per layer, the
    width of a head and of the residual stream."""

    n_layers: int
    n_heads: int
    d_head: int
    d_model: int


@dataclass(frozen=True)
class Family:
    """An analysis family: config key `analyses.<name>`, rule prefix, results folder name.

    title     the report category
    tables    {scope: file names}; figures: every Figure of the family
    problems  settings -> messages of what contradicts itself in them (checked at parse time)
    corpus_roles  {setting key that names one corpus: the corpus tables and figures made for
              that corpus}; empty: every corpus table and figure for every corpus of
              `corpora:`/`corpus:` (a family reading two corpora for different analyses, e.g.
              probing's syntax_corpus and coref_corpus, names its roles here)
    corpus_kinds  {setting key that names one corpus: the corpus kinds it may have} (probing's
              syntax_corpus must be an ewt corpus), checked before any job
    folder    True: one job writes the family's whole corpus folder as a directory output
              (views: an index.html and one page per sequence, so the number of files may
              depend on the data); its declared tables are files inside it, and the targets
              name the folder
    map_bytes  (settings, n_layers, n_sequences, length) -> {file: bytes} of the family's
              per-pair map files for one corpus (their datasets are not compressed, so the
              bytes are exact), for the disk estimate made before any job
    needs     what the family reads from other families (`Needs`)
    every_layer  corpus tables that need every layer's states (the whole depth, or all heads
              at once): with a subset of `layers:` they and the figures drawn from them are
              not made; a family all of whose corpus tables need every layer cannot run then
    part_bytes  (settings, ModelShape, n_sequences, length, layers) -> bytes at most of the
              arrays in one layer shard's pickled accumulators (`{shard}.pkl`,
              `pipeline.shards`) when it analyses `layers` of the model's, for the disk
              estimate; None: the family has no layer shards
    shard_maps  files of `map_bytes` that the layer shards write, each its layers' share
              (`{shard}.h5`), until the gathering job has copied them into the one file
    run_pages  pages over every model of a run (results/<family>_<name>.html: the heads
              family's overview), made when the family is enabled
    jobs      {rule: Memory} of every rule of `rules/<family>.smk` but the local ones: how
              the memory estimate counts it (`analyses.job_memory`); a rule missing here
              stops the workflow at parse time
    local_rules  rules run on the machine that runs Snakemake (bookkeeping), besides the
              family's collect rule `<family>`, which always is
    checks    config -> messages (after "config: ") of what the family's settings contradict
              elsewhere in the configuration, checked before any job (after every family's
              `problems`, before the models)
    model_checks  (config, ModelFacts) -> messages of what the family's settings contradict
              in one model on this machine (`ModelFacts`: its
              layers, heads, tokenizer), checked before any job
    last_checks  config -> messages, checked once every other setting has been (so that
              they never hide another error)
    """

    name: str
    title: str
    tables: dict[str, tuple[str, ...]] = field(default_factory=dict)
    figures: tuple[Figure, ...] = ()
    problems: Callable[[dict], Iterable[str]] = lambda settings: ()
    corpus_roles: dict[str, tuple[str, ...]] = field(default_factory=dict)
    corpus_kinds: dict[str, tuple[str, ...]] = field(default_factory=dict)
    folder: bool = False
    map_bytes: Callable[[dict, int, int, int], dict[str, int]] = lambda *shape: {}
    needs: tuple[Needs, ...] = ()
    every_layer: tuple[str, ...] = ()
    part_bytes: Callable[[dict, ModelShape, int, int, int], int] | None = None
    shard_maps: tuple[str, ...] = ()
    run_pages: tuple[str, ...] = ()
    jobs: dict[str, Memory] = field(default_factory=dict)
    local_rules: tuple[str, ...] = ()
    checks: Callable[[dict], Iterable[str]] = lambda config: ()
    model_checks: Callable[[dict, ModelFacts], Iterable[str]] = lambda config, model: ()
    last_checks: Callable[[dict], Iterable[str]] = lambda config: ()

    def localrules(self) -> tuple[str, ...]:
        """The family's rules run where Snakemake runs: its collect rule and `local_rules`."""
        return (self.name, *self.local_rules)

    def folder_path(self, scope: str = "corpus") -> str:
        """Path pattern (wildcards model, corpus) of the family's folder of one scope."""
        return FOLDERS[scope].format(family=self.name)

    def shard_file(self, suffix: str) -> str:
        """Path pattern (wildcards model, corpus, shard) of a layer shard's file: `pkl` its
        accumulators, `h5` its maps (`pipeline.shards`)."""
        return f"{self.folder_path()}/shards/{{shard}}.{suffix}"

    def collected_shards(self) -> str:
        """Path pattern (wildcards model, corpus) of the folder the shards' files are moved
        to for the gathering job (the rule `collect_shards`, rules/shards.smk)."""
        return f"{self.folder_path()}/shards/collected"

    def table(self, file: str, scope: str = "corpus") -> str:
        """Path pattern (wildcards model, corpus) of a declared table; KeyError otherwise."""
        if file not in self.tables.get(scope, ()):
            raise KeyError(f"{self.name}: {scope} table {file!r} is not declared in outputs.py")
        return f"{self.folder_path(scope)}/{file}"

    def figure(self, name: str) -> Figure:
        for figure in self.figures:
            if figure.name == name:
                return figure
        raise KeyError(f"{self.name}: no figure {name!r} is declared in outputs.py")

    def figure_groups(self) -> list[FigureGroup]:
        """The family's figures in the groups that one job each draws (`FigureGroup`)."""
        groups: dict[str, list[Figure]] = {}
        scopes = {}
        for figure in self.figures:
            roles = [key for key, names in self.corpus_roles.items() if figure.name in names]
            parts = [figure.scope] if figure.scope != "corpus" else []
            parts += [key.removesuffix("_corpus") for key in roles]
            parts += ["every_layer"] if set(figure.tables) & set(self.every_layer) else []
            name = "_".join([f"{self.name}_figures", *parts])
            groups.setdefault(name, []).append(figure)
            scopes[name] = figure.scope
        return [FigureGroup(name, scopes[name], tuple(group)) for name, group in groups.items()]

    def corpora(self, settings: dict) -> list[str]:
        """The corpora the family reads: `corpora:` (a list), `corpus:` (one), or the corpora
        its `corpus_roles` settings name."""
        if self.corpus_roles:
            named = (settings.get(key) for key in self.corpus_roles)
            return list(dict.fromkeys(c for c in named if c))
        if "corpora" in settings:
            return list(settings["corpora"])
        return [settings["corpus"]] if settings.get("corpus") else []

    def corpus_keys(self, settings: dict) -> list[str]:
        """The setting keys that name the family's corpora (`corpus_roles`, or `corpora:` /
        `corpus:`)."""
        if self.corpus_roles:
            return list(self.corpus_roles)
        return ["corpora" if "corpora" in settings else "corpus"]

    def files(self) -> dict[str, list[str]]:
        """{scope: path patterns} of every table and figure, wildcards model and corpus."""
        out = {scope: [self.table(f, scope) for f in files] for scope, files in self.tables.items()}
        for figure in self.figures:
            out.setdefault(figure.scope, []).extend(figure_paths(self, figure))
        if self.run_pages:
            out.setdefault("all", []).extend(self.run_pages)
        return out

    def targets(self, settings: dict, models: list[str], every_layer: bool = True) -> list[str]:
        """Every output for the configured models and corpora ([] when switched off); without
        the `every_layer` tables and their figures when a subset of layers is analysed."""
        if not settings.get("enabled", True):
            return []
        files = self.files()
        out = [
            p.format(model=m, corpus=c)
            for c in self.corpora(settings)
            for p in self.corpus_files(settings, c, every_layer)
            for m in models
        ]
        out += [p.format(model=m) for p in files.get("model", []) for m in models]
        return out + files.get("all", [])

    def corpus_files(self, settings: dict, corpus: str, every_layer: bool = True) -> list[str]:
        """Path patterns of the corpus-scope tables and figures made for `corpus` (without
        the `every_layer` tables and their figures when `every_layer` is False)."""
        if self.folder:
            return [self.folder_path()]
        roles = [names for key, names in self.corpus_roles.items() if settings.get(key) == corpus]
        wanted = set().union(*roles) if self.corpus_roles else None
        left_out = set() if every_layer else set(self.every_layer)
        out = [
            self.table(f)
            for f in self.tables.get("corpus", ())
            if (wanted is None or f in wanted) and f not in left_out
        ]
        for figure in self.figures:
            if figure.scope != "corpus" or left_out & set(figure.tables):
                continue
            if wanted is None or figure.name in wanted:
                out += figure_paths(self, figure)
        return out

    def needs_every_layer(self) -> bool:
        """Whether every corpus table of the family needs every layer's states."""
        corpus = self.tables.get("corpus", ())
        return bool(corpus) and set(corpus) <= set(self.every_layer)


def figure_paths(family: Family, figure: Figure) -> list[str]:
    """The SVG and PNG path patterns of a figure."""
    if figure.scope == "all":
        stem = f"results/{family.name}_{figure.name}"
    else:
        stem = f"{FOLDERS[figure.scope].format(family=family.name)}/figures/{figure.name}"
    return [f"{stem}.{suffix}" for suffix in FIGURE_SUFFIXES]


def families() -> dict[str, Family]:
    """Every family of `attnscope.analyses` that declares its outputs, by name."""
    import attnscope.analyses as package

    found = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if (Path(package.__path__[0]) / info.name / "outputs.py").exists():
            family = importlib.import_module(f"attnscope.analyses.{info.name}.outputs").FAMILY
            found[family.name] = family
    model_figures = [f.name for fam in found.values() for f in fam.figures if f.scope == "model"]
    if len(model_figures) != len(set(model_figures)):
        raise ValueError(f"model-level figure names must be unique: {sorted(model_figures)}")
    return found
