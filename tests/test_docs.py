"""The documentation keeps up with the code.

- `mkdocs build --strict` passes offline (no warning, every internal link and anchor valid).
- The built site names every key of config/schema.yaml, every registered model type and every
  output a family declares; each family's own page names its declared tables and figures.
- Every file path CONTRIBUTING.md names exists; the README stays one screen and keeps the
  command CI runs.
"""

import re
import shutil
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest
import yaml

from attnscope.analyses.family import families, figure_paths
from attnscope.architectures import SUPPORTED_MODEL_TYPES

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import docs_pages  # noqa: E402

FAMILIES = families()
# Stand-ins for the placeholders of CONTRIBUTING.md's paths: an example that exists.
EXAMPLES = {
    "family": "norms",
    "figure": "sep_heads",
    "kind": "wiki",
    "architecture": "neox",
    "step": "compute",
}


def build(docs_dir: Path, site: Path) -> subprocess.CompletedProcess:
    """`mkdocs build --strict` of mkdocs.yml with `docs_dir` into `site`."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config.update(docs_dir=str(docs_dir), site_dir=str(site))
    config["hooks"] = [str(ROOT / hook) for hook in config["hooks"]]
    path = site.parent / f"{site.name}.yml"
    path.write_text(yaml.safe_dump(config))
    mkdocs = Path(sys.executable).parent / "mkdocs"
    return subprocess.run(
        [str(mkdocs), "build", "--strict", "--config-file", str(path)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "HOME": str(site.parent)},
    )


def text_of(html: str) -> str:
    """The visible text of a page (tags dropped, entities decoded)."""
    return unescape(re.sub(r"<[^>]+>", "", html))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """{page path: visible text} of the site built from docs/."""
    out = tmp_path_factory.mktemp("docs") / "site"
    done = build(ROOT / "docs", out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    pages = {str(page.relative_to(out)): page.read_text() for page in out.rglob("*.html")}
    fetched = [
        (name, url)
        for name, html in pages.items()
        for url in re.findall(r'<(?:script|link)[^>]*(?:src|href)="(https?://[^"]+)"', html)
    ]
    assert fetched == [], "the site must work offline"
    return {name: text_of(html) for name, html in pages.items() if name != "404.html"}


def test_the_site_builds_strictly_offline(site):
    """Built with --strict, and no page fetches a script, style or font (the fixture)."""
    assert "reference/configuration.html" in site and "analyses/mixing.html" in site


def test_a_broken_link_fails_the_build(tmp_path):
    """The strict build is a real check: a link to a missing page or anchor stops it."""
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    with (docs / "troubleshooting.md").open("a") as page:
        page.write("\n[gone](analyses/no-such-family.md)\n")
    done = build(docs, tmp_path / "site")
    assert done.returncode != 0 and "no-such-family.md" in done.stdout + done.stderr


def test_every_schema_key_is_documented(site):
    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    keys = [path for path, node in docs_pages.schema_keys(schema)]
    assert len(keys) > 80
    missing = [key for key in keys if key not in site["reference/configuration.html"]]
    assert missing == []


def test_a_new_schema_key_reaches_the_reference():
    """The reference is made from the schema: a key added there is listed, with its default."""
    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    weights = schema["properties"]["analyses"]["properties"]["weights"]["properties"]
    weights["brand_new"] = {"type": "integer", "default": 7, "description": "a new key"}
    page = docs_pages.configuration_page(schema, {})
    assert "| `analyses.weights.brand_new` | integer | `7` | a new key |" in page


def test_every_registered_architecture_is_documented(site):
    assert len(SUPPORTED_MODEL_TYPES) == 21
    table = site["reference/architectures.html"]
    assert [t for t in SUPPORTED_MODEL_TYPES if t not in table] == []
    anatomy = site["models.html"]
    assert [t for t in SUPPORTED_MODEL_TYPES if t not in anatomy] == []


def declared(name: str) -> list[str]:
    """A family's declared tables (file names) and figures (names)."""
    family = FAMILIES[name]
    return [f for files in family.tables.values() for f in files] + [f.name for f in family.figures]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_declared_output_is_documented(site, name):
    """In the generated reference with its path, and on the family's own page, which says
    what it holds."""
    family = FAMILIES[name]
    reference = site["reference/outputs.html"]
    paths = [family.table(f, s) for s, files in family.tables.items() for f in files]
    paths += [figure_paths(family, f)[0].rsplit(".", 1)[0] for f in family.figures]
    assert [p for p in paths if p not in reference] == []
    page = site[f"analyses/{name}.html"]
    assert [output for output in declared(name) if output not in page] == []


def repository_paths(markdown: str) -> list[str]:
    """File paths named in backticks or as link targets: with a slash or a file suffix."""
    names = re.findall(r"`([^`\s]+)`", markdown) + re.findall(r"\]\(([^)\s#]+)", markdown)
    suffix = re.compile(r"\.(py|smk|ya?ml|md|rst|toml|cff|ipynb)$")
    return [n for n in names if ("/" in n or suffix.search(n)) and not n.startswith(("http", "."))]


def test_every_path_in_contributing_exists():
    paths = repository_paths((ROOT / "CONTRIBUTING.md").read_text())
    assert len(paths) > 20
    filled = [re.sub(r"<(\w+)>", lambda m: EXAMPLES[m.group(1)], path) for path in paths]
    assert [p for p in filled if not (ROOT / p).exists()] == []


def test_the_path_check_finds_a_missing_file():
    paths = repository_paths("Edit `scripts/attnscope/nothing_here.py` and [x](docs/none.md).")
    assert paths == ["scripts/attnscope/nothing_here.py", "docs/none.md"]
    assert not any((ROOT / p).exists() for p in paths)


def test_the_readme_is_one_screen_with_the_ci_command():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 150
    assert "make test MIRROR=../shared/data" in readme
    assert "## What the default run finds" in readme


def test_every_corpus_kind_is_in_the_corpora_table():
    """The registry of corpus kinds is the Corpora table's rows, in order, on the
    configuration page (the README's table moved there)."""
    from attnscope.data.corpora import KINDS

    page = (ROOT / "docs" / "configuration.md").read_text()
    table = page.split("## Corpora", 1)[1].split("\n\n", 2)[1]
    assert [row.split("`")[1] for row in table.splitlines()[2:]] == list(KINDS)
