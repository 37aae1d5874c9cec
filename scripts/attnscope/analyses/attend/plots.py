"""The attend family's figure, drawn from its TSV tables only (no torch needed)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

import attnscope.core.plotting  # noqa: F401  (the shared look; sets the Agg backend)

FIGURE_CLASSES = ("first", "previous")


def chosen_heads(key_classes: pd.DataFrame, figure_heads: int) -> list[tuple[str, int, int]]:
    """(class, layer, head) of the `figure_heads` heads with the largest total lift towards
    each of `FIGURE_CLASSES` (the sink heads of decoders, the positional heads of encoders)."""
    totals = key_classes[key_classes["side"] == "total"]
    out = []
    for keys in FIGURE_CLASSES:
        rows = totals[totals["keys"] == keys].nlargest(figure_heads, "lift")
        out += [(keys, int(r.layer), int(r.head)) for r in rows.itertuples()]
    return out


def pair_grid(rows: pd.DataFrame) -> pd.DataFrame:
    """The top component pairs of one head and weighting as a grid: query-side components
    (rows) x key-side components (columns), mean lift per row (logit units), 0 where a pair
    is not among the top ones."""
    pairs = rows[rows["side"] == "pair"]
    grid = pairs.pivot_table(index="query", columns="key", values="lift", aggfunc="sum")
    return grid.fillna(0.0)


def draw_grid(ax, grid: pd.DataFrame, fig) -> None:
    bound = float(np.abs(grid.to_numpy()).max()) if grid.size else 0.0
    image = ax.imshow(grid.to_numpy(), cmap="RdBu_r", vmin=-(bound or 1.0), vmax=bound or 1.0)
    ax.set_xticks(range(grid.shape[1]), grid.columns, rotation=90, fontsize="x-small")
    ax.set_yticks(range(grid.shape[0]), grid.index, fontsize="x-small")
    ax.set(xlabel="key-side component", ylabel="query-side component")
    ax.grid(False)
    fig.colorbar(image, ax=ax, shrink=0.7, label="lift (logit)")


def lift_pairs(lift: pd.DataFrame, key_classes: pd.DataFrame, title: str, figure_heads: int):
    """Per chosen head (`chosen_heads`), two panels of its top component pairs (`pair_grid`):
    above, what lifts the keys it attends to (alpha-weighted) above the rest of the row;
    below, what lifts the key class it was chosen for (the first position, the previous
    token)."""
    heads = chosen_heads(key_classes, figure_heads)
    fig, axes = plt.subplots(2, len(heads), figsize=(4.2 * len(heads), 8.4), squeeze=False)
    for column, (keys, layer, head) in enumerate(heads):
        for row, (table, weighting) in enumerate(((lift, "attended"), (key_classes, keys))):
            rows = table[
                (table["layer"] == layer) & (table["head"] == head) & (table["keys"] == weighting)
            ]
            draw_grid(axes[row][column], pair_grid(rows), fig)
            total = float(rows.loc[rows["side"] == "total", "lift"].iloc[0])
            axes[row][column].set_title(
                f"L{layer} H{head} (top {keys} head)\n{weighting} keys: lift {total:.2f}",
                fontsize="small",
            )
    fig.suptitle(title)
    fig.tight_layout()
    return fig


PEAK_OFFSETS = (-1, 1)
TERM_STYLES = {"logit": dict(color="black", linewidth=2.2), "rest": dict(color="0.6", ls="--")}


def peak_heads(trt_terms: pd.DataFrame, figure_heads: int) -> list[tuple[int, int, int]]:
    """(t, layer, head) of the `figure_heads` heads with the strongest peak of the logit's
    tr_t at t = -1 and at t = +1: the value there above the median of the head's profile
    (an offset where every head's logit profile is 0, t = +1 of a causal model, is skipped)."""
    logit = trt_terms[trt_terms["pair"] == "logit"]
    wide = logit.pivot_table(index=["layer", "head"], columns="t", values="value")
    out = []
    for t in PEAK_OFFSETS:
        if t not in wide.columns or not wide[t].abs().any():
            continue
        peak = (wide[t] - wide.median(axis=1)).nlargest(figure_heads)
        out += [(t, int(layer), int(head)) for layer, head in peak.index]
    return out


def trt_terms(trt_terms: pd.DataFrame, title: str, figure_heads: int):
    """Per chosen head (`peak_heads`): the tr_t profile (mean over sequences, logit units
    summed over query rows) of the full logit and of its word x word, word x position,
    position x word, position x position and remaining terms against the offset t."""
    heads = peak_heads(trt_terms, figure_heads)
    fig, axes = plt.subplots(1, len(heads), figsize=(4.2 * len(heads), 3.8), squeeze=False)
    for ax, (t, layer, head) in zip(axes[0], heads, strict=True):
        rows = trt_terms[(trt_terms["layer"] == layer) & (trt_terms["head"] == head)]
        for pair, line in rows.groupby("pair", sort=False):
            ax.plot(line["t"], line["value"], marker=".", label=pair, **TERM_STYLES.get(pair, {}))
        ax.axvline(t, color="0.8", linewidth=0.8, zorder=0)
        ax.set(xlabel="offset t (key - query)", ylabel="tr_t (logit)")
        ax.set_title(f"L{layer} H{head} (peak at t = {t:+d})", fontsize="small")
    axes[0][-1].legend(fontsize="x-small", loc="best")
    fig.suptitle(title)
    fig.tight_layout()
    return fig
