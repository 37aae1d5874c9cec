"""Run-time checks: a decomposition must rebuild the real module output, an identity must hold.

Every analysis that decomposes a module records the residual of the check in a table next
to its results and fails the run through `require` when the residual exceeds its bound.
"""

from __future__ import annotations

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
