"""The atlas: one self-contained HTML page per model (a layer x head grid coloured by role, a
role filter, and each head's card: scores, roles, what lifts its role keys, the circuit edges
as links to the upstream heads' cards, small attention patterns, links to the model's other
pages), and the overview of a run (role counts per layer, the models side by side). The data
are inlined as JSON (atlas.js draws them); nothing is loaded from anywhere.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

import pandas as pd

from attnscope.analyses.heads.roles import ROLE_NAMES

HERE = Path(__file__).parent


def _records(table: pd.DataFrame | None) -> list[dict]:
    """Rows as JSON objects, NaN as null."""
    if table is None:
        return []
    rows = table.to_dict(orient="records")
    return [
        {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
        for row in rows
    ]


def _inline(data) -> str:
    """JSON safe inside <script>: no "</" can close the element."""
    return json.dumps(data, allow_nan=False, default=str).replace("</", "<\\/")


def atlas_data(
    model: str,
    roles: pd.DataFrame,
    rules: pd.DataFrame,
    circuits: pd.DataFrame | None,
    patterns: dict,
    loss: pd.DataFrame | None,
    links: list[tuple[str, str]],
    groups: pd.DataFrame | None = None,
) -> dict:
    """What the page draws: the tables as records, the patterns, the links (label, href), and
    the attend family's grouping (groups.tsv) by block and by direction of the heads that
    have circuit rows."""
    if groups is not None and circuits is not None:
        chosen = circuits[["layer", "head", "keys"]].drop_duplicates()
        groups = groups[groups["kind"].isin(("block", "direction"))].merge(chosen)
    return {
        "model": model,
        "roles": ROLE_NAMES,
        "heads": _records(roles),
        "rules": _records(rules),
        "circuits": _records(circuits),
        "groups": _records(groups),
        "patterns": patterns,
        "loss": _records(loss),
        "links": [{"label": label, "href": href} for label, href in links],
    }


def render(data: dict, title: str) -> str:
    """The page: atlas.html with atlas.css, atlas.js and `data` inlined."""
    page = (HERE / "atlas.html").read_text(encoding="utf-8")
    return (
        page.replace("{{title}}", html.escape(title))
        .replace("{{css}}", (HERE / "atlas.css").read_text(encoding="utf-8"))
        .replace("{{data}}", _inline(data))
        .replace("{{js}}", (HERE / "atlas.js").read_text(encoding="utf-8"))
    )


def role_counts(roles: pd.DataFrame) -> pd.DataFrame:
    """`layer role n_heads`: how many heads of each layer hold each role (every role, 0s
    included, and `none`)."""
    rows = []
    for layer, part in roles.groupby("layer"):
        held = [set(str(r).split(",")) for r in part["roles"]]
        for role in (*ROLE_NAMES, "none"):
            rows.append((int(layer), role, sum(role in h for h in held)))
    return pd.DataFrame(rows, columns=["layer", "role", "n_heads"])


def overview(models: dict[str, pd.DataFrame], atlases: dict[str, str]) -> str:
    """The run's overview: per model, a layer x role table of role counts and a link to its
    atlas (`atlases`: model -> relative href)."""
    sections = []
    for model, roles in models.items():
        counts = role_counts(roles).pivot(index="layer", columns="role", values="n_heads")
        held = [r for r in (*ROLE_NAMES, "none") if counts[r].sum() > 0]
        head = "".join(f"<th>{html.escape(r)}</th>" for r in held)
        body = "".join(
            f"<tr><th>L{layer}</th>"
            + "".join(
                f'<td data-role="{r}" data-layer="{layer}">{int(counts.loc[layer, r])}</td>'
                for r in held
            )
            + "</tr>"
            for layer in counts.index
        )
        link = html.escape(atlases.get(model, ""))
        sections.append(
            f'<section class="model" data-model="{html.escape(model)}"><h2>'
            f'<a href="{link}">{html.escape(model)}</a></h2>'
            f"<table><tr><th>layer</th>{head}</tr>{body}</table></section>"
        )
    css = (HERE / "atlas.css").read_text(encoding="utf-8")
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>Head roles: overview</title><style>{css}</style></head>"
        "<body data-ready='1'><h1>Head roles: role counts per layer</h1>"
        f"<div class='overview'>{''.join(sections)}</div></body></html>"
    )
