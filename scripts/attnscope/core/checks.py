"""Run-time checks: a decomposition must rebuild the real module output, an identity must hold,
and what an analysis reads must be finite.

Every analysis that decomposes a module records the residual of the check on every batch in
a `ResidualLog` (its `decomposition_check.tsv`) and fails the run through `require` when the
residual exceeds its bound. `require_finite` stops an analysis that would otherwise leave
inf or NaN values out of its averages without a word.
"""

from __future__ import annotations

import logging

import numpy as np
import pandas as pd
import torch


class CheckError(RuntimeError):
    """A decomposition or identity missed its reference by more than its bound."""


class NonFiniteError(ValueError):
    """A tensor that must be finite holds inf or NaN."""


def all_finite(values: torch.Tensor) -> bool:
    """Whether no value is inf or NaN: one min-max pass, in which NaN propagates (on a CPU
    several times faster than `torch.isfinite(values).all()`, which makes a bool tensor)."""
    if values.numel() == 0:
        return True
    low, high = torch.aminmax(values)
    return bool(torch.isfinite(low) & torch.isfinite(high))


def require_finite(values: torch.Tensor | np.ndarray, what: str) -> None:
    """Raise NonFiniteError naming `what`, the count of inf/NaN values and the largest finite
    |value|, unless every value is finite."""
    values = torch.as_tensor(values)
    if all_finite(values):
        return
    finite = torch.isfinite(values)
    largest = float(values[finite].abs().max()) if bool(finite.any()) else float("nan")
    raise NonFiniteError(
        f"{what}: {int((~finite).sum())} of {values.numel()} values are inf or NaN (largest "
        f"finite |value| {largest:.4g}); an average over the rest would hide them"
    )


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
