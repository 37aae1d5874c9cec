"""A head's attention scores as one bilinear form: W^A = W^Q (W^K)^T, its SVD, and the
rotation R = (U^Q)^T U^K between query and key singular vectors (Yamamoto & Matsuzaki).

Shapes: H heads, D = d (or d + 1 with biases), r = d' (head width). Everything is float64.

    x W^A x^T = x U^Q S (U^K)^T x^T = Q S K^T,   Q = x U^Q,  K = x U^K.

x is what the attention block reads (`attention.attention_input`: X for post-LN models, LN(X)
for GPT-2). With `include_bias`, x = [x, 1] and W^Q, W^K get their bias as an extra row, so that
Q S K^T are the exact raw scores q k^T; without it (the paper's choice) biases are ignored.

W^A has rank at most r, so only the first r singular directions carry the scores; Q and K
below keep those r columns. The full d x d R is orthogonal, but its last D - r rows and columns
come from null-space bases that the SVD picks arbitrarily, so its eigen-angles from that block
mean nothing. The rank block

    R_rank = (U^Q[:, :r])^T U^K[:, :r]    (the top-left r x r block of R)

is what we interpret: it does not depend on the null-space bases (a sign flip or rotation O
of degenerate singular pairs, U^Q -> U^Q O, U^K -> U^K O, turns it into O^T R_rank O, with the
same eigenvalues), and it is the least-squares R in U^K[:, :r] = U^Q[:, :r] R, i.e. keys in
query coordinates: K = Q R_rank + (the part of the keys outside the query subspace). It is not
orthogonal; its singular values are the cosines of the principal angles between the query and
key subspaces, so its eigenvalues lambda = m e^{j theta} have modulus m <= 1. We report theta (the
phase shift between the waves Q p and K p, as in the paper) and m (how much of that key
direction lies in the query subspace), not the angles of a nearest orthogonal matrix, which
would hide how far the two subspaces differ.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from attnscope.core.attention import attention_input
from attnscope.core.canonical import CanonicalLayer
from attnscope.core.tables import indexed_table


def score_weights(layer: CanonicalLayer, include_bias: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(W^Q, W^K) of every head, [H, D, r] each, float64; biases appended as row D-1 if asked."""
    W_Q, W_K = layer.W_Q.double(), layer.W_K.double()
    if include_bias:
        W_Q = torch.cat([W_Q, layer.b_Q.double()[:, None, :]], dim=1)
        W_K = torch.cat([W_K, layer.b_K.double()[:, None, :]], dim=1)
    return W_Q, W_K


def score_input(X: torch.Tensor, layer: CanonicalLayer, include_bias: bool) -> torch.Tensor:
    """x: what the attention block reads, float64, with a column of ones if asked.  [B, n, D]"""
    x = attention_input(X, layer).double()
    if include_bias:
        x = torch.cat([x, torch.ones_like(x[..., :1])], dim=-1)
    return x


@dataclass(frozen=True)
class BilinearForm:
    """W^A = U_Q diag(S) U_K^T for every head of one layer.

    U_Q, U_K [H, D, D] (columns are singular vectors), S [H, D] descending, r = d'.
    """

    U_Q: torch.Tensor
    S: torch.Tensor
    U_K: torch.Tensor
    r: int

    def queries(self, x: torch.Tensor) -> torch.Tensor:
        """Q = x U^Q[:, :r] for every head.  x [B, n, D] -> [B, H, n, r]"""
        return torch.einsum("bnd,hde->bhne", x, self.U_Q[..., : self.r])

    def keys(self, x: torch.Tensor) -> torch.Tensor:
        """K = x U^K[:, :r] for every head.  x [B, n, D] -> [B, H, n, r]"""
        return torch.einsum("bnd,hde->bhne", x, self.U_K[..., : self.r])

    def rotation(self, block: str) -> torch.Tensor:
        """R = U_Q^T U_K, block "full" [H, D, D] or "rank" [H, r, r] (module docstring)."""
        size = self.U_Q.shape[-1] if block == "full" else self.r
        return self.U_Q[..., :size].transpose(-1, -2) @ self.U_K[..., :size]


def bilinear_form(layer: CanonicalLayer, include_bias: bool = False) -> BilinearForm:
    """SVD of W^A = W^Q (W^K)^T for every head of `layer`."""
    W_Q, W_K = score_weights(layer, include_bias)
    U, S, Vh = torch.linalg.svd(W_Q @ W_K.transpose(-1, -2))
    return BilinearForm(U_Q=U, S=S, U_K=Vh.transpose(-1, -2), r=layer.d_head)


def eigen_rotation(R: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues [H, m] and unit eigenvectors [H, m, m] (columns) of R [H, m, m], complex,
    sorted per head by angle theta in (-pi, pi], then by modulus."""
    values, vectors = np.linalg.eig(R.cpu().numpy())
    order = np.lexsort((np.abs(values), np.angle(values)), axis=-1)
    values = np.take_along_axis(values, order, axis=-1)
    vectors = np.take_along_axis(vectors, order[:, None, :], axis=-1)
    return values, vectors


def wa_singular_value_table(form: BilinearForm, layer: int) -> pd.DataFrame:
    """Rows `layer head index singular_value` (1-based) for all D singular values of each head;
    values beyond index r are zero up to rounding (rank W^A <= r)."""
    S = form.S.cpu().numpy()
    H, D = S.shape
    return indexed_table({"singular_value": S}, layer=[layer], head=H, index=D)


def rotation_table(form: BilinearForm, layer: int) -> pd.DataFrame:
    """Rows `layer head index theta modulus block`: eigen-angles (radians, (-pi, pi]) and
    moduli of R for block "full" (D x D) and "rank" (r x r), 1-based head and index."""
    frames = []
    for block in ("full", "rank"):
        values, _ = eigen_rotation(form.rotation(block))
        H, m = values.shape
        columns = {"theta": np.angle(values), "modulus": np.abs(values)}
        frames.append(indexed_table(columns, layer=[layer], head=H, index=m).assign(block=block))
    return pd.concat(frames, ignore_index=True)
