"""What a run finds, in a few lines per model, read from the run's own tables.

    .venv/bin/python tools/findings.py [results] [--model smollm2-135m]

Prints Markdown bullets (the README's "What the default run finds" is this output for the
default run): the attention-sink card (Gu et al.'s Sink^eps with their control and the
BOS-anchored input, the first position's weight and norm share by depth, by layer kind and
past a 512-piece window on wiki1024, Sun et al.'s massive dimensions apart from outliers on
ordinary tokens, the first position's largest |x| along the stream, and the intervention's
losses and perplexities), the most positional rotary
bands of each layer kind, the mixing ratio by depth and, from the attend family, the
components that make the heads look at the first position and at the previous token, and
from the heads family the induction, previous-token and duplicate-token heads on the repeated
random corpus, the in-context loss drop and the upstream heads that carry the strongest
induction head's lift (its circuit). A table
the run did not make (a family switched off, an encoder without rotary bands) is left out of
the lines.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

CORPORA = {
    "norms": "wiki",
    "position": "wiki512",
    "mixing": "wiki_masked",
    "attend": "wiki",
    "heads": "repeated",
}
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


def perplexity(value: float) -> str:
    """A perplexity, readable whatever its size: 50.8, 1,234, 6.1e+06."""
    return f"{value:,.1f}" if value < 1e4 else f"{value:.2g}"


def massive_line(massive: pd.DataFrame) -> str:
    """Sun et al.'s massive dimensions, and apart from them those recurring on ordinary
    tokens, each with the states it is massive in and its largest |x|."""

    def listed(rows: pd.DataFrame) -> str:
        dims = rows.groupby("dim").agg(
            low=("state", "min"), high=("state", "max"), top=("value", lambda v: v.abs().max())
        )
        text = []
        for d, (low, high, top) in zip(dims.index, dims.itertuples(index=False), strict=True):
            states = f"state {low}" if low == high else f"states {low}–{high}"
            text.append(f"{d} ({states}, up to {top:,.0f})")
        return ", ".join(text)

    sun = massive[massive["kind"] == "massive"]
    line = (
        "massive activations (Sun et al.: |x| > 100 and ≥ 1000× the state's median with the "
        "default massive_absolute and massive_ratio; on the first position and delimiters): "
        + (listed(sun) if len(sun) else "none")
    )
    recurring = massive[massive["kind"] == "ordinary"]
    if len(recurring):
        line += "; kept apart, outliers that recur on ordinary tokens: " + listed(recurring)
    return line


def size(value: float) -> str:
    """|x| readable at any size: 0.92, 39.5, 2,984."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def rise_line(activations: pd.DataFrame) -> str:
    """The first position's largest |x| along the stream (`massive_activations.tsv`): at the
    embeddings, after the first layer, at its peak and at the last state (those stored)."""
    first = activations.set_index("layer")["first_max"]
    peak, last = int(first.idxmax()), int(first.index.max())
    at = {0: "at the embeddings", 1: "after layer 1", peak: f"at its peak (state {peak})"}
    at.setdefault(last, f"at the last state ({last})")
    parts = [f"{size(first[state])} {where}" for state, where in at.items() if state in first]
    n = activations["n_sequences"].iloc[0]
    return f"largest |x| at the first position, mean over {n} sequences: " + ", ".join(parts)


def sink_lines(results: Path, model: str) -> list[str]:
    lines = []
    epsilon = table(results, model, "norms", "sink_epsilon")
    if epsilon is not None and "sink_share" in epsilon:
        total = epsilon[epsilon["layer"].astype(str) == "all"].iloc[0]
        lines.append(
            f"Sink^ε as Gu et al.'s code computes it (ε = {total['epsilon']:g}; each "
            f"sequence's first {total['positions']} pieces; the per-sequence indicator "
            f"averaged over {total['n_sequences']} sequences and {total['n_heads']} heads): "
            f"{100 * total['sink_share']:.1f}% (averaging over sequences before the "
            f"threshold: {100 * total['sink_share_pooled']:.1f}%); on their repeated-token "
            f"input, one piece everywhere and no BOS: {100 * total['sink_share_control']:.1f}%"
            f"; the same with the BOS kept (another experiment): "
            f"{100 * total['sink_share_anchored']:.1f}%"
        )
    share = table(results, model, "norms", "sink_kobayashi")
    if share is not None:
        per_layer = share[share["layer"].astype(str) != "all"].copy()
        per_layer["layer"] = per_layer["layer"].astype(int)
        per_layer = per_layer.set_index("layer")
        every = max(1, len(per_layer) // 6)
        lines.append(
            "weight on the first position, mean over heads and query rows of every sequence: "
            + by_depth(per_layer["alpha_first"], every)
        )
        lines.append(
            "its share of Σ‖αf(x)‖ (Kobayashi's view): " + by_depth(per_layer["norm_share"], every)
        )
    kinds = table(results, model, "norms", "sink_kinds")
    if kinds is not None and len(kinds) > 1:  # local and global layers apart
        parts = [
            f"{kind_label(*row[KINDS])[8:]} {row['importance']:.2f} "
            f"(Sink^ε {100 * row['sink_rate']:.1f}%)"
            for _, row in kinds.iterrows()
        ]
        lines.append("importance of the first key (Gu et al.) by layer kind: " + "; ".join(parts))
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
        lines.append(massive_line(massive))
    elif massive is not None:
        lines.append("massive activations (Sun et al.): none")
    activations = table(results, model, "norms", "massive_activations")
    if activations is not None and len(activations) > 1:
        lines.append(rise_line(activations))
    intervention = table(results, model, "norms", "massive_intervention")
    if intervention is not None and "loss" in intervention and len(intervention):
        rows = intervention.set_index("variant")
        dims, state = intervention["dims"].iloc[0], int(intervention["state"].iloc[0])
        parts = [
            f"{what} {rows.loc[variant, 'loss']:.3f} "
            f"(perplexity {perplexity(rows.loc[variant, 'perplexity'])})"
            for variant, what in (
                ("unmodified", "unmodified"),
                ("zeroed", "zeroed"),
                ("mean", "set to their mean per position kind"),
            )
        ]
        lines.append(
            f"with dims {dims} set at state {state} (first position and delimiters), "
            f"next-token loss in nats over {int(intervention['n_sequences'].iloc[0])} "
            f"sequences: " + ", ".join(parts)
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


def named_heads(rows: pd.DataFrame, score: str, most: int = 4) -> str:
    """'L19 H7 0.92, L18 H4 0.79, ...': the `most` heads of highest `score`."""
    top = rows.sort_values(score, ascending=False).head(most)
    return ", ".join(f"L{r.layer} H{r.head} {getattr(r, score):.2f}" for r in top.itertuples())


def heads_lines(results: Path, model: str) -> list[str]:
    roles = table(results, model, "heads", "head_roles")
    if roles is None or "induction" not in roles:
        return []
    labelled = roles["roles"].fillna("").str.split(",")
    count = {role: int(labelled.map(lambda r, role=role: role in r).sum()) for role in
             ("induction", "previous_token", "duplicate")}  # fmt: skip
    line = (
        f"head roles on the repeated random corpus (BOS + r + r, `heads/head_roles.tsv`): "
        f"{count['induction']} induction heads ({named_heads(roles, 'induction')}), "
        f"{count['previous_token']} previous-token heads "
        f"({named_heads(roles, 'previous_token')}), {count['duplicate']} duplicate-token heads"
    )
    loss = table(results, model, "heads", "in_context_loss")
    if loss is not None and "loss_first" in loss:
        line += (
            f"; the next-piece loss falls from {loss['loss_first'][0]:.2f} nats on the first "
            f"copy to {loss['loss_second'][0]:.2f} on the second"
        )
    lines = [line]
    circuits = table(results, model, "heads", "circuits")
    if circuits is None or not (circuits["role"] == "induction").any():
        return lines
    top = roles.loc[roles["induction"].idxmax()]
    mine = circuits[
        (circuits["layer"] == top["layer"])
        & (circuits["head"] == top["head"])
        & (circuits["role"] == "induction")
        & (circuits["source"] != "rest")
    ]
    sides = []
    for side, composition in (("key", "K"), ("query", "Q")):
        edges = mine[mine["side"] == side].sort_values("share", ascending=False).head(3)
        if len(edges):
            listed = ", ".join(f"{e.source} {100 * e.share:.0f}%" for e in edges.itertuples())
            sides.append(f"{side} side ({composition}-composition): {listed}")
    if sides:
        lines.append(
            f"the circuit of the strongest induction head, L{top['layer']} H{top['head']} "
            f"(`heads/circuits.tsv`, shares of its lift towards the induction key, from the "
            f"exact split): " + "; ".join(sides)
        )
    return lines


def findings(results: Path, model: str) -> list[str]:
    return (
        sink_lines(results, model)
        + position_lines(results, model)
        + mixing_lines(results, model)
        + attend_lines(results, model)
        + heads_lines(results, model)
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
