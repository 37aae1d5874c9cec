"""Figure helpers: one look for every figure, saved as SVG plus PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

sns.set_theme(context="paper", style="whitegrid")


def save_figure(fig, *paths: str | Path) -> None:
    """Save `fig` to every path (format from the suffix: .svg, .pdf, .png) and close it."""
    for path in paths:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


def status_figure(status: str, title: str):
    """A figure that says, instead of data, why there is none (`core.tables.not_applicable`)."""
    fig, ax = plt.subplots(figsize=(6, 2.5))
    ax.text(0.5, 0.5, status, transform=ax.transAxes, ha="center", va="center", fontsize=11)
    ax.set_axis_off()
    fig.suptitle(title)
    return fig


MAX_LAYER_LABELS = 16  # more layer labels than this run together on a figure's axis


def layer_ticks(ax, layers, axis: str = "x") -> None:
    """Label the integer `layers` (or hidden states) on `axis`: every one up to
    MAX_LAYER_LABELS of them, else at most that many evenly spaced integers (matplotlib's
    MaxNLocator: 31 states 0..30 get 0, 2, ..., 30)."""
    from matplotlib.ticker import MaxNLocator

    layers = sorted({int(layer) for layer in layers})
    target = ax.xaxis if axis == "x" else ax.yaxis
    if len(layers) <= MAX_LAYER_LABELS:
        target.set_ticks(layers)
    else:
        target.set_major_locator(MaxNLocator(nbins=MAX_LAYER_LABELS, integer=True))


def heatmap_layer_ticks(ax, layers, axis: str = "y") -> None:
    """Label a heatmap's `layers` (its rows on axis "y", columns on "x", in drawing order, one
    cell each) with horizontal text: every one up to MAX_LAYER_LABELS of them, else every k-th
    from the first, k the smallest step that keeps at most MAX_LAYER_LABELS (18 layers: 1, 3,
    ..., 17). Seaborn's own labels stand upright on the y axis and run together from about 18
    rows on."""
    import math

    layers = [int(layer) for layer in layers]
    step = math.ceil(len(layers) / MAX_LAYER_LABELS)
    cells = range(0, len(layers), step)
    ticks, labels = [c + 0.5 for c in cells], [str(layers[c]) for c in cells]
    if axis == "y":
        ax.set_yticks(ticks, labels, rotation=0)
    else:
        ax.set_xticks(ticks, labels, rotation=0)
