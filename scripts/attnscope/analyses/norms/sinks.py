"""Attention sinks (Xiao et al. 2023, Gu et al. 2024) seen through vector norms.

Decoders put much of every head's weight on the first position (BOS, or the start token), and
little of it reaches the output: the decoder analogue of Kobayashi et al.'s [CLS]/[SEP]
finding (large alpha, small ||f(x)||). Position 0 is the first position whatever its token
category; on the encoders it is [CLS] (<s>).

Counted rows: per layer, the real query rows i that see key 0 (`sink_rows`), except i = 0 of
a causal layer (it can only see itself, alpha_00 = 1 whatever the head does); rows of a
sliding-window layer past the window (i >= w) do not see key 0 and do not count either.
With z_i = sum_j alpha_ij f(x_j) the head's output for row i (no b_O), per layer and head,
means over every counted row of the corpus (each row weighs the same):

    alpha_first   alpha_i0, the first position's share of the weights      (in [0, 1])
    norm_share    ||alpha_i0 f(x_0)|| / sum_j ||alpha_ij f(x_j)||, its share of the
                  norms of the weighted vectors (Kobayashi's ||alpha f(x)||) (in [0, 1])
    output_ratio  ||alpha_i0 f(x_0)|| / ||z_i||, against the norm of the head's output;
                  >= norm_share (triangle inequality), > 1 when the other keys' vectors
                  cancel part of it

and, over every sequence (position 0) or every real position j >= 1 of every sequence:

    fx_first      mean ||f(x_0)||, fx_other  mean ||f(x_j)||, j >= 1   (units of the stream)
    fx_ratio      fx_first / fx_other  (< 1: the first position's vector is the smaller)
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from attnscope.core.attention import layer_visible_pairs
from attnscope.core.canonical import CanonicalLayer
from attnscope.core.streaming import Moments
from attnscope.core.tables import indexed_table


def sink_rows(mask: torch.Tensor, layer: CanonicalLayer) -> torch.Tensor:
    """The query rows that count (see the module docstring).  mask [B, n] -> [B, n] bool"""
    rows = layer_visible_pairs(mask, layer)[:, :, 0].clone()
    if layer.causal:
        rows[:, 0] = False
    return rows


def first_position_terms(
    alpha: torch.Tensor, fx_norm: torch.Tensor, z: torch.Tensor
) -> dict[str, torch.Tensor]:
    """alpha_first, norm_share and output_ratio of every query row.  Each [B, H, n]

    alpha [B, H, n, n] (query i, key j), fx_norm [B, H, n] (||f^h(x_j)||), z [B, H, n, d]
    (each head's output, `core.attention.head_outputs`).
    """
    first = alpha[..., 0] * fx_norm[..., :1]  # ||alpha_i0 f(x_0)||, alpha >= 0
    norms_sum = torch.einsum("bhij,bhj->bhi", alpha, fx_norm)
    output = z.norm(dim=-1)
    tiny = torch.finfo(alpha.dtype).tiny  # 0 / 0 (a head moving nothing) reads 0
    return {
        "alpha_first": alpha[..., 0],
        "norm_share": first / norms_sum.clamp_min(tiny),
        "output_ratio": first / output.clamp_min(tiny),
    }


class SinkStatistics:
    """The sink table of every layer and head, fed one batch of one layer at a time."""

    COLUMNS = ("alpha_first", "norm_share", "output_ratio")

    def __init__(self, n_layers: int, n_heads: int):
        shape = (n_layers, n_heads)
        self.rows = {name: Moments(shape) for name in self.COLUMNS}
        self.fx_first = Moments(shape)
        self.fx_other = Moments(shape)

    def add_batch(self, layer: int, alpha, fx_norm, z, mask: torch.Tensor, rows) -> None:
        """alpha [B, H, n, n], fx_norm [B, H, n] (||f^h(x_j)||), z [B, H, n, d] (each head's
        output, `core.attention.head_outputs`), mask [B, n], rows [B, n] (`sink_rows`)."""
        for name, values in first_position_terms(alpha, fx_norm, z).items():
            self.rows[name].add(layer, values.transpose(0, 1)[:, rows])
        fx_norm = fx_norm.transpose(0, 1)  # [H, B, n]
        real = mask.bool()
        self.fx_first.add(layer, fx_norm[:, real[:, 0], 0])
        self.fx_other.add(layer, fx_norm[:, :, 1:][:, real[:, 1:]])

    def table(self) -> pd.DataFrame:
        """`layer head n_rows alpha_first norm_share output_ratio fx_first fx_other fx_ratio`
        (layer and head 1-based; NaN where nothing counted)."""
        L, H = self.fx_first.count.shape
        with np.errstate(invalid="ignore", divide="ignore"):
            means = {name: m.total / m.count for name, m in self.rows.items()}
            fx_first = self.fx_first.total / self.fx_first.count
            fx_other = self.fx_other.total / self.fx_other.count
            columns = {
                "n_rows": self.rows["alpha_first"].count.astype(int),
                **means,
                "fx_first": fx_first,
                "fx_other": fx_other,
                "fx_ratio": fx_first / fx_other,
            }
        return indexed_table(columns, layer=L, head=H)
