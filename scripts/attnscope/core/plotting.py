"""Figure helpers: one look for every figure, saved as SVG plus PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from attnscope.core.layer_kinds import GLOBAL, SLIDING, has_both_kinds  # noqa: E402

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


def layer_ticks(ax, layers, axis: str = "x", kinds: pd.DataFrame | None = None) -> None:
    """Label the integer `layers` (or hidden states) on `axis`: every one up to
    MAX_LAYER_LABELS of them, else at most that many evenly spaced integers (matplotlib's
    MaxNLocator: 31 states 0..30 get 0, 2, ..., 30). `kinds`: a table with the layer kind
    columns (`core.layer_kinds`); where it holds global and sliding layers, a dotted line
    marks each global layer (`mark_global_layers`)."""
    from matplotlib.ticker import MaxNLocator

    layers = sorted({int(layer) for layer in layers})
    target = ax.xaxis if axis == "x" else ax.yaxis
    if len(layers) <= MAX_LAYER_LABELS:
        target.set_ticks(layers)
    else:
        target.set_major_locator(MaxNLocator(nbins=MAX_LAYER_LABELS, integer=True))
    if kinds is not None:
        mark_global_layers(ax, kinds, axis)


GLOBAL_COLOUR = "darkred"  # global layers, on the figures of a model with sliding ones too


def _kinds_by_layer(table: pd.DataFrame) -> pd.DataFrame | None:
    """`attention window` by 1-based layer where `table` holds global and sliding layers."""
    if not has_both_kinds(table):
        return None
    rows = table.assign(layer=pd.to_numeric(table["layer"], errors="coerce"))
    rows = rows.dropna(subset=["layer", "attention"]).drop_duplicates("layer")
    return rows.set_index(rows["layer"].astype(int).to_numpy())


def _kinds_note(kinds: pd.DataFrame) -> str:
    windows = sorted({int(w) for w in kinds.loc[kinds["attention"] == SLIDING, "window"]})
    return f"dark red: global; others sliding, window {', '.join(map(str, windows))}"


def mark_global_layers(ax, table: pd.DataFrame, axis: str = "x") -> None:
    """On an axis of layer numbers: a dotted line at each global layer and the axis label
    saying so, where `table` (with the kind columns) holds global and sliding layers."""
    kinds = _kinds_by_layer(table)
    if kinds is None:
        return
    line = ax.axvline if axis == "x" else ax.axhline
    for layer in kinds.index[kinds["attention"] == GLOBAL]:
        line(layer, color=GLOBAL_COLOUR, lw=0.8, ls=":", zorder=0)
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_label_text(f"{target.get_label_text() or 'layer'} ({_kinds_note(kinds)})")


def heatmap_layer_ticks(ax, layers, axis: str = "y", kinds: pd.DataFrame | None = None) -> None:
    """Label a heatmap's `layers` (its rows on axis "y", columns on "x", in drawing order, one
    cell each) with horizontal text: every one up to MAX_LAYER_LABELS of them, else every k-th
    from the first, k the smallest step that keeps at most MAX_LAYER_LABELS (18 layers: 1, 3,
    ..., 17). Seaborn's own labels stand upright on the y axis and run together from about 18
    rows on. `kinds`: a table with the layer kind columns (`core.layer_kinds`); where it holds
    global and sliding layers, every global layer is labelled (then the k-th layers closer
    than k to one are not), in bold GLOBAL_COLOUR, and the axis label gives the window
    (Gemma-3 270M's 18 layers: 1, 3, 6, 9, 12, 15, 18)."""
    import math

    layers = [int(layer) for layer in layers]
    step = math.ceil(len(layers) / MAX_LAYER_LABELS)
    cells = list(range(0, len(layers), step))
    marked = None if kinds is None else _kinds_by_layer(kinds)
    is_global = [
        marked is not None and layer in marked.index and marked.at[layer, "attention"] == GLOBAL
        for layer in layers
    ]
    chosen = [c for c, g in enumerate(is_global) if g]
    if chosen:
        far = [c for c in cells if all(abs(c - g) >= step for g in chosen)]
        cells = sorted(set(chosen) | set(far))
    ticks, labels = [c + 0.5 for c in cells], [str(layers[c]) for c in cells]
    target = ax.yaxis if axis == "y" else ax.xaxis
    target.set_ticks(ticks, labels, rotation=0)
    if marked is None:
        return
    global_labels = {labels[i] for i, c in enumerate(cells) if is_global[c]}
    for label in target.get_ticklabels():  # axes sharing this one (sharey) hold their own
        if label.get_text() in global_labels:
            label.set_color(GLOBAL_COLOUR)
            label.set_fontweight("bold")
    target.set_label_text(f"{target.get_label_text() or 'layer'} ({_kinds_note(marked)})")
