"""Attention concentrated on relative positions: the diagonal sums tr_t(A) (Eq. 7 of Yamamoto &
Matsuzaki) and their k-means clusters.

tr_t(M) = sum_i M[i, i + t] (`core.diagonals.diagonal_sums`, shared with the attend family):
t > 0 sums weights to keys t tokens after the query, t < 0 before. Per (sequence, layer,
head) the vector [tr_-t_max(A), ..., tr_t_max(A)] is the head's average tendency to attend
at each offset (it sums the weights of all query rows: with n real tokens, tr_0 = n * mean
attention to self).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd


def cluster_profiles(
    trt: pd.DataFrame, n_clusters: int, seed: int
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """k-means over the tr_t vectors of every (sequence, layer, head).

    `trt`: rows `sequence layer head t value`. Returns (shares, centres):
    shares `layer head cluster share` (share of the head's sequences in each cluster, every
    cluster listed), centres `cluster t value`. Clusters are numbered 1..k from the leftmost
    centre of mass sum_t t c_t / sum_t c_t to the rightmost; k = min(n_clusters, vectors).
    """
    from sklearn.cluster import KMeans

    wide = trt.pivot_table(index=["sequence", "layer", "head"], columns="t", values="value")
    offsets = wide.columns.to_numpy()
    vectors = wide.to_numpy()
    k = min(n_clusters, len(vectors))
    kmeans = KMeans(n_clusters=k, n_init=10, random_state=seed).fit(vectors)
    centres = kmeans.cluster_centers_
    centre_of_mass = (centres * offsets).sum(axis=1) / centres.sum(axis=1)  # tr_t >= 0
    rank = np.empty(k, dtype=int)
    rank[np.argsort(centre_of_mass, kind="stable")] = np.arange(1, k + 1)
    labels = pd.DataFrame(
        {
            "layer": wide.index.get_level_values("layer"),
            "head": wide.index.get_level_values("head"),
            "cluster": rank[kmeans.labels_],
        }
    )
    counts = labels.groupby(["layer", "head", "cluster"]).size()
    full = pd.MultiIndex.from_product(
        [sorted(labels["layer"].unique()), sorted(labels["head"].unique()), range(1, k + 1)],
        names=["layer", "head", "cluster"],
    )
    counts = counts.reindex(full, fill_value=0)
    shares = (counts / counts.groupby(["layer", "head"]).transform("sum")).rename("share")
    centre_rows = pd.DataFrame(
        {
            "cluster": np.repeat(rank, len(offsets)),
            "t": np.tile(offsets, k),
            "value": centres.reshape(-1),
        }
    ).sort_values(["cluster", "t"], ignore_index=True)
    return shares.reset_index(), centre_rows


def select_heads(
    mean_trt: np.ndarray, offsets: Sequence[int], heads: Sequence[Sequence[int]]
) -> list[tuple[int, int]]:
    """The (layer, head) pairs, 1-based, that get the g(f, theta) and xcorr tables.

    `heads` given: those (checked against the model's shape). Empty: for t = -1 and t = +1
    the head with the largest mean tr_t(A), skipping an offset no head attends to (t = +1 in
    causal models). `mean_trt` [L, H, T] over `offsets`.
    """
    L, H, _ = mean_trt.shape
    if heads:
        chosen = [(int(layer), int(head)) for layer, head in heads]
        bad = [(lay, h) for lay, h in chosen if not (1 <= lay <= L and 1 <= h <= H)]
        if bad:
            raise ValueError(f"analyses.position.heads {bad} outside the model's {L} x {H} heads")
        return chosen
    chosen = []
    offsets = list(offsets)
    for t in (-1, 1):
        values = mean_trt[:, :, offsets.index(t)]
        if values.max() <= 0:
            continue
        layer, head = np.unravel_index(int(values.argmax()), values.shape)
        if (layer + 1, head + 1) not in chosen:
            chosen.append((int(layer) + 1, int(head) + 1))
    return chosen
