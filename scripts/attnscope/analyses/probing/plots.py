"""Figures of the probing family, drawn from its TSV tables only (no torch needed).

Layers and heads are 1-based, as in the tables; head 0 is a whole-layer map.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

import attnscope.core.plotting  # noqa: F401  (the shared look; sets the Agg backend)
from attnscope.core.plotting import heatmap_layer_ticks

SHOWN_RELATIONS = ["det", "nsubj", "obj", "amod", "advmod", "case", "aux", "mark", "all"]


def syntax_best(syntax_best: pd.DataFrame, title: str):
    """Best head per relation (dep->head and head->dep) and source vs the best offset."""
    table = syntax_best[syntax_best["relation"].isin(SHOWN_RELATIONS)]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for ax, direction in zip(axes, ("dep->head", "head->dep"), strict=True):
        rows = table[table["direction"] == direction]
        wide = rows.pivot(index="relation", columns="source", values="accuracy")
        base = rows.drop_duplicates("relation").set_index("relation")["baseline_accuracy"]
        order = [r for r in SHOWN_RELATIONS if r in wide.index]
        wide, base = wide.loc[order], base.loc[order]
        x = np.arange(len(order))
        width = 0.8 / (len(wide.columns) + 1)
        for k, source in enumerate(wide.columns):
            ax.bar(x + k * width, wide[source], width, label=source)
        ax.bar(x + len(wide.columns) * width, base, width, color="grey", label="best offset")
        ax.set_xticks(x + 0.4 - width / 2, order, rotation=45)
        ax.set(title=direction, ylim=(0, 1), ylabel="accuracy")
    axes[-1].legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def syntax_heatmaps(syntax_heads: pd.DataFrame, title: str, heatmap_relations: list[str]):
    """dep->head accuracy over layer x head for a few relations, one row per source."""
    table = syntax_heads[syntax_heads["direction"] == "dep->head"]
    sources = list(dict.fromkeys(table["source"]))
    relations = list(heatmap_relations) or ["all"]
    fig, axes = plt.subplots(
        len(sources),
        len(relations),
        figsize=(3.2 * len(relations), 2.8 * len(sources)),
        squeeze=False,
    )
    for row, source in enumerate(sources):
        for col, relation in enumerate(relations):
            ax = axes[row, col]
            rows = table[(table["source"] == source) & (table["relation"] == relation)]
            ax.set_title(f"{source}: {relation}", fontsize="small")
            if rows.empty:  # a relation the corpus slice does not hold: said, not swapped
                ax.text(0.5, 0.5, f"no {relation} arcs\nin this corpus", ha="center", va="center")
                ax.set_axis_off()
                continue
            grid = rows.pivot(index="layer", columns="head", values="accuracy")
            sns.heatmap(grid, ax=ax, vmin=0, vmax=1, cmap="viridis", cbar=col == 0)
            heatmap_layer_ticks(ax, grid.index, kinds=rows)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def probe_uas(probe: pd.DataFrame, probe_learning_curve: pd.DataFrame, title: str):
    """Left: test UAS per probe and source. Right: UAS against training sentences."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    labels = probe["source"] + "\n" + probe["probe"]
    left.bar(np.arange(len(probe)), probe["uas"], color=sns.color_palette("tab10", len(probe)))
    left.set_xticks(np.arange(len(probe)), labels, fontsize="small", rotation=45)
    left.set(ylabel="UAS (EWT test, no punctuation)", ylim=(0, 1))
    for (source, name), rows in probe_learning_curve.groupby(["source", "probe"]):
        rows = rows.sort_values("n_train")
        right.plot(rows["n_train"], rows["uas"], marker="o", label=f"{source} {name}")
    right.set(xlabel="training sequences (EWT dev)", ylabel="UAS", xscale="log")
    right.legend(fontsize="x-small")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def coref_heads(coref_heads: pd.DataFrame, coref_best: pd.DataFrame, title: str):
    """GAP accuracy of every head (layer x head) per source, with the baselines in the title."""
    sources = list(dict.fromkeys(coref_heads["source"]))
    fig, axes = plt.subplots(1, len(sources), figsize=(4 * len(sources), 3.6), squeeze=False)
    for ax, source in zip(axes[0], sources, strict=True):
        rows = coref_heads[coref_heads["source"] == source]
        grid = rows.pivot(index="layer", columns="head", values="accuracy")
        sns.heatmap(grid, ax=ax, vmin=0, vmax=1, cmap="magma")
        heatmap_layer_ticks(ax, grid.index, kinds=rows)
        ax.set_title(source)
    baselines = coref_best[coref_best["source"] == "baseline"]
    pairs = zip(baselines["method"], baselines["accuracy"], strict=True)
    notes = ", ".join(f"{m} {a:.2f}" for m, a in pairs)
    fig.suptitle(f"{title} (baselines: {notes})")
    fig.tight_layout()
    return fig
