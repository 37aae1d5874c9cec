"""Jensen-Shannon distances between all heads of a model, MDS map and clustering (Clark 2019).

Distance between heads a and b (any layers), as Clark et al. (2019) define it: the sum over
sequences and over their real query rows i of JS(alpha^a_i, alpha^b_i), in nats, each row
smoothed as 0.999 * a + 0.001 / k over its k visible keys (real keys, j <= i when causal).
It is a SUM, not a mean: it grows with the number of sequences and rows.

Per row JS(P, Q) = H(M) - (H(P) + H(Q)) / 2 with M = (P + Q) / 2, so summed over rows
    D_ab = sum_rows sum_j [ (p log p + q log q) / 2 - m log m ]
         = (N_a + N_b) / 2 - T_ab,   N_a = sum p log p,   T_ab = sum m log m.
N_a costs one pass per head; only T_ab needs all head pairs. It is computed with batched
tensor ops over blocks of head pairs and chunks of the visible entries (keys outside a row's
visible keys carry no mass and are dropped), so memory stays bounded.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
import pandas as pd
import torch

from attnscope.core.attention import attention_probs, visible_pairs
from attnscope.core.canonical import CanonicalLayer
from attnscope.core.store import Batch, HiddenStates, batch_spans
from attnscope.core.tables import indexed_table

JS_SMOOTHING = 1e-3
# Elements of one pair-block temporary: 512 KiB in float32 stays in a CPU core's cache;
# a GPU wants few, large kernels.
CHUNK_ELEMENTS = {"cpu": 1 << 17, "cuda": 1 << 26}


def smoothed_entries(alpha: torch.Tensor, mask: torch.Tensor, causal: bool) -> torch.Tensor:
    """Every head's smoothed attention on the visible (query, key) entries of the batch.

    alpha [G, B, n, n] (G heads, e.g. all layers' heads stacked), mask [B, n]
    -> [G, V] float32, V = number of visible entries (real query rows x their visible keys),
    each row smoothed as (1 - s) * a + s / k over its k visible keys.
    """
    visible = visible_pairs(mask, causal)  # [B, n, n]
    k = visible.sum(-1, keepdim=True).clamp_min(1)  # [B, n, 1]
    p = torch.add(JS_SMOOTHING / k, alpha.float(), alpha=1 - JS_SMOOTHING)
    return p[:, visible]


def js_sums(entries: torch.Tensor, chunk_elements: int | None = None) -> torch.Tensor:
    """D_ab = sum over rows of JS(row of head a, row of head b) for every head pair.

    entries [G, V] from `smoothed_entries` -> [G, G] float64, symmetric, zero diagonal.
    Chunk sums are float32, accumulated in float64. `chunk_elements` bounds the size of the
    temporaries (default by device, `CHUNK_ELEMENTS`).
    """
    G, V = entries.shape
    device = entries.device
    chunk_elements = chunk_elements or CHUNK_ELEMENTS.get(device.type, CHUNK_ELEMENTS["cpu"])
    neg_entropy = torch.zeros(G, dtype=torch.float64, device=device)
    cross = torch.zeros(G, G, dtype=torch.float64, device=device)
    half = 0.5 * entries
    # Pair blocks of c x c heads over chunks of e elements: c * c * e <= chunk_elements.
    e = min(V, max(chunk_elements // 16, 1024))
    c = max(1, math.isqrt(chunk_elements // e))
    for s in range(0, V, e):
        p = entries[:, s : s + e]
        neg_entropy += torch.log(p).mul_(p).sum(-1, dtype=torch.float64)
        h = half[:, s : s + e]
        for i0 in range(0, G, c):
            for j0 in range(i0, G, c):
                m = h[i0 : i0 + c, None] + h[None, j0 : j0 + c]
                cross[i0 : i0 + c, j0 : j0 + c] += torch.log(m).mul_(m).sum(-1)
    upper = torch.triu(torch.ones(G, G, dtype=torch.bool, device=device), 1)
    D = torch.where(upper, 0.5 * (neg_entropy[:, None] + neg_entropy[None, :]) - cross, 0.0)
    D = D.clamp_min(0)  # float error can leave tiny negatives for near-identical heads
    return D + D.T


def attention_entries(batch: Batch, layer: CanonicalLayer) -> torch.Tensor:
    """One layer's heads' smoothed attention on the batch's visible entries (`smoothed_entries`
    of the layer's attention on its stored input X_l).  [H, V]"""
    alpha = attention_probs(batch.X, batch.mask, layer).transpose(0, 1)  # [H, B, n, n]
    return smoothed_entries(alpha, batch.mask, layer.causal)


def entries_columns(store: HiddenStates, batch_size: int, causal: bool, limit=None) -> np.ndarray:
    """Where each batch's visible entries start in a [G, V] array of all batches: offsets
    [batches + 1], the last one V (`smoothed_entries` orders them as `visible_pairs`)."""
    counts = [
        int(
            visible_pairs(
                torch.from_numpy(store.attention_mask[start:stop, :n].astype(np.int64)), causal
            ).sum()
        )
        for start, stop, n in batch_spans(store.lengths, batch_size, limit)
    ]
    return np.concatenate([[0], np.cumsum(counts, dtype=np.int64)])


def head_distances(entries: Iterable[torch.Tensor], log=None) -> np.ndarray:
    """[G, G] summed JS distances, G = L * H heads (index g = l * H + h, 0-based), from each
    batch's `attention_entries` of every layer stacked, [G, V_k] (`LoadedModel.layer_blocks`
    walks the layers as the loading route allows: one batch of every layer at once, or every
    layer in turn through a scratch file; the sums are the same, bit for bit)."""
    total = None
    for k, block in enumerate(entries):
        if total is None:
            total = torch.zeros(len(block), len(block), dtype=torch.float64, device=block.device)
        total += js_sums(block)
        if log is not None:
            log.info("JS distances: %d batches done", k + 1)
    if total is None:
        raise ValueError("JS distances: no sequences to compare the heads on")
    return total.cpu().numpy()


def distance_table(D: np.ndarray, n_layers: int, n_heads: int) -> pd.DataFrame:
    """Long format of the full matrix (head index g = l * H + h): layer_a head_a layer_b
    head_b distance."""
    return indexed_table(
        {"distance": D}, layer_a=n_layers, head_a=n_heads, layer_b=n_layers, head_b=n_heads
    )


def mds_embedding(D: np.ndarray, seed: int, n_init: int, max_iter: int) -> np.ndarray:
    """Metric MDS of the precomputed distances into 2-D, seeded.  [G, 2]"""
    from sklearn.manifold import MDS

    mds = MDS(
        n_components=2,
        metric_mds=True,
        metric="precomputed",
        init="random",
        n_init=n_init,
        max_iter=max_iter,
        random_state=seed,
    )
    return mds.fit_transform(D)


def cluster_heads(D: np.ndarray, method: str, n_clusters: int) -> tuple[np.ndarray, np.ndarray]:
    """Hierarchical clustering of heads: (cluster ids 1.., scipy linkage matrix [G-1, 4])."""
    from scipy.cluster.hierarchy import fcluster, linkage
    from scipy.spatial.distance import squareform

    Z = linkage(squareform(D, checks=False), method=method)
    return fcluster(Z, t=n_clusters, criterion="maxclust"), Z


def linkage_table(Z: np.ndarray) -> pd.DataFrame:
    """scipy's linkage matrix as a table: merge step, the two merged nodes, height, size."""
    return pd.DataFrame(
        {
            "step": np.arange(1, len(Z) + 1),
            "left": Z[:, 0].astype(int),
            "right": Z[:, 1].astype(int),
            "distance": Z[:, 2],
            "size": Z[:, 3].astype(int),
        }
    )


def head_map_table(
    embedding: np.ndarray, clusters: np.ndarray, behaviour: pd.Series, n_layers: int, n_heads: int
) -> pd.DataFrame:
    """layer head mds_x mds_y cluster behaviour, one row per head."""
    values = {
        "mds_x": embedding[:, 0],
        "mds_y": embedding[:, 1],
        "cluster": clusters,
        "behaviour": behaviour.to_numpy(),
    }
    return indexed_table(values, layer=n_layers, head=n_heads)
