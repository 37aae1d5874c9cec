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
from attnscope.pipeline.outputs import families

ROOT = Path(__file__).parents[1]
ARCHITECTURES = ROOT / "scripts" / "attnscope" / "architectures"
# Attribute names of transformers modules (BERT-like and GPT-2 families).
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


def test_plots_modules_and_declarations_import_without_torch():
    """Figures run in the plots environment, which has no torch; so do the family
    declarations (the registry `families()`), which the figure rules read."""
    drawn = [name for name, family in FAMILIES.items() if family.figures]
    imports = "\n".join(f"import attnscope.analyses.{name}.plots" for name in drawn)
    imports += "\nfrom attnscope.pipeline.outputs import families\nfamilies()"
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
    from attnscope.core.lm_head import CHUNK_BYTES
    from attnscope.pipeline.job_memory import CHUNK_BYTES as counted

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
    return found


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


# A family's settings travel as one dataclass (`Job.settings`), not as a dozen keywords:
# no function of analyses/ or pipeline/ takes more than this many parameters.
MAX_PARAMETERS = 8


def long_signatures(root: Path, folders: list[str]) -> dict[str, int]:
    """{"<folder>/<file>:<function>": parameter count} of the functions in `folders` (under
    `root`) that take more than MAX_PARAMETERS (a leading self or cls not counted, *args and
    **kwargs counted)."""
    found = {}
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    args = node.args
                    names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
                    count = len(names) - (names[:1] in (["self"], ["cls"]))
                    count += (args.vararg is not None) + (args.kwarg is not None)
                    if count > MAX_PARAMETERS:
                        found[f"{path.relative_to(root).as_posix()}:{node.name}"] = count
    return found


def test_no_analysis_or_pipeline_function_takes_nine_or_more_parameters():
    """A family's settings reach its functions as one dataclass (`Job.settings`)."""
    found = long_signatures(Path(attnscope.__file__).parent, ["analyses", "pipeline"])
    assert found == {}


def test_the_signature_check_counts_parameters(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "m.py").write_text(
        "def short(self, a, b, c, d, e, f, g, h): pass\n"
        "def long(a, b, c, d, e, f, g, *, h, i=0): pass\n"
        "class C:\n    def starred(self, a, b, c, d, e, f, g, *args, **kwargs): pass\n"
    )
    assert long_signatures(tmp_path, ["a"]) == {"a/m.py:long": 9, "a/m.py:starred": 9}


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
    "draw_figure.py": {
        "family": "the figure's family",
        "figure": "the figure's name",
        "settings": "its family's figure settings and title, passed whole to the drawing",
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
