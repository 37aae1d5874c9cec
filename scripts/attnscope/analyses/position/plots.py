"""Figures of the position analyses (Yamamoto & Matsuzaki), drawn from the TSV tables only.

Every function takes the tables it needs as DataFrames (a list of them for several models) plus
a title, and returns a matplotlib figure. Frequency 0 (the columns' means) is left out of
the spectrum plots, where it would dwarf the periodic part.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib import pyplot as plt

import attnscope.core.plotting  # noqa: F401  (the shared look; sets the Agg backend)
from attnscope.core.plotting import heatmap_layer_ticks
from attnscope.core.tables import is_not_applicable


def pe_spectrum(pe_spectrum: pd.DataFrame, title: str):
    """Fig. 3: mean amplitude of the position-embedding columns with the inter-quartile band,
    and the word-embedding control."""
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for (embedding, rows), colour in zip(
        pe_spectrum[pe_spectrum.frequency > 0].groupby("embedding", sort=False),
        sns.color_palette(n_colors=2),
        strict=False,
    ):
        label = "position embeddings" if embedding == "position" else "word embeddings (control)"
        ax.plot(rows.frequency, rows["mean"], color=colour, lw=1, label=f"{label}, mean")
        ax.fill_between(rows.frequency, rows.q25, rows.q75, color=colour, alpha=0.25, lw=0)
    ax.set(xlabel="frequency (cycles per sequence)", ylabel="amplitude", title=title)
    ax.legend()
    return fig


def pe_pca(pe_pca: pd.DataFrame, title: str):
    """Fig. 9: cumulative explained variance of the position embeddings' principal components."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(pe_pca.components, 100 * pe_pca.cumulative_variance, marker=".", ms=3, lw=1)
    for k in (4, 12):
        if k <= len(pe_pca):
            value = 100 * pe_pca.cumulative_variance.iloc[k - 1]
            ax.annotate(
                f"{k}: {value:.1f}%", (k, value), xytext=(6, -12), textcoords="offset points"
            )
            ax.plot([k], [value], "o", color="C3")
    ax.set(xscale="log", xlabel="principal components", ylabel="cumulative variance (%)")
    ax.set(ylim=(0, 101), title=title)
    return fig


def _layer_axes(n_layers: int, width: float = 3.2, height: float = 2.4, sharey=True):
    cols = min(n_layers, 4)
    rows = -(-n_layers // cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(width * cols, height * rows), squeeze=False, sharey=sharey
    )
    for ax in axes.flat[n_layers:]:
        ax.set_visible(False)
    return fig, axes.flat


def wa_singular_values(wa_singular_values: pd.DataFrame, title: str):
    """Singular values of W^A per head, one panel per layer; the x axis stops a little after
    the numerical rank (values above 1e-6 of the largest), beyond which all are ~0. Rotary
    models (a `band` column): the largest singular value of each band's form per head."""
    singular = wa_singular_values
    if "band" in singular:
        return _band_singular_values(singular, title)
    layers = sorted(singular.layer.unique())
    fig, axes = _layer_axes(len(layers))
    rank = singular[singular.singular_value > 1e-6 * singular.singular_value.max()]["index"].max()
    shown = singular[singular["index"] <= int(np.ceil(1.25 * rank))]
    palette = sns.color_palette("husl", singular["head"].nunique())
    for ax, layer in zip(axes, layers, strict=False):
        rows = shown[shown.layer == layer]
        for (_, head_rows), colour in zip(rows.groupby("head"), palette, strict=True):
            ax.plot(head_rows["index"], head_rows.singular_value, color=colour, lw=0.8)
        ax.axvline(rank, color="grey", lw=0.6, ls="--")
        ax.set(title=f"layer {layer}", xlabel="index")
    axes[0].set_ylabel("singular value")
    fig.suptitle(f"{title}: singular values of W^A (one line per head)")
    fig.tight_layout()
    return fig


def _band_singular_values(singular: pd.DataFrame, title: str):
    """The largest singular value of W_Q^b (W_K^b)^T against band b, one line per head."""
    top = singular[singular["index"] == 1]
    layers = sorted(top.layer.unique())
    fig, axes = _layer_axes(len(layers))
    palette = sns.color_palette("husl", top["head"].nunique())
    for ax, layer in zip(axes, layers, strict=False):
        rows = top[top.layer == layer]
        for (_, head_rows), colour in zip(rows.groupby("head"), palette, strict=True):
            ax.plot(head_rows.band, head_rows.singular_value, color=colour, lw=0.8)
        ax.set(title=f"layer {layer}", xlabel="band (0 = highest frequency)")
    axes[0].set_ylabel("largest singular value")
    fig.suptitle(f"{title}: W_Q^b (W_K^b)^T per rotary band (one line per head)")
    fig.tight_layout()
    return fig


def rotation_angles(rotation_angles: pd.DataFrame, title: str):
    """Histograms of the eigen-angles of R (full and rank block) and, for the rank block,
    angle against modulus."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
    bins = np.linspace(-np.pi, np.pi, 73)
    for ax, block in zip(axes[:2], ("full", "rank"), strict=True):
        rows = rotation_angles[rotation_angles.block == block]
        ax.hist(rows.theta, bins=bins, color="C0" if block == "full" else "C1")
        ax.set(xlabel="theta (rad)", ylabel="eigenvalues", title=f"R, {block} block")
    rank = rotation_angles[rotation_angles.block == "rank"]
    points = axes[2].scatter(rank.theta, rank.modulus, c=rank.layer, s=4, cmap="viridis")
    axes[2].set(xlabel="theta (rad)", ylabel="modulus", title="R, rank block")
    fig.colorbar(points, ax=axes[2], label="layer")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def trt_clusters(trt_clusters: pd.DataFrame, title: str):
    """Fig. 1: share of each head's sequences in each k-means cluster, a row of stacked bars
    per layer."""
    layers = sorted(trt_clusters.layer.unique())
    clusters = sorted(trt_clusters.cluster.unique())
    palette = dict(zip(clusters, sns.color_palette("tab10", len(clusters)), strict=True))
    fig, axes = plt.subplots(
        len(layers), 1, figsize=(7, 0.9 * len(layers) + 0.8), sharex=True, squeeze=False
    )
    for ax, layer in zip(axes[:, 0], layers, strict=True):
        wide = trt_clusters[trt_clusters.layer == layer].pivot(
            index="head", columns="cluster", values="share"
        )
        bottom = np.zeros(len(wide))
        for cluster in clusters:
            ax.bar(wide.index, wide[cluster], bottom=bottom, color=palette[cluster], width=0.85)
            bottom += wide[cluster].to_numpy()
        ax.set(ylim=(0, 1), yticks=[], xticks=wide.index)
        ax.set_ylabel(f"layer {layer}", rotation=0, ha="right", va="center")
    axes[-1, 0].set_xlabel("head")
    handles = [plt.Rectangle((0, 0), 1, 1, color=palette[c]) for c in clusters]
    fig.legend(handles, [f"cluster {c}" for c in clusters], loc="upper right", ncols=3)
    fig.suptitle(title, x=0.02, ha="left")
    return fig


def trt_centres(trt_centres: pd.DataFrame, title: str):
    """The k-means cluster centres: tr_t(A) against the relative position t."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    clusters = sorted(trt_centres.cluster.unique())
    for cluster, colour in zip(clusters, sns.color_palette("tab10", len(clusters)), strict=True):
        rows = trt_centres[trt_centres.cluster == cluster]
        ax.plot(rows.t, rows.value, marker="o", ms=3, color=colour, label=f"cluster {cluster}")
    ax.set(xlabel="relative position t (key - query)", ylabel="tr_t(A)", title=title)
    ax.set_xticks(sorted(trt_centres.t.unique())[:: max(1, trt_centres.t.nunique() // 11)])
    ax.legend(fontsize="small")
    return fig


def spectra(spectra: pd.DataFrame, title: str):
    """Fig. 5: per layer, the largest amplitude over columns (and heads) at each frequency of
    x (the attention block's input), Q and K."""
    sources = ("X", "Q", "K")
    layers = sorted(spectra.layer.unique())
    colours = dict(zip(layers, sns.color_palette("viridis", len(layers)), strict=True))
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.5))
    for ax, source in zip(axes, sources, strict=True):
        rows = spectra[(spectra.source == source) & (spectra.frequency > 0)]
        for layer, layer_rows in rows.groupby("layer"):
            ax.plot(
                layer_rows.frequency,
                layer_rows.amplitude,
                color=colours[layer],
                lw=0.8,
                label=f"layer {layer}",
            )
        ax.set(xlabel="frequency (cycles per sequence)", title=source)
    axes[0].set_ylabel("max amplitude")
    axes[-1].legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def g_map(g_map: pd.DataFrame, title: str):
    """Fig. 6: g(f, theta) = amplitude of the eigen-waves Q p_i and K p_i of R_rank at frequency
    f, with the lines of constant shift Delta = n theta / (2 pi f)."""
    heads = g_map[["layer", "head"]].drop_duplicates().to_numpy()
    fig, axes = plt.subplots(len(heads), 2, figsize=(11, 3.6 * max(len(heads), 1)), squeeze=False)
    for row, (layer, head) in zip(axes, heads, strict=True):
        for ax, wave in zip(row, ("Q", "K"), strict=True):
            rows = g_map[(g_map.layer == layer) & (g_map["head"] == head) & (g_map.wave == wave)]
            rows = rows.sort_values("amplitude")
            points = ax.scatter(rows.frequency, rows.theta, c=rows.amplitude, s=3, cmap="magma_r")
            n = rows.positions.iloc[0]
            f = np.arange(1, rows.frequency.max() + 1, 0.25)
            for delta in (-3, -2, -1, 1, 2, 3):
                theta = np.angle(np.exp(2j * np.pi * f * delta / n))  # wrapped to (-pi, pi]
                theta[1:][np.abs(np.diff(theta)) > np.pi] = np.nan  # no line across a wrap
                ax.plot(f, theta, lw=0.6, ls="--", color="grey")
                label_f = min(f[-1], 0.45 * n / abs(delta))
                ax.annotate(
                    f"Δ={delta}",
                    (label_f, 2 * np.pi * label_f * delta / n),
                    fontsize="x-small",
                    color="grey",
                )
            ax.set(ylim=(-np.pi, np.pi), xlabel="frequency f", ylabel="theta (rad)")
            ax.set_title(f"layer {layer} head {head}: g(f, theta) of {wave} p_i")
            fig.colorbar(points, ax=ax, label="amplitude")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def xcorr(xcorr: pd.DataFrame, xcov_sum: pd.DataFrame, title: str, columns: int = 20):
    """Fig. 7: xcorr_j(t) of the first `columns` singular directions (top) and
    sum_j s_j xcov_j(t) against tr_t(Q S K^T) (bottom), per selected head."""
    heads = xcorr[["layer", "head"]].drop_duplicates().to_numpy()
    fig, axes = plt.subplots(
        2, len(heads), figsize=(5 * max(len(heads), 1), 6), squeeze=False, sharex=True
    )
    for col, (layer, head) in zip(axes.T, heads, strict=True):
        rows = xcorr[(xcorr.layer == layer) & (xcorr["head"] == head) & (xcorr.column <= columns)]
        palette = sns.color_palette("viridis", rows.column.nunique())
        for (_, column_rows), colour in zip(rows.groupby("column"), palette, strict=True):
            col[0].plot(column_rows.t, column_rows.xcorr, color=colour, lw=0.7)
        col[0].set(title=f"layer {layer} head {head}", ylabel=f"xcorr_j(t), j = 1..{columns}")
        total = xcov_sum[(xcov_sum.layer == layer) & (xcov_sum["head"] == head)]
        col[1].plot(total.t, total.sum_s_xcov, lw=1.5, label="sum_j s_j xcov_j(t)")
        col[1].plot(total.t, total.trt_qsk, lw=1, ls="--", color="k", label="tr_t(Q S K^T)")
        col[1].set(xlabel="t", ylabel="mean over sequences")
        col[1].legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def pe_spectra_models(pe_spectrum: list[pd.DataFrame], models: list[str], title: str):
    """Fig. 8: mean amplitude spectrum (with IQR band) of the position embeddings of every
    model, against cycles per token so that models with different lengths line up."""
    fig, ax = plt.subplots(figsize=(7, 3.5))
    palette = sns.color_palette(n_colors=len(models))
    for table, model, colour in zip(pe_spectrum, models, palette, strict=True):
        if is_not_applicable(table):  # a rotary model: no position embeddings
            continue
        rows = table[(table.embedding == "position") & (table.frequency > 0)]
        ax.plot(rows.cycles_per_token, rows["mean"], color=colour, lw=1, label=model)
        ax.fill_between(rows.cycles_per_token, rows.q25, rows.q75, color=colour, alpha=0.2, lw=0)
    ax.set(xlabel="frequency (cycles per token)", ylabel="amplitude", title=title)
    ax.legend()
    return fig


SWITCHED_OFF = "s^b constant in every head: q^b or k^b is 0 (e.g. a QK-norm weight of 0)"


def rotary_positional_share(rotary_bands: pd.DataFrame, title: str):
    """Band x layer heatmap of the positional share (R^2 of s^b on the offset), mean over the
    heads where s^b varies; bands ordered from the highest frequency (0) to the lowest, the
    unrotated band last. A band constant in every head of a layer (positional_share NaN: its
    q^b or k^b is 0, as where Gemma-3's QK-norm weight switches dimensions off) is hatched
    grey and named in the legend; a band the layer does not have (a NoPE layer) stays blank."""
    by_cell = rotary_bands.groupby(["layer", "band"])["positional_share"]
    grid = by_cell.mean().unstack("band")  # NaN: every head constant, or no such band
    switched = by_cell.agg(lambda share: bool(share.isna().all())).unstack("band")
    switched = switched.reindex_like(grid).fillna(False).astype(bool)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.25 * grid.shape[1] + 2), 0.35 * len(grid) + 1.6))
    sns.heatmap(grid, ax=ax, vmin=0, vmax=1, cmap="viridis", cbar_kws={"label": "R² on i − j"})
    style = {"facecolor": "0.85", "edgecolor": "0.5", "hatch": "xxx", "linewidth": 0}
    for row, column in zip(*np.nonzero(switched.to_numpy()), strict=True):
        ax.add_patch(plt.Rectangle((column, row), 1, 1, **style))
    if switched.to_numpy().any():  # below the band labels: 0.55 inch under the axes
        below = 0.55 / (ax.get_position().height * fig.get_figheight())
        ax.legend(
            handles=[plt.Rectangle((0, 0), 1, 1, label=SWITCHED_OFF, **style)],
            loc="upper left",
            bbox_to_anchor=(0, -below),
            fontsize="x-small",
            frameon=False,
        )
    ax.set(xlabel="band (0 = highest frequency)", ylabel="layer", title=title)
    heatmap_layer_ticks(ax, grid.index, kinds=rotary_bands)
    return fig


def rotary_offsets(
    rotary_offsets: pd.DataFrame, rotary_positional_heads: pd.DataFrame, title: str, bands=3
):
    """Offset profiles E[s^b | i - j = t] of each prev/self head's `bands` bands with the
    largest previous-token margin, one panel per head."""
    heads = rotary_positional_heads[["layer", "head", "behaviour"]].drop_duplicates()
    fig, axes = plt.subplots(1, len(heads), figsize=(3.4 * len(heads), 2.8), squeeze=False)
    for ax, (layer, head, behaviour) in zip(axes[0], heads.itertuples(index=False), strict=True):
        margins = rotary_positional_heads[
            (rotary_positional_heads.layer == layer) & (rotary_positional_heads["head"] == head)
        ]
        top = margins.reindex(margins["margin"].abs().sort_values(ascending=False).index)
        for band in top["band"].head(bands):
            rows = rotary_offsets[
                (rotary_offsets.layer == layer)
                & (rotary_offsets["head"] == head)
                & (rotary_offsets.band == band)
            ]
            ax.plot(rows.t, rows["mean"], marker=".", lw=1, label=f"band {band}")
        ax.set(title=f"layer {layer} head {head} ({behaviour})", xlabel="offset i − j")
        ax.legend(fontsize=7)
    axes[0, 0].set_ylabel("mean band score")
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def rotary_norms(rotary_bands: pd.DataFrame, title: str):
    """Mean ||q^b|| and ||k^b|| per band against its wavelength 2 pi / theta_b in tokens (log
    scale; the unrotated band, of infinite wavelength, is left out), all layers and heads."""
    rows = rotary_bands[np.isfinite(rotary_bands.wavelength)]
    fig, axes = plt.subplots(1, 2, figsize=(8.6, 3.2), sharey=True, constrained_layout=True)
    for ax, name in zip(axes, ("q_norm", "k_norm"), strict=True):
        points = ax.scatter(
            rows.wavelength, rows[name], s=6, alpha=0.5, c=rows.layer, cmap="viridis"
        )
        ax.set(xscale="log", xlabel="wavelength (tokens)", title=name.replace("_", " "))
    axes[0].set_ylabel("mean norm")
    fig.colorbar(points, ax=list(axes), label="layer")
    fig.suptitle(title)
    return fig
