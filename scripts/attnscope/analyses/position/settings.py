"""The position family's settings of one job (`Job.settings(PositionSettings)`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class PositionSettings:
    """`t_max`: the offsets -t_max..t_max of tr_t(A); `xcorr_t_max`: those of xcov/xcorr;
    `include_bias`: W^A with the query and key biases; `heads`: the heads of g(f, theta) and
    xcorr (`diagonals.select_heads`); `batch_size` sequences per batch; `device`: a torch
    device string."""

    family: ClassVar[str] = "position"
    t_max: int = 10
    xcorr_t_max: int = 30
    include_bias: bool = False
    heads: object = None
    batch_size: int = 16
    device: str = "cpu"
