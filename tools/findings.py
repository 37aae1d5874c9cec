"""What a run finds, in a few lines per model, read from the run's own tables.

    .venv/bin/python tools/findings.py [results] [--model smollm2-135m]

Prints Markdown bullets (the README's "What the default run finds" is this output for the
default run): the attention-sink card (Sink^eps with its control, the first position's weight
and norm share by depth, by layer kind and past a 512-piece window on wiki1024, Sun et al.'s
massive dimensions and the intervention's losses), the most positional rotary bands of each
layer kind, the mixing ratio by depth and, from the attend family, the
components that make the heads look at the first position and at the previous token. A table
the run did not make (a family switched off, an encoder without rotary bands) is left out of
the lines.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

CORPORA = {"norms": "wiki", "position": "wiki512", "mixing": "wiki_masked", "attend": "wiki"}
LONG_CORPUS = "wiki1024"  # the sink card's stream past a 512-piece sliding window


def table(
    results: Path, model: str, family: str, name: str, corpus: str = ""
) -> pd.DataFrame | None:
    """results/<model>/<corpus>/<family>/<name>.tsv of the family's default corpus (or of
    `corpus`), or None."""
    path = results / model / (corpus or CORPORA[family]) / family / f"{name}.tsv"
    return pd.read_csv(path, sep="\t") if path.exists() else None


def by_depth(values: pd.Series, every: int) -> str:
    """'L1 0.12, L5 0.80, ...': every `every`-th layer and the last, two decimals."""
    layers = [k for k in values.index if (k - 1) % every == 0 or k == values.index.max()]
    return ", ".join(f"L{k} {values[k]:.2f}" for k in layers)


def sink_lines(results: Path, model: str) -> list[str]:
    lines = []
    epsilon = table(results, model, "norms", "sink_epsilon")
    if epsilon is not None:
        total = epsilon[epsilon["layer"].astype(str) == "all"].iloc[0]
        lines.append(
            f"Sink^ε (Gu et al., ε = {total['epsilon']:g}, first {total['positions']} "
            f"positions): {100 * total['sink_share']:.0f}% of the {total['n_heads']} heads; "
            f"{100 * total['sink_share_control']:.0f}% on the repeated-token control"
        )
    share = table(results, model, "norms", "sink_kobayashi")
    if share is not None:
        per_layer = share[share["layer"].astype(str) != "all"].copy()
        per_layer["layer"] = per_layer["layer"].astype(int)
        per_layer = per_layer.set_index("layer")
        every = max(1, len(per_layer) // 6)
        lines.append(
            "weight on the first position, mean over heads and query rows: "
            + by_depth(per_layer["alpha_first"], every)
        )
        lines.append(
            "its share of Σ‖αf(x)‖ (Kobayashi's view): " + by_depth(per_layer["norm_share"], every)
        )
    kinds = table(results, model, "norms", "sink_kinds")
    if kinds is not None and len(kinds) > 1:  # local and global layers apart
        parts = [
            f"{kind_label(*row[KINDS])[8:]} {row['alpha_first']:.2f} "
            f"({100 * row['sink']:.0f}% sinks)"
            for _, row in kinds.iterrows()
        ]
        lines.append("weight on the first position by layer kind: " + "; ".join(parts))
    stream = table(results, model, "norms", "sink_stream_kinds", LONG_CORPUS)
    if stream is not None and len(stream):
        last = stream[stream["bin"] == stream["bin"].max()]
        span = f"{int(last['position_from'].iloc[0])}–{int(last['position_to'].iloc[0])}"
        parts = []
        for label, rows in kinds_of(stream):  # a sliding layer has no row past its window
            row = rows[rows["bin"] == stream["bin"].max()]
            value = f"{row['alpha_first'].iloc[0]:.2f}" if len(row) else "none (past its window)"
            parts.append(f"{label[8:] or 'every layer'} {value}")
        lines.append(
            f"weight on the first position of queries {span} ({LONG_CORPUS}): " + "; ".join(parts)
        )
    massive = table(results, model, "norms", "massive_dimensions")
    if massive is not None and len(massive):
        dims = massive.groupby("dim")["value"].apply(lambda v: v.abs().max())
        states = f"{int(massive['state'].min())} to {int(massive['state'].max())}"
        pairs = len(massive[["sequence", "position"]].drop_duplicates())
        lines.append(
            f"massive dimensions (Sun et al.: |x| > 100 and ≥ 1000× the state's median): "
            f"{', '.join(f'{d} (up to {v:,.0f})' for d, v in dims.items())}, in hidden states "
            f"{states}, at {pairs} (sequence, position) pairs"
        )
    elif massive is not None:
        lines.append("massive dimensions (Sun et al.): none")
    intervention = table(results, model, "norms", "massive_intervention")
    if intervention is not None and "loss" in intervention and len(intervention):
        loss = intervention.set_index("variant")["loss"]
        lines.append(
            "next-token loss with the massive entries set at state "
            f"{int(intervention['state'].iloc[0])}: unmodified {loss['unmodified']:.3f}, "
            f"zeroed {loss['zeroed']:.3f}, set to their mean {loss['mean']:.3f}"
        )
    return lines


KINDS = ["attention", "window", "rope_theta"]  # the layer kind columns of per-layer tables


def kind_label(attention: str, window: float, theta: float) -> str:
    """' of the sliding layers (window 512, base 10000)', ' of the global layers (base 1e+06)'."""
    parts = ([f"window {int(window)}"] if attention == "sliding" else []) + (
        [f"base {theta:g}"] if theta == theta else []  # NaN: no rotation
    )
    return f" of the {attention} layers" + (f" ({', '.join(parts)})" if parts else "")


def kinds_of(rows: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """[(label, rows of one layer kind)] where the table holds several kinds (Gemma-3's
    sliding and global layers), else [("", rows)]: one kind needs no label."""
    if not set(KINDS) <= set(rows) or len(rows.drop_duplicates(KINDS)) < 2:
        return [("", rows)]
    groups = rows.groupby(KINDS, dropna=False, sort=True)
    return [(kind_label(*kind), group) for kind, group in groups]


def position_lines(results: Path, model: str) -> list[str]:
    """The most positional bands, within each layer kind: band b of one rotary base turns at
    another rate than band b of another, so bands are never pooled across kinds."""
    bands = table(results, model, "position", "rotary_bands")
    if bands is None or "band" not in bands:  # not made, or "not applicable" (an encoder)
        return []
    lines = []
    for label, rows in kinds_of(bands):
        share = rows.groupby("band")["positional_share"].mean().sort_values(ascending=False)
        top = ", ".join(f"band {b} ({s:.2f})" for b, s in share.head(3).items())
        lines.append(
            f"most positional rotary bands{label} (R² of the band's score on i − j, mean over "
            f"heads): {top}"
        )
    return lines


def mixing_lines(results: Path, model: str) -> list[str]:
    ratio = table(results, model, "mixing", "mixing_ratio")
    if ratio is None:
        return []
    per_layer = ratio[ratio["layer"].astype(str) != "all"].copy()
    per_layer["layer"] = per_layer["layer"].astype(int)
    lines = []
    for scope in ("AttnRes", "AttnResLnFfResLn"):
        rows = per_layer[per_layer["scope"] == scope].set_index("layer")["mean"] * 100
        if len(rows):
            every = max(1, len(rows) // 6)
            lines.append(f"mixing ratio (%) of {scope} by layer: " + by_depth(rows, every))
    return lines


def largest(rows: pd.DataFrame) -> pd.Series:
    """The row of largest |lift|."""
    return rows.loc[rows["lift"].abs().idxmax()]


def attend_lines(results: Path, model: str) -> list[str]:
    classes = table(results, model, "attend", "key_classes")
    if classes is None or "lift" not in classes:
        return []
    lines = []
    for keys, what in (("first", "the first position"), ("previous", "the previous token")):
        rows = classes[classes["keys"] == keys]
        total = rows[rows["side"] == "total"]
        if not len(total):
            continue
        top = total.loc[total["lift"].idxmax()]
        head = rows[(rows["layer"] == top["layer"]) & (rows["head"] == top["head"])]
        query = largest(head[head["side"] == "query"])
        key = largest(head[head["side"] == "key"])
        line = (
            f"the head that lifts {what} most above the rest of its row, "
            f"L{top['layer']} H{top['head']} (by {top['lift']:.1f} in the logit, mean over "
            f"rows), owes it most to {query['query']} on the query side "
            f"({100 * query['share']:.0f}% of the lift) and {key['key']} on the key side "
            f"({100 * key['share']:.0f}%)"
        )
        pairs = head[head["side"] == "pair"]
        if len(pairs):
            pair = largest(pairs)
            line += (
                f"; its largest component pair is {pair['query']} × {pair['key']} "
                f"({100 * pair['share']:.0f}%)"
            )
        lines.append(line)
    return lines


def findings(results: Path, model: str) -> list[str]:
    return (
        sink_lines(results, model)
        + position_lines(results, model)
        + mixing_lines(results, model)
        + attend_lines(results, model)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", default="results", type=Path)
    parser.add_argument("--model", action="append", help="a model of the run (default: every)")
    args = parser.parse_args()
    models = args.model or sorted(
        p.name for p in args.results.iterdir() if (p / "model" / "manifest.json").exists()
    )
    for model in models:
        print(f"**{model}**\n")
        for line in findings(args.results, model):
            print(f"- {line}")
        print()


if __name__ == "__main__":
    main()
