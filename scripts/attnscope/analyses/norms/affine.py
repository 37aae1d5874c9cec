"""Singular values of each head's affine map f(x) = (x W_V + b_V) W_O (Kobayashi et al. 2020).

An affine map R^d -> R^d is a linear map on x~ = [x, 1] in R^(d+1) (seed 000, Eq. 9-11):

    f~(x~) = x~ W~_V W~_O,   W~_V = [[W_V, 0], [b_V, 1]]  (d+1) x (d'+1),
                             W~_O = [[W_O, 0], [0,   1]]  (d'+1) x (d+1).

Its singular values say how much f can stretch or shrink its input. The product has rank at
most d'+1, so only the d'+1 largest singular values can be non-zero; those are returned.
They are computed from the thin QR factors W~_V = Q_V R_V and W~_O^T = Q_O R_O: since Q_V
and Q_O have orthonormal columns, W~_V W~_O = Q_V (R_V R_O^T) Q_O^T has the singular values
of the (d'+1) x (d'+1) matrix R_V R_O^T, so no (d+1) x (d+1) product is formed.
For pre-LN models (GPT-2) x is the LayerNorm output that the attention block reads.
"""

from __future__ import annotations

import pandas as pd
import torch

from attnscope.core.canonical import CanonicalLayer, CanonicalModel
from attnscope.core.tables import indexed_table


def augmented_value(W_V: torch.Tensor, b_V: torch.Tensor) -> torch.Tensor:
    """W~_V = [[W_V, 0], [b_V, 1]] of one head (Eq. 10).  W_V [d, d'], b_V [d'] -> [d+1, d'+1]"""
    d, d_head = W_V.shape
    out = torch.zeros(d + 1, d_head + 1, dtype=W_V.dtype, device=W_V.device)
    out[:d, :d_head] = W_V
    out[d, :d_head] = b_V
    out[d, d_head] = 1
    return out


def augmented_output(W_O: torch.Tensor) -> torch.Tensor:
    """W~_O = [[W_O, 0], [0, 1]] of one head (Eq. 11).  W_O [d', d] -> [d'+1, d+1]"""
    d_head, d = W_O.shape
    out = torch.zeros(d_head + 1, d + 1, dtype=W_O.dtype, device=W_O.device)
    out[:d_head, :d] = W_O
    out[d_head, d] = 1
    return out


def affine_singular_values(layer: CanonicalLayer) -> torch.Tensor:
    """The d'+1 largest singular values of W~_V W~_O for every head, descending.  [H, d'+1]

    Computed in float64 on the weights' device; returned on the CPU.
    """
    values = []
    for h in range(layer.n_heads):
        kv = layer.kv_head(h)  # grouped-query: the value head this query head reads
        A = augmented_value(layer.W_V[kv].double(), layer.b_V[kv].double())
        B = augmented_output(layer.W_O[h].double())
        R_V = torch.linalg.qr(A, mode="r").R
        R_O = torch.linalg.qr(B.T, mode="r").R
        values.append(torch.linalg.svdvals(R_V @ R_O.T))
    return torch.stack(values).cpu()


def affine_singular_value_table(weights: CanonicalModel) -> pd.DataFrame:
    """Tidy table `layer head index singular_value` (all 1-based; index 1 = largest)."""
    values = torch.stack([affine_singular_values(layer) for layer in weights.layers])
    L, H, k = values.shape
    return indexed_table({"singular_value": values.double().numpy()}, layer=L, head=H, index=k)
