"""The head-summed norm ||sum_h alpha^h_ij f^h(x_j)|| with no [n, n, d] tensor (Kobayashi 2020)."""

from __future__ import annotations

import torch


def head_summed_norms(alpha: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
    """||sum_h alpha^h_ij f^h(x_j)|| for every query i and key j.  -> [B, n, n]

    alpha [B, H, n, n], fx [B, H, n, d].

    With a = alpha[:, i, j] over heads and the Gram matrix G_j = F_j F_j^T [H, H] of the
    f^h(x_j), ||sum_h a_h f^h(x_j)||^2 = a^T G_j a. Memory O(B H n^2 + B n H^2): no
    [B, H, n, n, d] tensor. The quadratic form runs in float64 (heads may cancel).
    """
    gram = torch.einsum("bhjd,bgjd->bjhg", fx, fx).double()
    a = alpha.double()
    squared = (torch.einsum("bhij,bjhg->bgij", a, gram) * a).sum(1)
    return squared.clamp_min(0).sqrt().to(alpha.dtype)
