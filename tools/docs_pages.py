"""The generated pages of the docs site, made from the code's own declarations.

- reference/configuration.md  every key of config/schema.yaml: type, default (config/config.yaml,
                              else the schema's), description
- reference/architectures.md  every model type of the registry (attnscope.architectures)
- reference/outputs.md        every table and figure each family declares in
                              analyses/<family>/outputs.py, with its path and, for a figure,
                              its report caption (report/<family>/<figure>.rst)

`mkdocs build` runs this file as a hook (mkdocs.yml `hooks:`): `on_files` adds the pages to the
site without writing them into docs/. `python tools/docs_pages.py OUT` writes them into OUT.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("reference/configuration.md", "reference/architectures.md", "reference/outputs.md")


def _attnscope():
    """Import the worktree's attnscope (scripts/ first on the path); it loads no torch."""
    scripts = str(ROOT / "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    import attnscope.architectures
    import attnscope.pipeline.outputs

    return attnscope


# --- configuration -------------------------------------------------------------------------


def _resolve(node: dict, defs: dict) -> dict:
    """A schema node with its local `$ref` (#/$defs/...) merged in; the node's own keys win."""
    if "$ref" not in node:
        return node
    target = defs[node["$ref"].rsplit("/", 1)[1]]
    return {**_resolve(target, defs), **{k: v for k, v in node.items() if k != "$ref"}}


def _type(node: dict) -> str:
    """The accepted values of a schema node, in words."""
    if "enum" in node:
        return "one of " + ", ".join(f"`{v}`" for v in node["enum"])
    if "const" in node:
        return f"`{node['const']}`"
    if "oneOf" in node and "type" not in node:
        return " or ".join(_type(option) for option in node["oneOf"])
    kind = node.get("type", "any")
    if kind == "array" and isinstance(node.get("items"), dict):
        return f"list of {_type(node['items'])}"
    if kind == "object" and "additionalProperties" in node and "properties" not in node:
        return "mapping"
    signs = {"minimum": "≥", "exclusiveMinimum": ">", "maximum": "≤"}
    bounds = [f"{sign} {node[key]}" for key, sign in signs.items() if key in node]
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def _lookup(config: dict, path: list[str]):
    """The value at `path` in the default config, or KeyError."""
    value = config
    for part in path:
        if not isinstance(value, dict) or part not in value:
            raise KeyError(part)
        value = value[part]
    return value


def _value(value) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    text = text.removesuffix("...").strip()
    return f"`{text}`" if text else "`''`"


# Keys config/schema.yaml gives no description (better moved into the schema itself).
UNDESCRIBED = {
    "models": "the models to analyse, by a name of your choice (replaces the built-in ones)",
    "models.<name>.source": "package (a PyPI package), hub (repo + revision) or path (a folder"
    " or a .gguf file)",
    "mirror": "folder laid out like shared/data (and models/<repo> for hub models); empty:"
    " download from the pinned upstream addresses",
    "batch_size": "sequences per forward pass of the extraction and per analysis batch",
    "corpora": "the corpora, by a name of your choice (replaces the built-in ones)",
    "corpora.<name>.kind": "which builder reads the corpus (see Corpora)",
    "analyses": "one block per analysis family",
    **{
        f"analyses.{family}": f"settings of the {family} family"
        for family in _attnscope().pipeline.outputs.families()
    },
    "cluster.cpu_partition": "SLURM partition of the jobs that ask for no GPU",
    "cluster.gpu_partition": "SLURM partition of the jobs that ask for a GPU",
}


def schema_keys(schema: dict) -> list[tuple[str, dict]]:
    """Every key of the schema as (dotted path, node), depth first; `<name>` stands for a
    name the user chooses (a model, a corpus, a view's corpus)."""
    defs = schema.get("$defs", {})
    found = []

    def walk(node: dict, prefix: str) -> None:
        node = _resolve(node, defs)
        for key, child in node.get("properties", {}).items():
            child = _resolve(child, defs)
            path = f"{prefix}{key}"
            found.append((path, child))
            walk(child, f"{path}.")
        named = node.get("additionalProperties")
        if isinstance(named, dict) and "properties" in _resolve(named, defs):
            walk(named, f"{prefix}<name>.")

    walk(schema, "")
    return found


def configuration_page(schema: dict, config: dict) -> str:
    """The configuration reference: one row per schema key."""
    lines = [
        "# Configuration reference",
        "",
        "Generated by `tools/docs_pages.py` from `config/schema.yaml` (types, descriptions) and",
        "`config/config.yaml` (defaults; the schema's default where the file leaves a key out).",
        "Every key is checked before any job runs; a bad value stops the run naming the key.",
        "How the files combine is on [Configuration](../configuration.md).",
        "",
        "| key | type | default | description |",
        "|---|---|---|---|",
    ]
    for path, node in schema_keys(schema):
        try:
            value = _lookup(config, path.split("."))
        except KeyError:
            value = node.get("default")
        if "properties" in node:  # a block: its keys follow, each with its default
            default = "(keys below)"
        elif isinstance(value, dict) and value and "additionalProperties" in node:
            default = "names " + ", ".join(f"`{name}`" for name in value)
        else:
            default = "—" if value is None and "default" not in node else _value(value)
        required = "required" if _required(schema, path) else ""
        description = " ".join(str(node.get("description", UNDESCRIBED.get(path, ""))).split())
        description = "; ".join(filter(None, (required, description))) or "—"
        description = description.replace("|", "\\|")
        kind = _type(node).replace("|", "\\|")
        lines.append(f"| `{path}` | {kind} | {default} | {description} |")
    return "\n".join(lines) + "\n"


def _required(schema: dict, path: str) -> bool:
    """Whether the schema requires the key at `path` (top level and `<name>` blocks)."""
    parts = path.split(".")
    node = schema
    for part in parts[:-1]:
        node = node["additionalProperties"] if part == "<name>" else node["properties"][part]
    return parts[-1] in node.get("required", ())


# --- architectures -------------------------------------------------------------------------


def architectures_page() -> str:
    """The registry: every model type with its architecture module and what it declares."""
    registry = _attnscope().architectures
    lines = [
        "# Architectures (registry)",
        "",
        "Generated by `tools/docs_pages.py` from `scripts/attnscope/architectures/`"
        " (`ARCHITECTURES`).",
        f"{len(registry.SUPPORTED_MODEL_TYPES)} `model_type` values in"
        f" {len(registry.ARCHITECTURES)} architecture modules; `config.json`'s `model_type`"
        " picks one, and any other type stops the run before any job. What each block looks"
        " like is on [Models and architectures](../models.md).",
        "",
        "| `model_type` | architecture | module | language-model head | mask token |",
        "|---|---|---|---|---|",
    ]
    for arch in registry.ARCHITECTURES:
        module = f"`architectures/{arch.canonical_weights.__module__.rsplit('.', 1)[1]}.py`"
        head = "masked" if arch.mlm_head_prefixes else "causal" if arch.causal_lm_prefixes else "—"
        mask = "yes" if arch.has_mask_token else "no"
        for model_type in arch.model_types:
            lines.append(f"| `{model_type}` | `{arch.name}` | {module} | {head} | {mask} |")
    return "\n".join(lines) + "\n"


# --- outputs -------------------------------------------------------------------------------


def _caption(family: str, figure: str) -> str:
    path = ROOT / "report" / family / f"{figure}.rst"
    text = " ".join(path.read_text().split()) if path.is_file() else "(no caption)"
    return text.replace("``", "`")


def outputs_page() -> str:
    """Every declared table and figure, per family."""
    outputs = _attnscope().pipeline.outputs
    lines = [
        "# Outputs reference",
        "",
        "Generated by `tools/docs_pages.py` from each family's declaration",
        "(`scripts/attnscope/analyses/<family>/outputs.py`, `Family.tables` and",
        "`Family.figures`): the rules' outputs, the figure rules and `rule all` follow the same",
        "declarations, so this list is what a run makes. Figures come as `.svg` and `.png`;",
        "their text is the report caption (`report/<family>/<figure>.rst`). `{model}` is a key",
        "of `models:`, `{corpus}` one of the corpora the family reads. What each column holds is",
        "on the family's page. Files the workflow makes for every family (stores, manifest,",
        "logs) are listed under [Outputs](../outputs.md).",
        "",
    ]
    for name, family in outputs.families().items():
        page = f"[the family's page](../analyses/{name}.md)"
        lines += [f"## {name}", "", f"{family.title}; {page}.", ""]
        if family.folder:
            folder = f"One folder, `{family.folder_path()}/`, written by one job"
            lines += [f"{folder}; the family's page lists the files it holds.", ""]
        lines += ["| file | scope | path |", "|---|---|---|"]
        for scope, files in family.tables.items():
            for file in files:
                mark = " (every layer)" if file in family.every_layer else ""
                lines.append(f"| `{file}` | {scope}{mark} | `{family.table(file, scope)}` |")
        lines.append("")
        for figure in family.figures:
            stem = outputs.figure_paths(family, figure)[0].rsplit(".", 1)[0]
            tables = ", ".join(f"`{t}`" for t in figure.tables)
            lines += [
                f"### `{figure.name}`",
                "",
                f"`{stem}.{{svg,png}}`, drawn from {tables}. {_caption(name, figure.name)}",
                "",
            ]
    lines += [
        "(every layer): not made when `layers:` names a subset of the layers, nor the figures",
        "drawn from it.",
    ]
    return "\n".join(lines) + "\n"


def pages() -> dict[str, str]:
    """{path under docs/: markdown} of every generated page."""
    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    texts = (configuration_page(schema, config), architectures_page(), outputs_page())
    return dict(zip(PAGES, texts, strict=True))


def on_files(files, config):
    """mkdocs hook: add the generated pages to the site (nothing is written into docs/)."""
    from mkdocs.structure.files import File

    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    return files


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "build/docs-pages")
    for path, text in pages().items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text(text)
        print(out / path)
