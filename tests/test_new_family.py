"""CONTRIBUTING.md's family recipe lists every file a new family touches: a throwaway family
`toy` is added to a copy of the workflow by writing exactly the files the recipe names (and
no other), and the copy's dry run plans its job, its memory estimate counts it, and its
declaration agrees with the layout checks. A recipe that omits a needed file fails here."""

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[1]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"
FAMILY = "toy"
SECTION = "## Add an analysis family"
COPIED = ("Snakefile", "rules", "scripts", "config", "report", "envs", "mkdocs.yml", "docs")


def recipe_paths() -> list[str]:
    """The files a new family touches: the path in backticks that opens each numbered step
    of CONTRIBUTING.md's family recipe."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\d+\. `([^`]+)`", section, flags=re.MULTILINE)


def write(root: Path, relative: str, text: str, append: bool = False) -> None:
    """Write (or append to) a file of the copy, the text's common indentation removed."""
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    text = textwrap.dedent(text)
    path.write_text(path.read_text() + text if append else text.lstrip())


def package(root: Path) -> None:
    write(root, f"scripts/attnscope/analyses/{FAMILY}/__init__.py", '"""A throwaway family."""\n')
    write(
        root,
        f"scripts/attnscope/analyses/{FAMILY}/counting.py",
        '''
        """The pieces of a batch: a known answer."""


        def pieces(mask) -> int:
            return int(sum(sum(row) for row in mask))
        ''',
    )


def declaration(root: Path) -> None:
    write(
        root,
        f"scripts/attnscope/analyses/{FAMILY}/outputs.py",
        '''
        """Outputs of the throwaway family."""

        from attnscope.analyses.job_memory import Memory
        from attnscope.analyses.family import Family, Figure


        def count_bytes(size, budget_mb, settings):
            """A formula far above any other job's: the largest job of every corpus read."""
            return 2**50 + settings["scale"]


        FAMILY = Family(
            name="toy",
            title="A throwaway family",
            tables={"corpus": ("counts.tsv",)},
            figures=(Figure("counts", "corpus", ("counts.tsv",)),),
            jobs={"toy_count": Memory(count_bytes)},
        )
        ''',
    )


def settings(root: Path) -> None:
    write(
        root,
        f"scripts/attnscope/analyses/{FAMILY}/settings.py",
        '''
        """The throwaway family's settings."""

        from dataclasses import dataclass
        from typing import ClassVar

        from attnscope.core.settings import setting


        @dataclass(frozen=True)
        class ToySettings:
            family: ClassVar[str] = "toy"
            scale: int = setting("a scale", 1, minimum=1)
        ''',
    )


def plots(root: Path) -> None:
    write(
        root,
        f"scripts/attnscope/analyses/{FAMILY}/plots.py",
        '''
        """The throwaway family's figure (no torch)."""


        def counts(counts, title):
            import matplotlib.pyplot as plt

            figure, axes = plt.subplots()
            axes.bar(counts["layer"], counts["pieces"])
            axes.set_title(title)
            return figure
        ''',
    )


def rules(root: Path) -> None:
    write(
        root,
        f"rules/{FAMILY}.smk",
        """
        TOY = config["analyses"]["toy"]
        TOY_OUT = FAMILIES["toy"]


        rule toy_count:
            input:
                hidden_states=hidden_states,
            output:
                counts=TOY_OUT.table("counts.tsv"),
            log:
                "results/{model}/{corpus}/logs/toy_count.log",
            conda:
                "../envs/model.yaml"
            params:
                **settings_params("toy", "ToySettings"),
            script:
                "../scripts/toy_count.py"
        """,
    )


def script(root: Path) -> None:
    write(
        root,
        f"scripts/{FAMILY}_count.py",
        '''
        """The throwaway family's one job."""

        from attnscope.analyses.toy.settings import ToySettings
        from attnscope.pipeline.job import Job

        job = Job(snakemake)
        job.log.info("scale %d", job.settings(ToySettings).scale)
        ''',
    )


def schema(root: Path) -> None:
    path = root / "config" / "schema.yaml"
    tree = yaml.safe_load(path.read_text())
    tree["properties"]["analyses"]["properties"][FAMILY] = {
        "type": "object",
        "default": {},
        "additionalProperties": False,
        "properties": {
            "enabled": {"$ref": "#/$defs/enabled", "default": True},
            "corpora": {"$ref": "#/$defs/corpus_list", "default": ["wiki"]},
            "scale": {"type": "integer", "minimum": 1, "default": 1, "description": "a scale"},
        },
    }
    path.write_text(yaml.safe_dump(tree, sort_keys=False))


def built_in_config(root: Path) -> None:
    path = root / "config" / "config.yaml"
    tree = yaml.safe_load(path.read_text())
    tree["analyses"][FAMILY] = {"corpora": ["wiki"], "scale": 1}
    path.write_text(yaml.safe_dump(tree, sort_keys=False))


def caption(root: Path) -> None:
    write(root, f"report/{FAMILY}/counts.rst", "Pieces per layer (a throwaway family).\n")


def page(root: Path) -> None:
    write(root, f"docs/analyses/{FAMILY}.md", "# Toy\n\n`counts.tsv`: pieces; figure counts.\n")


def nav(root: Path) -> None:
    path = root / "mkdocs.yml"
    text = path.read_text()
    anchor = "      - Head roles (the atlas): analyses/heads.md\n"
    assert anchor in text, "mkdocs.yml's nav moved: update this test's writer"
    path.write_text(text.replace(anchor, anchor + f"      - Toy: analyses/{FAMILY}.md\n"))


def layout(root: Path) -> None:
    path = root / "docs" / "layout.md"
    text = path.read_text()
    anchor = "    heads/ "
    assert anchor in text, "docs/layout.md's tree moved: update this test's writer"
    path.write_text(text.replace(anchor, f"    {FAMILY}/           counting\n{anchor}", 1))


def unit_test(root: Path) -> None:
    write(
        root,
        f"tests/test_{FAMILY}.py",
        """
        from attnscope.analyses.toy.counting import pieces


        def test_pieces_counts_the_mask():
            assert pieces([[1, 1, 0], [1, 0, 0]]) == 3
        """,
    )


# How to write each file a recipe step names, by its path with `<family>` (and `<step>`).
WRITERS = {
    "scripts/attnscope/analyses/<family>/__init__.py": package,
    "scripts/attnscope/analyses/<family>/outputs.py": declaration,
    "scripts/attnscope/analyses/<family>/settings.py": settings,
    "scripts/attnscope/analyses/<family>/plots.py": plots,
    "rules/<family>.smk": rules,
    "scripts/<family>_<step>.py": script,
    "config/schema.yaml": schema,
    "config/config.yaml": built_in_config,
    "report/<family>/<figure>.rst": caption,
    "docs/analyses/<family>.md": page,
    "mkdocs.yml": nav,
    "docs/layout.md": layout,
    "tests/test_<family>.py": unit_test,
}


def copy_with_family(destination: Path, paths: list[str]) -> Path:
    """A copy of the workflow with the throwaway family written by the recipe's steps."""
    destination.mkdir(parents=True)
    unknown = [path for path in paths if path not in WRITERS]
    assert not unknown, f"the recipe names {unknown}: teach WRITERS how to add them"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "site", "reference")
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, destination / name, ignore=ignore)
        else:
            shutil.copy2(source, destination / name)
    (destination / "tests").mkdir()
    for name in ("conftest.py", "test_layout.py"):
        shutil.copy2(ROOT / "tests" / name, destination / "tests" / name)
    for path in paths:
        WRITERS[path](destination)
    return destination


def run(command: list[str], root: Path) -> subprocess.CompletedProcess:
    """A command in the copy, with the copy's scripts first on the path."""
    env = {**os.environ, "PYTHONPATH": str(root / "scripts")}
    return subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=600)


def user_config(model_dir: Path) -> dict:
    """One tiny model on one small corpus, every built-in family but the throwaway off."""
    from attnscope.analyses.family import families

    mirror = os.environ.get("ATTNSCOPE_MIRROR", str(ROOT.parent / "shared" / "data"))
    return {
        "models": {"tiny": {"source": "path", "path": str(model_dir)}},
        "mirror": mirror,
        "corpora": {"wiki": {"kind": "wiki", "n_sequences": 2, "max_length": 32}},
        "analyses": {name: {"enabled": False} for name in families()},
    }


# The modules the family's scripts import (each script's `from ... import`), imported.
IMPORTS = """
import ast, importlib, pathlib
for script in sorted(pathlib.Path("scripts").glob("toy_*.py")):
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = importlib.import_module(node.module)
            for alias in node.names:
                getattr(module, alias.name)
    print("IMPORTED", script.name)
"""

# The memory estimate of the run: the built-in config with the user's models, corpora and
# mirror in place of its own and the user's analyses blocks over its own, then the schema's
# defaults (as the Snakefile makes it).
ESTIMATE = """
import sys, yaml
from snakemake.utils import validate
from attnscope.pipeline.memory_estimate import estimate
from attnscope.analyses.family import families
config = yaml.safe_load(open("config/config.yaml"))
user = yaml.safe_load(open(sys.argv[1]))
config.update(models=user["models"], corpora=user["corpora"], mirror=user["mirror"])
for name, block in user["analyses"].items():
    config["analyses"].setdefault(name, {}).update(block)
validate(config, "config/schema.yaml")
for job in estimate(config, families()):
    print("ESTIMATED", job.model, job.corpus, job.job, job.bytes)
"""


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from conftest import write_tiny_minilm_bert

    return write_tiny_minilm_bert(tmp_path_factory.mktemp("tiny-bert"), positions=64)


def test_the_recipe_names_each_file_once_and_every_one_exists_for_norms():
    paths = recipe_paths()
    assert len(paths) == len(set(paths)) >= 10, paths
    examples = [p.replace("<family>", "norms").replace("<step>", "compute") for p in paths]
    examples = [p.replace("<figure>", "sep_heads") for p in examples]
    assert [p for p in examples if not (ROOT / p).exists()] == []


def test_a_family_added_by_the_recipe_alone_is_planned_and_estimated(tmp_path, tiny_model_dir):
    root = copy_with_family(tmp_path / "repo", recipe_paths())
    configfile = tmp_path / "user.yaml"
    configfile.write_text(yaml.safe_dump(user_config(tiny_model_dir)))
    dry = run([str(SNAKEMAKE), FAMILY, "-n", "--cores", "1", "--configfile", str(configfile)], root)
    text = dry.stdout + dry.stderr
    assert dry.returncode == 0, text[-4000:]
    assert re.search(r"^toy_count\s+1$", text, flags=re.MULTILINE), text[-4000:]
    assert re.search(rf"^{FAMILY}\s+1$", text, flags=re.MULTILINE), text[-4000:]  # collect rule
    assert "results/tiny/wiki/toy/counts.tsv" in text
    assert "results/tiny/wiki/toy/figures/counts.svg" in text
    estimated = run([sys.executable, "-c", ESTIMATE, str(configfile)], root)
    assert estimated.returncode == 0, estimated.stderr[-4000:]
    assert f"ESTIMATED tiny wiki toy_count {2**50 + 1}" in estimated.stdout, estimated.stdout
    imported = run([sys.executable, "-c", IMPORTS], root)
    assert imported.returncode == 0 and "IMPORTED toy_count.py" in imported.stdout, imported.stderr
    checks = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "tests/test_layout.py",
    ]
    checks += ["-k", "toy or layout_page or memory_declared or built_in_config"]
    layout = run(checks, root)
    assert layout.returncode == 0, layout.stdout[-4000:]


def test_a_family_job_without_a_memory_declaration_stops_the_workflow(tmp_path, tiny_model_dir):
    """A second rule in the throwaway family's rules file, declared nowhere: the dry run stops
    before any job, naming the rule and the declaration to edit."""
    root = copy_with_family(tmp_path / "repo", recipe_paths())
    extra = """

        rule toy_extra:
            input:
                hidden_states=hidden_states,
            output:
                "results/{model}/{corpus}/toy/extra.txt",
            script:
                "../scripts/toy_count.py"
        """
    write(root, f"rules/{FAMILY}.smk", extra, True)
    configfile = tmp_path / "user.yaml"
    configfile.write_text(yaml.safe_dump(user_config(tiny_model_dir)))
    dry = run([str(SNAKEMAKE), FAMILY, "-n", "--cores", "1", "--configfile", str(configfile)], root)
    text = dry.stdout + dry.stderr
    assert dry.returncode != 0
    assert "rules/toy.smk: rule(s) toy_extra have no memory declaration" in text, text[-3000:]
    assert "scripts/attnscope/analyses/toy/outputs.py" in text
