"""Head roles: every per-head score that defines a role, joined into one table per model
(head_roles.tsv), and the roles each head earns (no torch).

A role is earned when its score exceeds its threshold (`Role.rule`; the thresholds are
settings: `analyses.heads.thresholds`). A head may hold several roles; "none" is an answer.
A role whose table the run does not make (its family switched off, a decoder without the
masked-LM corpus, a subset of layers) is not judged: its score column is empty and the head's
`not_judged` names it; role_rules.tsv says why.

Sources, by the name of the table's input (`SOURCES`):
    repeat   heads' own role_scores.tsv on the repeated corpus: induction, duplicate,
             previous_token (`repeat_scores`)
    weights  weights' heads.tsv (Clark 2019): mass on [CLS]/first, [SEP], punctuation;
             attention to the previous, next piece and itself; mean entropy (broad)
    sinks    norms' sink_heads.tsv: sink_rate, the share of sequences in which the importance
             of the first key exceeds sink_epsilon (Gu et al.'s indicator, per head)
    syntax   probing's syntax_heads.tsv and syntax_best.tsv (the offset baseline): per head
             the dependency relation (and direction) it predicts best above the baseline, on
             relations with at least MIN_PAIRS pairs
    coref    probing's coref_heads.tsv and coref_best.tsv: the head's accuracy above the
             best baseline (nearest, ...) of GAP
    rotary   position's rotary_positional_heads.tsv: the mass of a rotary head on the
             previous piece or itself
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from attnscope.core.tables import index_grid, is_not_applicable

MIN_PAIRS = 50  # a relation scored on fewer pairs names no syntactic head
MAP_SOURCE = "weights"  # the probing tables' map source: attention weights per head


@dataclass(frozen=True)
class Role:
    """A role: earned when the column `score` of head_roles.tsv exceeds `threshold` (the
    default; `analyses.heads.thresholds` sets it, within `bounds`). `keys`: the attend key
    class its lift goes to (circuits.tsv), None where it has none."""

    name: str
    score: str
    source: str
    threshold: float
    bounds: tuple[float, float]
    keys: str | None
    rule: str


UNIT = (0.0, 1.0)
ROLES = (
    Role("induction", "induction", "repeat", 0.4, UNIT, "induction",
         "mean weight from a second-copy query to the piece after its first occurrence"),
    Role("duplicate", "duplicate", "repeat", 0.4, UNIT, "duplicate",
         "mean weight from a second-copy query to its piece's first occurrence"),
    Role("previous_token", "previous_token", "repeat", 0.4, UNIT, "previous",
         "mean weight on the previous piece, repeated corpus"),
    Role("sink", "sink_rate", "sinks", 0.5, UNIT, "first",
         "share of sequences in which the first key's importance exceeds sink_epsilon (Gu)"),
    Role("cls", "cls", "weights", 0.6, UNIT, None, "mean mass on [CLS] / the first piece"),
    Role("sep", "sep", "weights", 0.6, UNIT, None, "mean mass on [SEP]"),
    Role("punct", "punct", "weights", 0.6, UNIT, None, "mean mass on . and ,"),
    Role("prev", "prev", "weights", 0.5, UNIT, None, "mean weight on the previous piece"),
    Role("next", "next", "weights", 0.5, UNIT, None, "mean weight on the next piece"),
    Role("self", "self", "weights", 0.5, UNIT, None, "mean weight on the query itself"),
    Role("broad", "entropy", "weights", 3.8, (0.0, np.inf), None, "mean row entropy (nats)"),
    Role("syntax", "syntax_margin", "syntax", 0.1, (-1.0, 1.0), None,
         "accuracy on its best relation minus the offset baseline's"),
    Role("coreference", "coref_margin", "coref", 0.0, (-1.0, 1.0), None,
         "antecedent accuracy minus the best GAP baseline's"),
    Role("rotary_positional", "rotary_mass", "rotary", 0.5, UNIT, None,
         "a rotary head's mean weight on the previous piece or itself"),
)  # fmt: skip
ROLE_NAMES = tuple(role.name for role in ROLES)
SOURCES = {
    "repeat": "heads role_scores.tsv (repeated corpus)",
    "weights": "weights heads.tsv",
    "sinks": "norms sink_heads.tsv",
    "syntax": "probing syntax_heads.tsv, syntax_best.tsv",
    "coref": "probing coref_heads.tsv, coref_best.tsv",
    "rotary": "position rotary_positional_heads.tsv",
}


def threshold_problems(thresholds: dict) -> list[str]:
    """What is wrong with `analyses.heads.thresholds`: unknown role names, values out of the
    role's bounds."""
    problems = []
    roles = {role.name: role for role in ROLES}
    for name, value in thresholds.items():
        if name not in roles:
            problems.append(
                f"thresholds names role {name!r}, which is none of {', '.join(ROLE_NAMES)}"
            )
            continue
        low, high = roles[name].bounds
        if not isinstance(value, int | float) or not low <= value < high:
            problems.append(
                f"thresholds.{name} is {value!r}, out of its range [{low}, {high}) "
                f"({roles[name].rule})"
            )
    return problems


def thresholds_of(given: dict) -> dict[str, float]:
    """{role: threshold}: the defaults of ROLES with `given` in their place."""
    return {role.name: float(given.get(role.name, role.threshold)) for role in ROLES}


def source_scores(tables: dict[str, pd.DataFrame | None]) -> dict[str, pd.DataFrame | str]:
    """{source: `layer head <score columns>` table, or why it is not judged}."""
    out: dict[str, pd.DataFrame | str] = {}
    readers = {
        "repeat": lambda t: t["role_scores"][["layer", "head", "induction", "duplicate",
                                              "previous_token"]],
        "weights": lambda t: t["weights_heads"][["layer", "head", "cls", "sep", "punct", "prev",
                                                 "next", "self", "entropy"]],
        "sinks": lambda t: t["norms_sink_heads"][["layer", "head", "sink_rate"]],
        "syntax": lambda t: syntax_scores(t["probing_syntax_heads"], t["probing_syntax_best"]),
        "coref": lambda t: coref_scores(t["probing_coref_heads"], t["probing_coref_best"]),
        "rotary": lambda t: rotary_scores(t["position_rotary_positional_heads"]),
    }  # fmt: skip
    needed = {
        "repeat": ["role_scores"],
        "weights": ["weights_heads"],
        "sinks": ["norms_sink_heads"],
        "syntax": ["probing_syntax_heads", "probing_syntax_best"],
        "coref": ["probing_coref_heads", "probing_coref_best"],
        "rotary": ["position_rotary_positional_heads"],
    }
    for source, names in needed.items():
        missing = [n for n in names if tables.get(n) is None]
        if missing:
            out[source] = f"not judged: this run makes no {SOURCES[source]}"
            continue
        inapplicable = [n for n in names if is_not_applicable(tables[n])]
        if inapplicable:
            status = tables[inapplicable[0]]["status"].iloc[0]
            out[source] = f"not judged: {SOURCES[source]} says {status}"
            continue
        out[source] = readers[source](tables)
    return out


def syntax_scores(heads: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """`layer head syntax_relation syntax_accuracy syntax_margin`: per head (attention weights)
    the relation and direction of the largest accuracy above the offset baseline, among the
    relations (not `all`) with at least MIN_PAIRS pairs."""
    rows = heads[(heads["source"] == MAP_SOURCE) & (heads["relation"] != "all")]
    rows = rows[rows["n"] >= MIN_PAIRS].dropna(subset=["accuracy"])
    baseline = best[["relation", "direction", "baseline_accuracy"]].drop_duplicates()
    rows = rows.merge(baseline, on=["relation", "direction"], how="left")
    rows = rows.assign(syntax_margin=rows["accuracy"] - rows["baseline_accuracy"])
    rows = rows.sort_values(["layer", "head", "syntax_margin"], ascending=[True, True, False])
    top = rows.groupby(["layer", "head"], as_index=False).head(1)
    return pd.DataFrame(
        {
            "layer": top["layer"].to_numpy(),
            "head": top["head"].to_numpy(),
            "syntax_relation": (top["relation"] + " " + top["direction"]).to_numpy(),
            "syntax_accuracy": top["accuracy"].to_numpy(),
            "syntax_margin": top["syntax_margin"].to_numpy(),
        }
    )


def coref_scores(heads: pd.DataFrame, best: pd.DataFrame) -> pd.DataFrame:
    """`layer head coref_accuracy coref_margin`: per head (attention weights) its accuracy,
    and that minus the best baseline row of coref_best.tsv."""
    rows = heads[heads["source"] == MAP_SOURCE]
    baseline = best.loc[best["source"] == "baseline", "accuracy"].max()
    return pd.DataFrame(
        {
            "layer": rows["layer"].to_numpy(),
            "head": rows["head"].to_numpy(),
            "coref_accuracy": rows["accuracy"].to_numpy(),
            "coref_margin": (rows["accuracy"] - baseline).to_numpy(),
        }
    )


def rotary_scores(table: pd.DataFrame) -> pd.DataFrame:
    """`layer head rotary_behaviour rotary_mass`: the listed rotary heads' largest mass."""
    top = table.sort_values("mass", ascending=False).groupby(["layer", "head"]).head(1)
    return top.rename(columns={"behaviour": "rotary_behaviour", "mass": "rotary_mass"})[
        ["layer", "head", "rotary_behaviour", "rotary_mass"]
    ]


def head_roles(
    layers: list[int], n_heads: int, tables: dict[str, pd.DataFrame | None], thresholds: dict
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(head_roles, role_rules): one row per head of the 1-based `layers` with every score,
    `roles` (comma-separated, or "none") and `not_judged` (the roles it cannot judge); and
    one row per role: its score, source, rule, threshold and status (judged, or why not).
    `tables`: the inputs by name (`source_scores`), None where the run makes none."""
    chosen = thresholds_of(thresholds)
    table = index_grid(layer=list(layers), head=n_heads)
    status = {}
    for source, scores in source_scores(tables).items():
        if isinstance(scores, str):
            status[source] = scores
            continue
        status[source] = "judged"
        table = table.merge(scores, on=["layer", "head"], how="left")
        if source == "rotary":  # heads it does not list hold no rotary role: mass 0
            table["rotary_mass"] = table["rotary_mass"].fillna(0.0)
    earned = [[] for _ in range(len(table))]
    unjudged = [[] for _ in range(len(table))]
    for role in ROLES:
        if status[role.source] != "judged":
            table[role.score] = np.nan
        values = table[role.score].to_numpy(dtype=float)
        for i, value in enumerate(values):
            if status[role.source] != "judged" or np.isnan(value):
                unjudged[i].append(role.name)
            elif value > chosen[role.name]:
                earned[i].append(role.name)
    table["roles"] = [",".join(r) or "none" for r in earned]
    table["not_judged"] = [",".join(r) for r in unjudged]
    rules = pd.DataFrame(
        {
            "role": [r.name for r in ROLES],
            "score": [r.score for r in ROLES],
            "source": [SOURCES[r.source] for r in ROLES],
            "rule": [f"{r.score} > threshold: {r.rule}" for r in ROLES],
            "threshold": [chosen[r.name] for r in ROLES],
            "keys": [r.keys or "" for r in ROLES],
            "status": [status[r.source] for r in ROLES],
            "n_heads": [sum(r.name in e for e in earned) for r in ROLES],
        }
    )
    return table, rules
