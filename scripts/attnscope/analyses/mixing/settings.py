"""The mixing family's settings of one job (`Job.settings(MixingSettings)`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnscope.maps.layer_decomposition import MEMORY_BUDGET_MB


@dataclass(frozen=True)
class MixingSettings:
    """`batch_size` sequences per batch; `ig_steps`: the FF split (0: the exact closed form);
    `max_rel_residual`: the decomposition checks' bound, `depth_rel_residual` theirs through the
    whole depth (the propagation); `maps_dtype`: the stored maps;
    `memory_budget_mb`: the working memory of one chunk of a decomposition;
    `propagated_top_k` (0: every entry), `rollout_scopes` and `contrast`: the propagation's
    map, rollouts and prediction row; `device`: a torch device string."""

    family: ClassVar[str] = "mixing"
    batch_size: int
    ig_steps: int
    max_rel_residual: float
    depth_rel_residual: float = 1e-3
    maps_dtype: str = "float32"
    memory_budget_mb: float = MEMORY_BUDGET_MB
    propagated_top_k: int = 0
    rollout_scopes: tuple[str, ...] = ()
    contrast: tuple[str, ...] = ()
    device: str = "cpu"
