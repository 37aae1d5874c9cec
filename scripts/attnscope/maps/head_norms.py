"""The head-summed norm ||sum_h alpha^h_ij f^h(x_j)|| with no [n, n, d] tensor (Kobayashi 2020)."""

from __future__ import annotations

import torch

from attnscope.core.settings import MEMORY_BUDGET_MB

FLOAT64_COPIES = 3  # [B, n, H, c] float64 tensors alive at once in a chunk


def head_summed_norms(
    alpha: torch.Tensor, fx: torch.Tensor, memory_budget_mb: float = MEMORY_BUDGET_MB
) -> torch.Tensor:
    """||sum_h alpha^h_ij f^h(x_j)|| for every query i and key j.  -> [B, n, n]

    alpha [B, H, n, n], fx [B, H, n, d].

    With a = alpha[:, i, j] over heads and the Gram matrix G_j = F_j F_j^T [H, H] of the
    f^h(x_j), ||sum_h a_h f^h(x_j)||^2 = a^T G_j a. No [B, H, n, n, d] tensor: the quadratic
    form runs in float64 (heads may cancel) for as many queries at a time as fit in
    `memory_budget_mb` MiB, so beyond the [B, n, n] result the memory is O(B n H^2) plus
    the budget.
    """
    B, H, n, _ = alpha.shape
    by_token = fx.transpose(1, 2).contiguous()  # [B, n_j, H, d]: one [H, d] block per key
    gram = (by_token @ by_token.transpose(-1, -2)).double()  # G_j [B, n_j, H, H]
    del by_token
    rows = max(1, int(memory_budget_mb * 2**20 // (FLOAT64_COPIES * 8 * B * H * max(1, n))))
    out = alpha.new_empty(B, n, n)
    for i0 in range(0, n, rows):
        a = alpha[:, :, i0 : i0 + rows].permute(0, 3, 1, 2).double()  # [B, n_j, H, c]
        squared = ((gram @ a) * a).sum(2)  # a^T G_j a  [B, n_j, c]
        out[:, i0 : i0 + rows] = squared.clamp_min(0).sqrt().transpose(1, 2)
    return out
