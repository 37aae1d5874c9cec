"""Figures of the attention-weight analyses (Clark et al. 2019), from their tables only.

Every function takes the tables it needs (keyword = table name) and a title, and returns a
matplotlib figure.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

import attnscope.core.plotting  # noqa: F401  (the shared look; sets the Agg backend)
from attnscope.analyses.weights.behaviours import BEHAVIOURS
from attnscope.core.plotting import heatmap_layer_ticks, layer_ticks

CATEGORY_LABELS = {"CLS": "[CLS]", "SEP": "[SEP]", "punct": ". or ,", "other": "other"}


def head_label(table: pd.DataFrame) -> pd.Series:
    return table["layer"].astype(str) + "-" + table["head"].astype(str)


def relative_position(heads: pd.DataFrame, title: str):
    names = {
        "prev": "the previous token (i-1)",
        "self": "itself (i)",
        "next": "the next token (i+1)",
    }
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True)
    for ax, (column, panel) in zip(axes, names.items(), strict=True):
        grid = heads.pivot(index="layer", columns="head", values=column)
        sns.heatmap(
            grid,
            ax=ax,
            vmin=0,
            vmax=1,
            cmap="viridis",
            annot=grid.shape[1] <= 16,
            fmt=".2f",
            annot_kws={"size": 5},
            cbar=ax is axes[-1],
        )
        heatmap_layer_ticks(ax, grid.index, kinds=heads)
        ax.set_title(f"attention to {panel}")
    fig.suptitle(f"Average attention to relative positions per head ({title})")
    return fig


def special_tokens(heads: pd.DataFrame, layers: pd.DataFrame, title: str):
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for column, marker in (("cls", "o"), ("sep", "s"), ("punct", "^")):
        label = CATEGORY_LABELS[{"cls": "CLS", "sep": "SEP"}.get(column, column)]
        axes[0].scatter(heads["layer"], heads[column], s=8, alpha=0.35, marker=marker)
        axes[0].plot(layers["layer"], layers[column], marker=marker, label=label)
    axes[0].set(xlabel="layer", ylabel="average attention mass", title="attention to tokens")
    for column, label in (("sep_to_sep", "[SEP] -> [SEP]"), ("other_to_sep", "other -> [SEP]")):
        axes[1].scatter(heads["layer"], heads[column], s=8, alpha=0.35)
        axes[1].plot(layers["layer"], layers[column], marker="o", label=label)
    axes[1].set(xlabel="layer", ylabel="average attention mass", title="attention to [SEP]")
    fig.suptitle(title)
    for ax in axes:
        layer_ticks(ax, layers["layer"], kinds=layers)
        ax.set_ylim(-0.02, 1.02)
        ax.legend()
    return fig


def entropy(heads: pd.DataFrame, layers: pd.DataFrame, title: str):
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    panels = (("entropy", "all query tokens"), ("cls_entropy", "[CLS] query token"))
    for ax, (column, panel) in zip(axes, panels, strict=True):
        ax.scatter(heads["layer"], heads[column], s=10, alpha=0.5, label="heads")
        ax.plot(layers["layer"], layers[column], marker="o", label="mean over heads")
        ax.plot(
            layers["layer"], layers["uniform_entropy"], ls="--", c="gray", label="uniform attention"
        )
        ax.set(xlabel="layer", ylabel="entropy (nats)", title=f"attention entropy: {panel}")
        layer_ticks(ax, layers["layer"], kinds=layers)
        ax.set_ylim(bottom=0)
        if heads[column].isna().all():
            ax.text(0.5, 0.5, "not defined for this model", transform=ax.transAxes, ha="center")
        ax.legend(loc="lower right")
    fig.suptitle(title)
    return fig


def gradients(gradients: pd.DataFrame, title: str):
    table = gradients
    fig, ax = plt.subplots(figsize=(6, 3.8))
    if (table["status"] != "ok").any():
        ax.text(
            0.5,
            0.5,
            str(table["status"].iloc[0]),
            transform=ax.transAxes,
            ha="center",
            va="center",
            fontsize=12,
        )
        ax.set_axis_off()
        return fig
    for name, label in CATEGORY_LABELS.items():
        part = table[table["category"] == name]
        ax.plot(part["layer"], part["importance"], marker="o", label=label)
    ax.set(
        xlabel="layer",
        ylabel="|alpha dL/dalpha| per query token",
        title=f"Gradient importance of attention (masked-LM loss), {title}",
    )
    layer_ticks(ax, table["layer"], kinds=table)
    ax.legend()
    return fig


def head_map(head_map: pd.DataFrame, title: str):
    table = head_map
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.2))
    order = [b for b in BEHAVIOURS if b in set(table["behaviour"])]
    sns.scatterplot(
        table,
        x="mds_x",
        y="mds_y",
        hue="behaviour",
        style="behaviour",
        hue_order=order,
        style_order=order,
        s=45,
        ax=axes[0],
    )
    sns.scatterplot(
        table, x="mds_x", y="mds_y", hue="layer", palette="viridis", s=45, ax=axes[1], legend="full"
    )
    for ax, panel in zip(axes, ("by behaviour", "by layer"), strict=True):
        for (x, y), text in zip(
            table[["mds_x", "mds_y"]].to_numpy(), head_label(table), strict=True
        ):
            ax.annotate(
                text, (x, y), fontsize=4, alpha=0.6, xytext=(2, 2), textcoords="offset points"
            )
        ax.set(xlabel="MDS 1", ylabel="MDS 2", title=f"Heads in 2-D MDS of JS distances, {panel}")
        ax.legend(fontsize=6, loc="best")
    fig.suptitle(title)
    return fig


def dendrogram(head_map: pd.DataFrame, linkage: pd.DataFrame, title: str):
    from scipy.cluster.hierarchy import dendrogram as draw

    heads, link = head_map, linkage
    Z = link[["left", "right", "distance", "size"]].to_numpy(dtype=float)
    n_clusters = heads["cluster"].nunique()
    threshold = Z[-(n_clusters - 1), 2] if n_clusters > 1 else 0
    fig, ax = plt.subplots(figsize=(max(8, 0.12 * len(heads)), 4.5))
    draw(Z, labels=head_label(heads).tolist(), color_threshold=threshold, ax=ax, leaf_font_size=5)
    ax.set(
        ylabel="JS distance (linkage height)",
        title=f"Hierarchical clustering of heads ({n_clusters} clusters coloured), {title}",
    )
    ax.grid(False)
    return fig
