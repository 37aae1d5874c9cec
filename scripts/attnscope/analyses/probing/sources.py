"""Map sources of the probing family: per layer and batch, the maps whose argmax is scored.

    weights   alpha^h [B, H, n, n], recomputed from the stored layer input hidden/{l-1}
    norms     ||alpha^h_ij f^h(x_j)|| = alpha^h_ij ||f^h(x_j)|| per head, plus the head-summed
              ||sum_h alpha^h_ij f^h(x_j)|| as one extra map
    <scope>   one whole-layer map per layer from the mixing family's maps.h5 ("{scope}/{layer}")

Heads are numbered 1..H; a whole-layer map (the summed norms, every mixing scope) is head 0.
"""

from __future__ import annotations

import h5py
import numpy as np
import torch

from attnscope.analyses.probing.outputs import MODEL_SOURCES
from attnscope.core.attention import attention_probs, value_vectors
from attnscope.maps.head_norms import head_summed_norms

WHOLE_LAYER_HEAD = 0


def head_labels(source: str, n_heads: int) -> np.ndarray:
    """The head column of a source's maps, in the order `layer_maps` stacks them."""
    if source == "weights":
        return np.arange(1, n_heads + 1)
    if source == "norms":
        return np.arange(0, n_heads + 1)[np.r_[1 : n_heads + 1, 0]]
    return np.array([WHOLE_LAYER_HEAD])


def model_maps(source: str, X: torch.Tensor, mask: torch.Tensor, layer, alpha=None):
    """[B, H', n, n] maps of a model source for one layer's input X [B, n, d]; `alpha`
    (attention_probs of the same batch and layer) is recomputed when not given."""
    if alpha is None:
        alpha = attention_probs(X, mask, layer)
    if source == "weights":
        return alpha
    if source == "norms":
        fx = value_vectors(X, layer)
        per_head = alpha * fx.norm(dim=-1)[:, :, None, :]
        return torch.cat([per_head, head_summed_norms(alpha, fx)[:, None]], dim=1)
    raise ValueError(f"unknown model source {source!r} (known: {', '.join(MODEL_SOURCES)})")


def mixing_maps(maps: h5py.File, scope: str, layer: int, start: int, stop: int, n: int):
    """[B, 1, n, n] float32 whole-layer map of `scope` at 1-based `layer` from maps.h5."""
    key = f"{scope}/{layer}"
    if key not in maps:
        raise KeyError(f"{maps.filename}: no dataset {key!r} (scopes: {list(maps.keys())})")
    return torch.from_numpy(maps[key][start:stop, :n, :n].astype(np.float32))[:, None]
