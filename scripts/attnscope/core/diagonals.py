"""Diagonal sums of [n, n] maps over query i, key j = i + t: tr_t(M) = sum_i M[i, i + t]
(Eq. 7 of Yamamoto & Matsuzaki). t > 0 sums keys t tokens after the query, t < 0 before.
Read by the position family (tr_t of the attention weights and of Q S K^T) and the attend
family (tr_t of each embedding term of the logits)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def diagonal_sums(M: torch.Tensor, offsets: Sequence[int]) -> torch.Tensor:
    """tr_t(M) for every t in `offsets` (0 where the diagonal is empty).  [..., n, n] -> [..., T]"""
    return torch.stack(
        [torch.diagonal(M, offset=t, dim1=-2, dim2=-1).sum(-1) for t in offsets], dim=-1
    )
