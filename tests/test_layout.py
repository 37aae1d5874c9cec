"""The shape of the code base: one home per concept, outputs declared once.

- Only `attnscope.architectures` knows `transformers` module paths and branches on model_type.
- Every family's declared figures are drawn by its plots module with the declared tables,
  have a report caption, and every declared output is listed in the README.
- Only `CanonicalLayer.plan` reads a layer's block-order fields; everything else reads its plan.
- No analysis family imports another family's modules (shared maps live in `attnscope.maps`;
  files and settings read across families are declared as `Family.needs`).
"""

import ast
import importlib
import inspect
import re
from pathlib import Path

import pytest
import yaml

import attnscope
from attnscope.analyses.family import families, figure_paths
from attnscope.architectures import SUPPORTED_MODEL_TYPES

ROOT = Path(__file__).parents[1]
ARCHITECTURES = ROOT / "scripts" / "attnscope" / "architectures"
# Attribute names of transformers modules (BERT-like and GPT-2 architectures).
MODULE_ATTRIBUTES = {
    "encoder", "attention", "intermediate", "embeddings", "c_attn", "c_proj", "c_fc",
    "ln_1", "ln_2", "ln_f", "wte", "wpe", "h", "LayerNorm", "dense", "self_attn", "mlp",
}  # fmt: skip
MODULE_PATHS = ("encoder.layer", "attention.output", "attention.self", "cls.predictions", ".h[")


def python_files():
    for folder in ("scripts", "tools", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if ARCHITECTURES not in path.parents:
                yield path


def architecture_knowledge(path: Path) -> list[str]:
    """Lines of `path` that branch on model_type or name a transformers module path."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            names = [
                n.attr if isinstance(n, ast.Attribute) else getattr(n, "value", None)
                for part in (node.left, *node.comparators)
                for n in ast.walk(part)
                if isinstance(n, ast.Attribute | ast.Constant)
            ]
            if "model_type" in names:
                found.append(f"{path.name}:{node.lineno} compares model_type")
        if isinstance(node, ast.Attribute) and node.attr in MODULE_ATTRIBUTES:
            found.append(f"{path.name}:{node.lineno} module attribute .{node.attr}")
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if any(p in node.value for p in MODULE_PATHS) and not isinstance(node, ast.Expr):
                found.append(f"{path.name}:{node.lineno} module path in {node.value[:40]!r}")
    return found


def test_only_the_architectures_package_knows_transformers_modules():
    offences = [line for path in python_files() for line in architecture_knowledge(path)]
    assert offences == []


def test_the_layout_check_finds_what_it_looks_for(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        'if model.config.model_type == "gpt2":\n'
        "    y = model.encoder.layer[0]\n"
        'hook = getattr(model, "h")  # "encoder.layer.0"\n'
        'name = "transformer.h[0].attn.c_attn"\n'
    )
    found = architecture_knowledge(bad)
    assert len(found) == 3 and "compares model_type" in found[0]


# CanonicalLayer's block-order fields: read by `CanonicalLayer.plan` alone (core/canonical.py);
# every other module reads the layer's `BlockPlan`.
BLOCK_ORDER_FIELDS = {"pre_ln", "parallel", "ln_attn", "ln_ff", "post_attn", "post_ff"}
CANONICAL = ROOT / "scripts" / "attnscope" / "core" / "canonical.py"


def block_order_reads(path: Path) -> list[str]:
    """Lines of `path` that read one of a layer's block-order fields (attribute access)."""
    return [
        f"{path.name}:{node.lineno} reads .{node.attr}"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr in BLOCK_ORDER_FIELDS
    ]


def test_the_block_order_is_read_in_one_place():
    offences = [
        line for path in python_files() if path != CANONICAL for line in block_order_reads(path)
    ]
    assert offences == []


def test_the_block_order_check_finds_a_read(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "norm = layer.ln_attn if layer.pre_ln else None\n"
        "y = through(layer.plan.attn_out_norm, x)  # post_attn: fine in a comment\n"
        "z = replace(layer, ln_ff=None)\n"
    )
    assert sorted(block_order_reads(bad)) == ["bad.py:1 reads .ln_attn", "bad.py:1 reads .pre_ln"]


FAMILIES = families()


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_figures_match_their_declaration(name):
    """Each declared figure is drawn by the function of its name in the family's plots module
    (what `grep <figure>` finds), taking its tables, settings and title; it has a caption."""
    family = FAMILIES[name]
    if not family.figures:
        return
    plots = importlib.import_module(f"attnscope.analyses.{name}.plots")
    for figure in family.figures:
        expected = {t.split(".")[0] for t in figure.tables} | set(figure.settings) | {"title"}
        if figure.scope == "all":
            expected.add("models")
        params = inspect.signature(getattr(plots, figure.name)).parameters
        required = {k for k, p in params.items() if p.default is inspect.Parameter.empty}
        assert required <= expected <= set(params), figure.name
        caption = ROOT / "report" / name / f"{figure.name}.rst"
        assert caption.is_file() and caption.read_text().strip(), caption


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_figure_group_is_wanted_whole_or_not_at_all(name):
    """Each figure is in one group of one scope; whatever corpus role and layer subset a run
    has, it wants all of a corpus group's figures or none (a job makes all its outputs)."""
    family = FAMILIES[name]
    groups = family.figure_groups()
    drawn = [figure for group in groups for figure in group.figures]
    assert sorted(f.name for f in drawn) == sorted(f.name for f in family.figures)
    assert all({f.scope for f in group.figures} == {group.scope} for group in groups)
    settings = {key: f"corpus_{key}" for key in family.corpus_roles}
    corpora = list(settings.values()) or ["corpus"]
    for corpus in corpora:
        for every_layer in (True, False):
            wanted = set(family.corpus_files(settings, corpus, every_layer))
            for group in groups:
                if group.scope != "corpus":
                    continue
                paths = {p for f in group.figures for p in figure_paths(family, f)}
                assert paths <= wanted or not paths & wanted, (group.name, corpus, every_layer)


def test_plots_modules_and_declarations_import_without_torch():
    """Figures run in the plots environment, which has no torch; so do the family
    declarations (the registry `families()`), which the figure rules read."""
    drawn = [name for name, family in FAMILIES.items() if family.figures]
    imports = "\n".join(f"import attnscope.analyses.{name}.plots" for name in drawn)
    imports += "\nfrom attnscope.analyses.family import families\nfamilies()"
    code = f"import sys\n{imports}\nassert 'torch' not in sys.modules, 'torch was imported'"
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "scripts", capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-2000:]


def test_the_layout_page_lists_every_declared_family():
    """docs/layout.md's tree names each family of the registry (`families()`), and no other,
    under `analyses/<family>/`."""
    tree = (ROOT / "docs" / "layout.md").read_text().split("```")[1]
    listed = re.findall(r"^    ([a-z_]+)/ ", tree, flags=re.MULTILINE)
    assert sorted(listed) == sorted(FAMILIES)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_has_its_page_in_the_nav_and_its_tests(name):
    """docs/analyses/<family>.md, listed in mkdocs.yml's nav, and tests/test_<family>.py."""
    assert (ROOT / "docs" / "analyses" / f"{name}.md").is_file()
    assert f": analyses/{name}.md\n" in (ROOT / "mkdocs.yml").read_text()
    assert (ROOT / "tests" / f"test_{name}.py").is_file()


def test_the_built_in_config_and_the_schema_have_a_block_per_family():
    """config/config.yaml and config/schema.yaml give every declared family, and only those,
    a block under `analyses:`."""
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    assert sorted(config["analyses"]) == sorted(FAMILIES)
    assert sorted(schema["properties"]["analyses"]["properties"]) == sorted(FAMILIES)


def test_every_family_rule_has_its_memory_declared():
    """Each rule of rules/<family>.smk (read as text) but the family's local ones has a
    Memory in its declaration's `jobs`, and each declared job is such a rule (the Snakefile
    checks the same of the parsed rules, `check_declared_jobs`)."""
    for name, family in FAMILIES.items():
        text = (ROOT / "rules" / f"{name}.smk").read_text()
        defined = set(re.findall(r"^rule (\w+):", text, flags=re.MULTILINE))
        assert defined - set(family.localrules()) == set(family.jobs), name


def test_the_memory_terms_chunk_is_the_lm_heads():
    """job_memory (no torch) repeats the LM head's chunk size: held equal here."""
    from attnscope.analyses.job_memory import CHUNK_BYTES as counted
    from attnscope.core.lm_head import CHUNK_BYTES

    assert counted == CHUNK_BYTES


def imported_families(path: Path) -> set[str]:
    """The analysis families whose modules `path` imports (attnscope.analyses.<family>...)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["attnscope", "analyses"] and len(parts) > 2:
                found.add(parts[2])
    return found & set(FAMILIES)  # not the declaration modules every family shares


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_no_family_imports_another_familys_modules(name):
    """A family's modules, and its rules' scripts (scripts/<family>_*.py), import only its own
    package: what several families read is in `attnscope.maps` or declared in `Family.needs`."""
    package = ROOT / "scripts" / "attnscope" / "analyses" / name
    files = [*package.glob("*.py"), *(ROOT / "scripts").glob(f"{name}_*.py")]
    assert files
    crossing = {f.name: imported_families(f) - {name} for f in files}
    assert {f: names for f, names in crossing.items() if names} == {}


CONFIG_READ = re.compile(r'config\["analyses"\]\["(\w+)"\]\["(\w+)"\]')


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_settings_read_across_families_are_declared(name):
    """A family's rules and scripts read another family's settings only as declared in its
    `Family.needs` (params: `settings`; scripts reading the config: `bounds`)."""
    declared = {
        (need.family, key)
        for need in FAMILIES[name].needs
        for key in (*need.settings, *need.bounds)
    }
    files = [ROOT / "rules" / f"{name}.smk", *(ROOT / "scripts").glob(f"{name}_*.py")]
    read = {m.groups() for f in files for m in CONFIG_READ.finditer(f.read_text())}
    assert {(family, key) for family, key in read if family != name} <= declared


def test_the_import_check_finds_a_crossing(tmp_path):
    module = tmp_path / "payload.py"
    module.write_text("from attnscope.analyses.mixing.corpus_pass import corpus_pass\n")
    assert imported_families(module) == {"mixing"}


# A family's settings travel as one dataclass (`Job.settings`), not as a dozen keywords, and
# what travels together in maps/ as one small dataclass (`LayerInput`, `LayerBatch`): no
# function of analyses/, pipeline/ or maps/ takes more than this many parameters.
MAX_PARAMETERS = 8
# No function of the package is longer than this many lines (its signature, docstring and
# body), except these, each named with why it is not split yet.
MAX_LINES = 60
LONG_FUNCTIONS = {
    # the page assembled array by array, per layer and scope, in the viewer's order: to split
    # after #49 item 1, which changes how it receives the model at the same time
    "analyses/views/payload.py:sequence_page",
    # one store pass holding a layer's five outputs open at once: likewise after item 1
    "analyses/mixing/corpus_pass.py:corpus_pass",
    # the layer-streamed extraction, which item 1 moves into the model package
    "model/extract.py:extract_streamed",
}


def functions(root: Path, folders: list[str]):
    """("<folder>/<file>:<function>", node) of every function in `folders` under `root`."""
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    yield f"{path.relative_to(root).as_posix()}:{node.name}", node


def long_signatures(root: Path, folders: list[str]) -> dict[str, int]:
    """{"<folder>/<file>:<function>": parameter count} of the functions in `folders` (under
    `root`) that take more than MAX_PARAMETERS (a leading self or cls not counted, *args and
    **kwargs counted)."""
    found = {}
    for name, node in functions(root, folders):
        args = node.args
        names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
        count = len(names) - (names[:1] in (["self"], ["cls"]))
        count += (args.vararg is not None) + (args.kwarg is not None)
        if count > MAX_PARAMETERS:
            found[name] = count
    return found


def long_functions(root: Path, folders: list[str]) -> dict[str, int]:
    """{"<folder>/<file>:<function>": lines} of the functions in `folders` (under `root`)
    longer than MAX_LINES, from `def` to their last line."""
    found = {}
    for name, node in functions(root, folders):
        lines = node.end_lineno - node.lineno + 1
        if lines > MAX_LINES:
            found[name] = lines
    return found


def test_no_analysis_pipeline_or_maps_function_takes_nine_or_more_parameters():
    """A family's settings reach its functions as one dataclass (`Job.settings`); the
    per-layer algebra bundles what travels together."""
    found = long_signatures(Path(attnscope.__file__).parent, ["analyses", "pipeline", "maps"])
    assert found == {}


def test_no_function_of_the_package_is_longer_than_sixty_lines():
    """Every function of scripts/attnscope within MAX_LINES, but the named few."""
    found = long_functions(Path(attnscope.__file__).parent, ["."])
    assert set(found) - LONG_FUNCTIONS == set(), found
    assert LONG_FUNCTIONS <= set(found), "an allowed long function is short now: drop it"


def test_the_signature_check_counts_parameters(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "m.py").write_text(
        "def short(self, a, b, c, d, e, f, g, h): pass\n"
        "def long(a, b, c, d, e, f, g, *, h, i=0): pass\n"
        "class C:\n    def starred(self, a, b, c, d, e, f, g, *args, **kwargs): pass\n"
    )
    assert long_signatures(tmp_path, ["a"]) == {"a/m.py:long": 9, "a/m.py:starred": 9}


def test_the_length_check_counts_lines(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "m.py").write_text(
        "def short():\n" + "    x = 1\n" * (MAX_LINES - 1)
        + "class C:\n    def long(self):\n" + "        x = 1\n" * MAX_LINES
    )  # fmt: skip
    assert long_functions(tmp_path, ["a"]) == {"a/m.py:long": MAX_LINES + 1}


def test_job_settings_read_params_but_bounds_memory_and_device_from_the_config():
    """`Job.settings`: each field from the rule's param of its name; the bound (another
    family's where the settings say so), the working memory and the device from the
    configuration, which no param carries (changing them reruns nothing). A missing or
    unknown param is refused (tests/test_config_settings.py)."""
    from snakemake.iocontainers import Params

    from attnscope.analyses.norms.settings import NormsSettings
    from attnscope.analyses.views.settings import ViewsSettings
    from attnscope.pipeline.job import Job

    job = Job.__new__(Job)  # no process set-up (`runlog.start`): the settings alone
    job.rule = "norms_compute"
    job.params = Params(fromdict=dict(
        batch_size=3, spearman_sample_size=40, seed=7, maps_top_k=5, maps_dtype="float16",
        sample_rate=0.5, scatter_max_points=9,
    ))  # fmt: skip
    job.config = {
        "analyses": {
            "norms": {"max_rel_residual": 1e-4},
            "mixing": {"max_rel_residual": 2e-3, "depth_rel_residual": 3e-3},
        },
        "memory_budget_mb": 256,
        "device": "cpu",
    }
    norms = job.settings(NormsSettings)
    assert (norms.batch_size, norms.spearman_sample_size, norms.seed) == (3, 40, 7)
    assert (norms.maps_top_k, norms.maps_dtype) == (5, "float16")
    assert (norms.max_rel_residual, norms.memory_budget_mb, norms.device) == (1e-4, 256, "cpu")
    job.rule = "views_pages"
    job.params = Params(fromdict=dict(
        scopes=True, ig_steps=0, top_k=16, contrast=(), sequences=None, max_pages=2,
    ))  # fmt: skip
    views = job.settings(ViewsSettings)
    assert (views.scopes, views.top_k, views.max_rel_residual) == (True, 16, 2e-3)
    assert views.depth_rel_residual == 3e-3


# The params a script reads directly: none is a setting (settings are read through
# `Job.settings`, which refuses a missing or unknown one); file -> {param: what it is}.
PLAIN_PARAMS = {
    "acquire_data.py": {"relpath": "the data file's path under the mirror"},
    "acquire_model.py": {"spec": "the model's source block (models:), not an analysis's"},
    "config_snapshot.py": {"config": "the whole configuration, recorded"},
    "draw_figures.py": {
        "family": "the figures' family",
        "figures": "each figure's table stems, and its settings and title passed whole",
    },
    "encode_corpus.py": {"settings": "the corpus block (corpora:), not an analysis's"},
    "heads_overview.py": {"models": "the model names the overview page lists"},
    "heads_roles.py": {"links": "the atlas page's links to the other pages"},
    "attnscope/pipeline/shards.py": {"shards": "the layer shards (`shards:`): which layers"},
}


def params_read(path: Path) -> tuple[set[str], bool]:
    """(the params `path` reads by name as job.params.<name> or snakemake.params.<name>,
    whether it reads job.params or snakemake.params at all)."""
    text = path.read_text()
    named = set(re.findall(r"\b(?:job|snakemake)\.params\.(\w+)", text))
    return named, bool(re.search(r"\b(?:job|snakemake)\.params\b", text))


def stray_params(root: Path) -> dict[str, str]:
    """{script: what it reads} for every script under `root`/scripts that reads a param
    other than its PLAIN_PARAMS (pipeline/job.py, the home of `Job.settings`, aside)."""
    stray = {}
    for path in sorted((root / "scripts").rglob("*.py")):
        name = path.relative_to(root / "scripts").as_posix()
        if name == "attnscope/pipeline/job.py":
            continue
        named, reads = params_read(path)
        plain = PLAIN_PARAMS.get(name)
        if plain is None and reads:
            stray[name] = "job.params"
        elif plain is not None and named - set(plain):
            stray[name] = ", ".join(sorted(named - set(plain)))
    return stray


def test_scripts_read_their_settings_through_job_settings():
    """Every setting reaches its script through `Job.settings` (issue 49, item 2): a script
    reads job.params (snakemake.params) only for the params of PLAIN_PARAMS, which are no
    setting; and each of those is still read where it is named."""
    assert stray_params(ROOT) == {}
    for name, plain in PLAIN_PARAMS.items():
        named, reads = params_read(ROOT / "scripts" / name)
        assert reads and (named <= set(plain)), name


# The library's layers, lowest first: a module imports only from its own layer or lower ones.
# `attnscope` itself (__init__.py) is above them all.
LAYERS = ("core", "architectures", "data", "maps", "model", "analyses", "pipeline", "api")
# Known arrows back up, each with why it is still there: none today.
ALLOWED_BACK_ARROWS: dict[str, str] = {}


def import_graph(package: Path) -> dict[str, set[str]]:
    """{module: the package's modules it imports}, for every module of `package` (a folder),
    from every import statement, those inside functions included. `from a.b import c` is an
    import of the module a.b.c where there is one, else of a.b."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package `level - 1` above this one
                    base = ".".join(here[: len(here) - node.level + 1] + [base] * bool(base))
                targets |= {
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                }
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                graph.setdefault(name, set()).add(target)
        graph.setdefault(name, set())
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, directly or through others (the strongly
    connected components of more than one module), each sorted."""
    order, low, stack, found = {}, {}, [], []

    def visit(module):
        order[module] = low[module] = len(order)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in order:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], order[target])
        if low[module] == order[module]:
            group = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return found


def layer_rank(module: str) -> int:
    """The position of a module's layer in LAYERS (`attnscope` itself: above every layer)."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 else len(LAYERS)


def back_arrows(graph: dict[str, set[str]]) -> list[str]:
    """ "importer -> imported" for every import from a lower layer to a higher one."""
    return sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if layer_rank(module) < layer_rank(target)
    )


def test_the_import_graph_has_no_cycle_and_no_arrow_back_up():
    """Issue 49: no module imports, directly or through others, one that imports it, and no
    layer imports a higher one (LAYERS; docs/layout.md)."""
    graph = import_graph(Path(attnscope.__file__).parent)
    assert {module.split(".")[1] for module in graph if "." in module} <= set(LAYERS)
    assert import_cycles(graph) == []
    assert [arrow for arrow in back_arrows(graph) if arrow not in ALLOWED_BACK_ARROWS] == []


def test_the_import_graph_check_finds_a_cycle_and_an_arrow_back_up(tmp_path):
    package = tmp_path / "attnscope"
    for folder in ("core", "model", "pipeline"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "core" / "a.py").write_text("def f():\n    from attnscope.model import b\n")
    (package / "model" / "b.py").write_text("from . import c\n")
    (package / "model" / "c.py").write_text("from attnscope.core.a import f\n")
    (package / "pipeline" / "d.py").write_text("import attnscope.model.b\n")
    graph = import_graph(package)
    assert graph["attnscope.pipeline.d"] == {"attnscope.model.b"}
    assert import_cycles(graph) == [["attnscope.core.a", "attnscope.model.b", "attnscope.model.c"]]
    assert back_arrows(graph) == ["attnscope.core.a -> attnscope.model.b"]


def two_halves(root: Path) -> list[str]:
    """ "<file>:<function>" of the functions under `root` that take a model as two halves, its
    canonical `weights` and its `model` module, in place of the loaded model."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args
                names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
                if {"weights", "model"} <= names:
                    found.append(f"{path.relative_to(root).as_posix()}:{node.name}")
    return found


def test_no_analysis_takes_the_model_as_two_halves(tmp_path):
    """Issue 49, item 1: an analysis takes the loaded model (`model.loaded.LoadedModel`), not
    `(weights, model)`."""
    assert two_halves(Path(attnscope.__file__).parent / "analyses") == []
    (tmp_path / "m.py").write_text("def f(store, weights, model, settings): pass\n")
    assert two_halves(tmp_path) == ["m.py:f"]


# Issue 49, item 5: "family" names an analysis family only; an architecture (a transformers
# model type such as "bert", or what `architectures.architecture` returns) is an architecture.
MODEL_TYPES = set(SUPPORTED_MODEL_TYPES)
# The functions that take a model type first (tests/conftest.py's tiny models).
TAKES_A_MODEL_TYPE = re.compile(
    r"^(architecture|tiny_config|tiny_model|tiny_batch|write_tiny_\w+)$"
)


def says_family(name: str) -> bool:
    """`family`, `families`, `classic_family`, `family_name`... (a word of the name)."""
    return bool({"family", "families"} & set(name.lower().split("_")))


def _name(node) -> str:
    """The called or named thing's last name (`f`, `a.b.f` -> "f"); "" for anything else."""
    return getattr(node, "id", None) or getattr(node, "attr", None) or ""


def _constants(tree: ast.Module, conftest: ast.Module) -> dict[str, ast.AST]:
    """{module-level name: its value} of `tree`, and of tests/conftest.py beneath it."""
    values = {}
    for module in (conftest, tree):
        for node in module.body:
            if isinstance(node, ast.Assign):
                values.update({_name(t): node.value for t in node.targets if _name(t)})
    return values


def names_model_types(node, constants: dict, seen: frozenset = frozenset()) -> bool:
    """Whether `node` holds a transformers model type: a literal ("bert"), a `MODEL_TYPES` or
    `SUPPORTED_MODEL_TYPES`, or a module-level name whose value does."""
    for part in ast.walk(node):
        if isinstance(part, ast.Constant) and part.value in MODEL_TYPES:
            return True
        name = _name(part)
        if name.endswith("MODEL_TYPES"):
            return True
        if isinstance(part, ast.Name) and name in constants and name not in seen:
            if names_model_types(constants[name], constants, seen | {name}):
                return True
    return False


def architectures_named_family(path: Path, conftest: ast.Module) -> list[str]:
    """Lines of `path` where a name saying "family" holds an architecture: bound to what
    `architecture(...)` returns or to a `.model_type`; passed to `architecture` or a tiny-model
    helper; compared with a model type; a fixture or parametrize over model types."""
    tree = ast.parse(path.read_text())
    constants = _constants(tree, conftest)
    found = []
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr) and node.value:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            named = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
            value = [
                _name(n.func) if isinstance(n, ast.Call) else _name(n) for n in ast.walk(node.value)
            ]
            if any(map(says_family, named)) and {"architecture", "model_type"} & set(value):
                found.append(f"{where} {', '.join(named)} = an architecture")
        if isinstance(node, ast.Call) and TAKES_A_MODEL_TYPE.match(_name(node.func)):
            given = [*node.args, *(k.value for k in node.keywords)]
            for arg in given:
                if isinstance(arg, ast.Name) and says_family(arg.id):
                    found.append(f"{where} {arg.id} passed to {_name(node.func)}")
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = [s.id for s in sides if isinstance(s, ast.Name) and says_family(s.id)]
            if named and any(names_model_types(s, constants) for s in sides):
                found.append(f"{where} {named[0]} compared with a model type")
        if isinstance(node, ast.FunctionDef) and says_family(node.name):
            for decorator in node.decorator_list:
                params = [k.value for k in getattr(decorator, "keywords", []) if k.arg == "params"]
                if params and names_model_types(params[0], constants):
                    found.append(f"{where} fixture {node.name} over model types")
        if isinstance(node, ast.Call) and _name(node.func) == "parametrize" and node.args:
            argnames = [n.value for n in ast.walk(node.args[0]) if isinstance(n, ast.Constant)]
            named = [w for w in re.split(r"[\s,]+", " ".join(argnames)) if says_family(w)]
            if named and names_model_types(node.args[1], constants):
                found.append(f"{where} parametrize {named[0]} over model types")
    return sorted(found, key=lambda line: int(line.split(":")[1].split()[0]))


def test_family_names_an_analysis_family_only():
    conftest = ast.parse((ROOT / "tests" / "conftest.py").read_text())
    files = [*python_files(), *sorted((ROOT / "tests").glob("*.py"))]
    offences = [line for path in files for line in architectures_named_family(path, conftest)]
    assert offences == []


def test_the_family_name_check_finds_an_architecture(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "family = architecture(model.config.model_type)\n"
        "families = [architectures.architecture(t) for t in types]\n"
        "kind = family_of(model.config.model_type)\n"
        "model = tiny_model(family, seed=1)\n"
        'if family == "bert": pass\n'
        'if family == "views": pass\n'
        "@pytest.fixture(params=CLASSIC)\n"
        "def classic_family(request): return request.param\n"
        "@pytest.fixture(params=CLASSIC)\n"
        "def architecture(request): return request.param\n"
        '@pytest.mark.parametrize(("family", "n"), [("gpt_neox", 3)])\n'
        "def test_a(family, n): pass\n"
        '@pytest.mark.parametrize("family", sorted(FAMILIES))\n'
        "def test_b(family): pass\n"
    )
    conftest = ast.parse('CLASSIC = ("bert", "gpt2")\nFAMILIES = ("views", "norms")\n')
    found = [line.split(" ", 1)[1] for line in architectures_named_family(bad, conftest)]
    assert found == [
        "family = an architecture",
        "families = an architecture",
        "family passed to tiny_model",
        "family compared with a model type",
        "fixture classic_family over model types",
        "parametrize family over model types",
    ]
