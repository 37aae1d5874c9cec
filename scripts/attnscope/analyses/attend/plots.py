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


def lift_pairs(lift: pd.DataFrame, key_classes: pd.DataFrame, title: str, figure_heads: int):
    """Per chosen head: its top component pairs (query-side rows, key-side columns) of the
    mean lift of the attended keys above the rest (logit units, 0 where a pair is not among
    the top ones)."""
    heads = chosen_heads(key_classes, figure_heads)
    fig, axes = plt.subplots(1, len(heads), figsize=(4.2 * len(heads), 4.2), squeeze=False)
    for ax, (keys, layer, head) in zip(axes[0], heads, strict=True):
        rows = lift[(lift["layer"] == layer) & (lift["head"] == head)]
        pairs = rows[rows["side"] == "pair"]
        grid = pairs.pivot_table(index="query", columns="key", values="lift", aggfunc="sum")
        grid = grid.fillna(0.0)
        bound = float(np.abs(grid.to_numpy()).max()) or 1.0
        image = ax.imshow(grid.to_numpy(), cmap="RdBu_r", vmin=-bound, vmax=bound)
        ax.set_xticks(range(grid.shape[1]), grid.columns, rotation=90, fontsize="x-small")
        ax.set_yticks(range(grid.shape[0]), grid.index, fontsize="x-small")
        ax.set(xlabel="key-side component", ylabel="query-side component")
        ax.grid(False)
        total = float(rows.loc[rows["side"] == "total", "lift"].iloc[0])
        ax.set_title(f"L{layer} H{head} (top {keys} head)\nlift {total:.2f}", fontsize="small")
        fig.colorbar(image, ax=ax, shrink=0.7, label="lift (logit)")
    fig.suptitle(title)
    fig.tight_layout()
    return fig
