"""Run-time checks: a decomposition must rebuild the real module output, an identity must hold.

Every analysis that decomposes a module records the residual of the check on every batch in
a `ResidualLog` (its `decomposition_check.tsv`) and fails the run through `require` when the
residual exceeds its bound.
"""

from __future__ import annotations

import logging

import pandas as pd
import torch


class CheckError(RuntimeError):
    """A decomposition or identity missed its reference by more than its bound."""


def residual(y: torch.Tensor, y_real: torch.Tensor, mask: torch.Tensor) -> tuple[float, float]:
    """(max |y - y_real|, max_i ||y_i - y_real_i|| / ||y_real_i||) over real tokens i.

    y, y_real [B, n, d], mask [B, n] (1 = real token).
    """
    real = mask.bool()
    diff = (y - y_real)[real].double()
    ref = y_real[real].double()
    max_abs = float(diff.abs().max())
    max_rel = float((diff.norm(dim=-1) / ref.norm(dim=-1)).max())
    return max_abs, max_rel


def require(what: str, value: float, bound: float) -> None:
    """Raise CheckError naming `what` unless value <= bound (NaN fails too)."""
    if not value <= bound:
        raise CheckError(f"{what}: residual {value:.3g} exceeds the bound {bound:g}")


class ResidualLog:
    """The largest absolute and relative residual per (layer, stage) over every batch: the
    `decomposition_check.tsv` of every family that decomposes, columns `layer stage max_abs
    max_rel` (layers 1-based). A relative residual above `bound` raises CheckError at once,
    naming the family (`what`), the layer and the stage."""

    COLUMNS = ["layer", "stage", "max_abs", "max_rel"]

    def __init__(self, bound: float, log: logging.Logger | None, what: str = "decomposition"):
        self.bound, self.log, self.what = bound, log, what
        self.worst: dict[tuple[int, str], tuple[float, float]] = {}

    def add(self, layer: int, stage: str, got, want, mask) -> None:
        """got, want [B, n, d] over real tokens (mask [B, n])."""
        self.record(layer, stage, *residual(got, want, mask))

    def record(self, layer: int, stage: str, max_abs: float, max_rel: float) -> None:
        old = self.worst.get((layer, stage), (0.0, 0.0))
        self.worst[(layer, stage)] = (max(old[0], max_abs), max(old[1], max_rel))
        require(f"layer {layer}: {self.what} stage {stage} vs real output", max_rel, self.bound)

    def table(self) -> pd.DataFrame:
        rows = [(layer, stage, a, r) for (layer, stage), (a, r) in self.worst.items()]
        table = pd.DataFrame(rows, columns=self.COLUMNS)
        if self.log:
            for stage, group in table.groupby("stage", sort=False):
                self.log.info("%s: largest relative residual %.3g", stage, group["max_rel"].max())
        return table
