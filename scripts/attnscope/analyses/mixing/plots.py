"""Figures of the mixing analysis, drawn from its TSV tables only (no torch needed)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

import attnscope.core.plotting  # noqa: F401  (the shared look; sets the Agg backend)
from attnscope.core.plotting import layer_ticks

SCOPE_ORDER = [
    "Attn-w",
    "Attn",
    "AttnRes-w",
    "AttnRes",
    "AttnResLn",
    "AttnResLnFf",
    "AttnResLnFfRes",
    "AttnResLnFfResLn",
]


def mixing_ratio(mixing_ratio: pd.DataFrame, title: str):
    """Left: mixing ratio (%) per layer, one line per scope. Right: the all-layer means."""
    table = mixing_ratio.assign(percent=100 * mixing_ratio["mean"])
    per_layer = table[table["layer"] != "all"].assign(layer=lambda t: t["layer"].astype(int))
    overall = table[table["layer"] == "all"].set_index("scope").reindex(SCOPE_ORDER)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), width_ratios=[1.3, 1])
    palette = dict(zip(SCOPE_ORDER, sns.color_palette("tab10", len(SCOPE_ORDER)), strict=True))
    for scope in SCOPE_ORDER:
        rows = per_layer[per_layer["scope"] == scope]
        style = "--" if scope.endswith("-w") else "-"
        left.plot(
            rows["layer"], rows["percent"], style, marker="o", color=palette[scope], label=scope
        )
    left.set(xlabel="layer", ylabel="mixing ratio (%)", ylim=(0, 100))
    left.legend(fontsize="x-small", ncol=2)
    layer_ticks(left, per_layer["layer"], kinds=per_layer)
    right.barh(overall.index, overall["percent"], color=[palette[s] for s in overall.index])
    for y, value in enumerate(overall["percent"]):
        right.text(value + 1, y, f"{value:.1f}", va="center", fontsize="small")
    right.invert_yaxis()
    right.set(xlabel="mean over layers (%)", xlim=(0, 110))
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def rsa(rsa: pd.DataFrame, title: str):
    """Spearman between scopes' maps (mean over sequences and layers), symmetric heatmap."""
    rows = rsa[rsa["layer"] == "all"]
    scopes = [s for s in SCOPE_ORDER if s in set(rows["scope_a"]) | set(rows["scope_b"])]
    matrix = pd.DataFrame(np.eye(len(scopes)), index=scopes, columns=scopes)
    for row in rows.itertuples():
        matrix.loc[row.scope_a, row.scope_b] = matrix.loc[row.scope_b, row.scope_a] = row.spearman
    fig, ax = plt.subplots(figsize=(7, 6))
    sns.heatmap(matrix, ax=ax, annot=True, fmt=".2f", cmap="viridis", vmin=0, vmax=1, square=True)
    ax.set_title(f"{title}: Spearman between scopes (mean over layers)")
    fig.tight_layout()
    return fig


def scope_maps(example_maps: pd.DataFrame, title: str):
    """One sequence's maps: scopes as columns, layers as rows, each row-normalised and shaded
    from 0 to its own largest entry. One image per layer, its scopes side by side with a blank
    column between them (an axes per map took 10 s for SmolLM2's 30 x 8 maps)."""
    table = example_maps
    by_map = dict(iter(table.groupby(["layer", "scope"], sort=False)))
    layers = sorted({layer for layer, _ in by_map})
    scopes = [s for s in SCOPE_ORDER if s in {scope for _, scope in by_map}]
    n = int(table["query"].max())
    tokens = table.drop_duplicates("query").sort_values("query")["query_token"].tolist()
    height = 2.2 * len(layers)
    fig, axes = plt.subplots(len(layers), 1, figsize=(2.2 * len(scopes), height), squeeze=False)
    cmap = plt.get_cmap("Reds").with_extremes(bad="white")
    for ax, layer in zip(axes[:, 0], layers, strict=True):
        row = np.full((n, len(scopes) * (n + 1) - 1), np.nan)
        for c, scope in enumerate(scopes):
            row[:, c * (n + 1) : c * (n + 1) + n] = _scaled_map(by_map.get((layer, scope)), n)
        ax.imshow(row, cmap=cmap, vmin=0, vmax=1)
        ax.grid(False)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_ylabel(f"layer {layer}", fontsize="small")
    top, bottom = axes[0, 0], axes[-1, 0]
    top.set_xticks([c * (n + 1) + (n - 1) / 2 for c in range(len(scopes))], scopes)
    top.tick_params(axis="x", top=True, labeltop=True, bottom=False, labelbottom=False)
    bottom.set_xticks(range(n), tokens, rotation=90, fontsize=4)
    bottom.set_yticks(range(n), tokens, fontsize=4)
    fig.suptitle(
        f"{title}: first {n} pieces of one sequence (rows: query, columns: key)",
        y=1 - 0.1 / height,
        va="top",
    )
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.45 / height))
    return fig


def _scaled_map(maps: pd.DataFrame | None, n: int) -> np.ndarray:
    """One scope's [n, n] map from its table rows (None: none, all zeros), each query row
    normalised to sum 1, then divided by its largest entry (the shade imshow gives a map from
    0 to its maximum)."""
    grid = np.zeros((n, n))
    if maps is not None:
        grid[maps["query"] - 1, maps["key"] - 1] = maps["value"]
    total = grid.sum(1, keepdims=True)
    grid = np.divide(grid, total, out=np.zeros_like(grid), where=total > 0)
    largest = grid.max()
    return grid / largest if largest > 0 else grid


CHANGES = ("amplified", "suppressed")


def ff_pairs(ff_pairs: pd.DataFrame, title: str):
    """The amplified and suppressed (key -> query) piece pairs per layer as a table figure:
    one monospace column of text per change, a block per layer (one text artist per column:
    a grid of matplotlib tables took 15 s to draw and save for SmolLM2's 600 rows)."""
    layers = sorted(ff_pairs["layer"].unique())
    texts = {change: _pair_lines(ff_pairs, change, layers) for change in CHANGES}
    height = 0.11 * (max(text.count("\n") for text in texts.values()) + 1) + 0.8
    fig, axes = plt.subplots(1, 2, figsize=(11, height))
    fig.subplots_adjust(left=0.02, right=0.98, bottom=0.2 / height, top=1 - 0.6 / height)
    for ax, (change, text) in zip(axes, texts.items(), strict=True):
        ax.axis("off")
        ax.text(0, 1, text, family="monospace", fontsize=6, va="top", transform=ax.transAxes)
        ax.set_title(change, fontsize="small")
    fig.suptitle(
        f"{title}: FF effect on piece pairs (row-normalised AttnResLnFf - AttnResLn)",
        y=1 - 0.1 / height,
        va="top",
    )
    return fig


def _pair_lines(table: pd.DataFrame, change: str, layers: list) -> str:
    """One change's pairs as text: per layer a header, then `key -> query  change  count`."""
    out = [f"  {'key -> query':<34} {'change':>7} {'count':>5}", ""]
    for layer in layers:
        rows = table[(table["layer"] == layer) & (table["change"] == change)]
        out.append(f"layer {layer}" + ("" if len(rows) else ": no pair seen twice"))
        for k, q, m, n in zip(
            rows["key_token"], rows["query_token"], rows["mean_change"], rows["count"], strict=True
        ):
            out.append(f"  {_cut(f'{k} -> {q}', 34):<34} {m:+.4f} {n:>5}")
        out.append("")
    return "\n".join(out).rstrip("\n")


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


def propagated_mixing(propagated_mixing: pd.DataFrame, mixing_ratio: pd.DataFrame, title: str):
    """Left: the mixing ratio (%) of the propagated split by depth against the per-layer one
    of the same residual state. Right: the share of the state no input token carries."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    per_layer = propagated_mixing[propagated_mixing["layer"] != "all"]
    per_layer = per_layer.assign(layer=lambda t: t["layer"].astype(int))
    carried = per_layer[per_layer["measure"] == "mixing_ratio"]
    left.plot(carried["layer"], 100 * carried["mean"], "-o", label="propagated (input tokens)")
    local = mixing_ratio[mixing_ratio["layer"] != "all"].assign(
        layer=lambda t: t["layer"].astype(int)
    )
    for scope in ("AttnResLnFfRes", "AttnResLnFfResLn"):
        rows = local[local["scope"] == scope]
        left.plot(rows["layer"], 100 * rows["mean"], "--", label=f"per layer: {scope}")
    left.set(xlabel="layer", ylabel="mixing ratio (%)", ylim=(0, 100))
    left.legend(fontsize="x-small")
    bias = per_layer[per_layer["measure"] == "bias_share"]
    right.plot(bias["layer"], 100 * bias["mean"], "-o", color="tab:gray")
    right.set(xlabel="layer", ylabel="bias share of the norm budget (%)")
    for ax in (left, right):
        layer_ticks(ax, per_layer["layer"], kinds=per_layer)
    fig.suptitle(f"{title}: the state after each layer split by input token")
    fig.tight_layout()
    return fig


def rollout(rollout: pd.DataFrame, title: str):
    """Spearman of each rollout against the propagated decomposition, by layer."""
    rows = rollout[(rollout["layer"] != "all") & ~rollout["baseline"].str.contains("~")]
    rows = rows.assign(layer=lambda t: t["layer"].astype(int))
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for baseline, group in rows.groupby("baseline", sort=False):
        ax.plot(group["layer"], group["spearman"], "-o", label=baseline)
    ax.axhline(0, color="black", linewidth=0.5)
    ax.set(xlabel="layer", ylabel="Spearman vs propagated", ylim=(-1, 1))
    layer_ticks(ax, rows["layer"], kinds=rows)
    ax.legend(fontsize="x-small")
    ax.set_title(f"{title}: where rollout agrees with the exact propagation")
    fig.tight_layout()
    return fig


def prediction(prediction: pd.DataFrame, prediction_examples: int, title: str):
    """The first predictions: each input token's contribution to the predicted logit, tokens
    in order, shaded red (raises the logit) or blue (lowers it); the bias part at the end."""
    keys = prediction[["sequence", "position"]].drop_duplicates().head(prediction_examples)
    fig, axes = plt.subplots(len(keys), 1, figsize=(12, 1.3 * len(keys) + 0.6), squeeze=False)
    for ax, (sequence, position) in zip(axes[:, 0], keys.itertuples(index=False), strict=True):
        rows = prediction[
            (prediction["sequence"] == sequence) & (prediction["position"] == position)
        ]
        values = rows["contribution"].to_numpy()
        limit = max(float(np.abs(values).max()), 1e-12)
        ax.imshow(values[None], cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
        ax.set_xticks(range(len(rows)), rows["source_token"], rotation=90, fontsize=5)
        ax.set_yticks([])
        ax.grid(False)
        first = rows.iloc[0]
        at = "after" if first["predicts"] == "next" else "at"
        ax.set_title(
            f"sequence {sequence}, {at} position {position} ({first['token']}): predicts "
            f"{first['predicted']}, logit {first['logit']:.2f} (|max| part {limit:.2f})",
            fontsize="small",
        )
    fig.suptitle(f"{title}: input tokens' contributions to the prediction")
    fig.tight_layout()
    return fig
