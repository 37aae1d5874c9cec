"""The views family's settings of one job (`Job.settings(ViewsSettings)`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class ViewsSettings:
    """`scopes`: also the whole-layer scopes, the propagated map and the prediction row;
    `ig_steps`: their FF split (0: exact); `top_k`: edges kept per query row;
    `max_rel_residual`, `depth_rel_residual`: the decomposition checks' bounds, per layer and
    through the whole depth (the mixing family's); `contrast`:
    [target, foil] of the prediction row; `sequences` (None: the first `max_pages`): the
    pages; `device`: a torch device string."""

    family: ClassVar[str] = "views"
    bound_family: ClassVar[str] = "mixing"
    scopes: bool
    ig_steps: int
    top_k: int
    max_rel_residual: float
    depth_rel_residual: float = 1e-3
    contrast: tuple[str, ...] = ()
    sequences: tuple[int, ...] | None = None
    max_pages: int = 0
    device: str = "cpu"
