"""Figures of the norm-based analysis, drawn from its TSV tables only (no torch needed).

Layers and heads are 1-based, as in the tables. Each function returns a matplotlib figure.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.ticker import MaxNLocator

import attnscope.core.plotting  # noqa: F401  (the shared look; sets the Agg backend)
from attnscope.core.plotting import heatmap_layer_ticks, layer_ticks

CATEGORY_ORDER = ["CLS", "SEP", "punct", "other"]


def heads_per_layer(table: pd.DataFrame, seed: int) -> dict[int, int]:
    """One head per layer, drawn with `seed` (the paper shows one random head per layer)."""
    n_heads = int(table["head"].max())
    layers = sorted(table["layer"].unique())
    drawn = np.random.default_rng(seed).integers(1, n_heads + 1, size=len(layers))
    return {int(layer): int(h) for layer, h in zip(layers, drawn, strict=True)}


def affine_singular_values(affine_singular_values: pd.DataFrame, title: str, seed: int):
    """Left: sorted singular values of f for one seeded head per layer (Fig. 2).
    Right: the largest / smallest singular value ratio of every head."""
    table = affine_singular_values
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), width_ratios=[1.2, 1])
    chosen = heads_per_layer(table, seed)
    palette = sns.color_palette("viridis", len(chosen))
    for colour, (layer, head) in zip(palette, chosen.items(), strict=True):
        rows = table[(table["layer"] == layer) & (table["head"] == head)].sort_values("index")
        left.plot(rows["index"], rows["singular_value"], color=colour, label=f"L{layer} H{head}")
    left.set(xlabel="index (descending)", ylabel="singular value", yscale="log")
    left.set_title(f"one head per layer (seed {seed})")
    left.legend(fontsize="x-small", ncol=2)
    ends = table.groupby(["layer", "head"])["singular_value"].agg(["max", "min"])
    ratio = (ends["max"] / ends["min"]).unstack("head")
    sns.heatmap(ratio, ax=right, cmap="magma", cbar_kws={"label": "max / min singular value"})
    heatmap_layer_ticks(right, ratio.index, kinds=table)
    right.set_title(f"all heads (smallest ratio {ratio.min().min():.2f})")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def alpha_fx_scatter(alpha_fx_sample: pd.DataFrame, alpha_fx_spearman: pd.DataFrame, title: str):
    """alpha vs ||f(x)|| for the scatter sample, one colour per key category (Fig. 3)."""
    sample, spearman = alpha_fx_sample, alpha_fx_spearman
    rho = dict(zip(spearman["category"], spearman["spearman"], strict=True))
    labels = {c: f"{c} (Spearman {rho.get(c, np.nan):.2f})" for c in CATEGORY_ORDER}
    data = sample.assign(category=sample["category"].map(labels))
    fig, ax = plt.subplots(figsize=(6, 4.5))
    sns.scatterplot(
        data=data,
        x="alpha",
        y="fx_norm",
        hue="category",
        hue_order=[labels[c] for c in CATEGORY_ORDER],
        s=4,
        alpha=0.4,
        linewidth=0,
        rasterized=True,
        ax=ax,
    )
    ax.set(xlabel="attention weight alpha", ylabel="||f(x)||", title=title)
    ax.legend(title="key category", markerscale=3, fontsize="small")
    fig.tight_layout()
    return fig


def sep_heads(sep_heads: pd.DataFrame, title: str):
    """Layer x head heatmaps of the alpha summed over [SEP] and the mean ||f(x_[SEP])|| (Fig. 4)."""
    table = sep_heads
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    titles = {
        "alpha_sep": "alpha summed over [SEP] (mean per query)",
        "fx_sep": "mean ||f(x_[SEP])||",
    }
    for ax, (column, panel) in zip(axes, titles.items(), strict=True):
        grid = table.pivot(index="layer", columns="head", values=column)
        sns.heatmap(grid, ax=ax, cmap="Blues", cbar_kws={"label": column})
        heatmap_layer_ticks(ax, grid.index, kinds=table)
        ax.set_title(panel)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def token_class_layer(token_class_layer: pd.DataFrame, title: str):
    """Per layer, stacked alpha and ||alpha f(x)|| summed over each key category (Fig. 5)."""
    table = token_class_layer
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = dict(zip(CATEGORY_ORDER, sns.color_palette("deep", 4), strict=True))
    titles = {"alpha": "alpha (weights)", "alpha_fx": "||alpha f(x)|| (norms)"}
    for ax, (column, panel) in zip(axes, titles.items(), strict=True):
        grid = table.pivot(index="layer", columns="category", values=column)
        grid = grid[[c for c in CATEGORY_ORDER if c in grid]]
        bottom = np.zeros(len(grid))
        for category in grid:
            ax.bar(
                grid.index, grid[category], bottom=bottom, label=category, color=colours[category]
            )
            bottom += grid[category].to_numpy()
        ax.set(xlabel="layer", ylabel=f"{column} summed over the category's keys")
        layer_ticks(ax, grid.index, kinds=table)
        ax.set_title(panel)
    axes[1].legend(title="key category", loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def attention_sinks(attention_sinks: pd.DataFrame, title: str):
    """Layer x head heatmaps of the first position's weight, its share of the norms, and its
    ||f(x)|| against the other positions' (Xiao et al. 2023; Kobayashi's Fig. 4 for BOS)."""
    table = attention_sinks
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    panels = {
        "alpha_first": ("alpha on the first position", "Blues", None),
        "norm_share": ("its share of sum_j ||alpha f(x_j)||", "Blues", None),
        "fx_ratio": ("||f(x_0)|| / mean ||f(x_j)||, j >= 1", "RdBu_r", 1.0),
    }
    for ax, (column, (panel, cmap, centre)) in zip(axes, panels.items(), strict=True):
        grid = table.pivot(index="layer", columns="head", values=column)
        limits = {"vmin": 0, "vmax": 1} if centre is None else {"center": centre}
        sns.heatmap(grid, ax=ax, cmap=cmap, cbar_kws={"label": column}, **limits)
        heatmap_layer_ticks(ax, grid.index, kinds=table)
        ax.set_title(panel)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def massive_activations(massive_activations: pd.DataFrame, title: str):
    """Per hidden state, the first position's largest |feature| against the median of the
    other positions' largest (left), and their ratio (right), log scale (Sun et al. 2024)."""
    table = massive_activations
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot(table["layer"], table["first_max"], marker="o", label="first position")
    left.plot(table["layer"], table["other_median"], marker="s", label="other positions (median)")
    left.set(xlabel="hidden state (0 = embeddings)", ylabel="largest |feature|", yscale="log")
    left.legend(fontsize="small")
    right.plot(table["layer"], table["ratio"], marker="o", label="mean over sequences")
    right.plot(table["layer"], table["ratio_max"], marker="^", ls="--", label="largest")
    right.axhline(1, color="grey", lw=0.8)
    right.set(xlabel="hidden state (0 = embeddings)", ylabel="first / others", yscale="log")
    right.legend(fontsize="small")
    for ax in (left, right):
        layer_ticks(ax, table["layer"], kinds=table)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def sink_card(
    sink_epsilon: pd.DataFrame,
    sink_stream: pd.DataFrame,
    sink_kobayashi: pd.DataFrame,
    title: str,
):
    """The attention-sink card: per layer Gu et al.'s Sink^eps (the per-sequence sink
    indicator averaged over sequences and heads) on the corpus, on their repeated-token
    control (one piece everywhere, no BOS) and on the BOS-anchored input (Gu et al. 2024);
    the first position's weight along the stream by query position, one line per layer
    (Xiao et al. 2023); its share of alpha against its share of the norms (Kobayashi). eps
    and the positions read are read from the table; a dotted line marks each global layer
    of a model with sliding ones too (the tables' kind columns, `core.layer_kinds`)."""
    fig, (left, middle, right) = plt.subplots(1, 3, figsize=(16, 4.4))
    _sink_share_bars(left, sink_epsilon)
    _first_weight_along_the_stream(fig, middle, sink_stream)
    _first_position_shares(right, sink_kobayashi)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def _sink_share_bars(ax, sink_epsilon: pd.DataFrame) -> None:
    """Sink^eps per layer on the corpus, Gu's control and the BOS-anchored input."""
    per_layer = sink_epsilon[sink_epsilon["layer"].astype(str) != "all"]
    overall = sink_epsilon[sink_epsilon["layer"].astype(str) == "all"].iloc[0]
    layers = per_layer["layer"].astype(int).to_numpy()
    width = 0.28
    bars = (
        ("sink_share", "corpus"),
        ("sink_share_control", "one piece, no BOS (Gu's control)"),
        ("sink_share_anchored", "one piece, BOS kept"),
    )
    for offset, (column, label) in zip((-width, 0, width), bars, strict=True):
        ax.bar(layers + offset, per_layer[column], width, label=label)
    ax.set(xlabel="layer", ylabel="Sink^eps (heads x sequences)", ylim=(0, 1.05))
    layer_ticks(ax, layers, kinds=per_layer)
    ax.legend(fontsize="small")
    eps, positions = overall["epsilon"], int(overall["positions"])
    ax.set_title(
        f"Sink^{eps:g}, first {positions} pieces: {overall['sink_share']:.2f} "
        f"(control {overall['sink_share_control']:.2f})"
    )


def _first_weight_along_the_stream(fig, ax, sink_stream: pd.DataFrame) -> None:
    """The first position's weight by query-position bin, one line per layer (Xiao)."""
    stream_layers = sorted(sink_stream["layer"].unique())
    shade = plt.Normalize(min(stream_layers), max(stream_layers))
    for layer in stream_layers:  # each line the colour of its layer on the colour bar
        rows = sink_stream[sink_stream["layer"] == layer]
        centre = (rows["position_from"] + rows["position_to"]) / 2
        colour = plt.cm.viridis(shade(layer))
        ax.plot(centre.clip(lower=0.5), rows["alpha_first"], marker=".", color=colour)
    ax.set(xscale="log", xlabel="query position i (bin centre)", ylim=(0, 1.05))
    ax.set(ylabel="alpha on the first position (mean over heads)")
    colourbar = plt.cm.ScalarMappable(cmap="viridis", norm=shade)
    fig.colorbar(colourbar, ax=ax, label="layer").ax.yaxis.set_major_locator(
        MaxNLocator(integer=True)
    )
    ax.set_title("along the stream")


def _first_position_shares(ax, sink_kobayashi: pd.DataFrame) -> None:
    """The first position's share of alpha against its share of the norms (Kobayashi)."""
    kob = sink_kobayashi[sink_kobayashi["layer"].astype(str) != "all"]
    total = sink_kobayashi[sink_kobayashi["layer"].astype(str) == "all"].iloc[0]
    kob_layers = kob["layer"].astype(int)
    ax.plot(kob_layers, kob["alpha_first"], marker="o", label="share of alpha")
    ax.plot(kob_layers, kob["norm_share"], marker="s", label="share of ||alpha f(x)||")
    ax.set(xlabel="layer", ylabel="first position's share (mean over heads)", ylim=(0, 1.05))
    layer_ticks(ax, kob_layers, kinds=kob)
    ax.legend(fontsize="small")
    ax.set_title(
        f"all layers: alpha {total['alpha_first']:.2f}, ||alpha f(x)|| {total['norm_share']:.2f}"
    )
