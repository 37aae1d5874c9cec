"""The norms family's settings of one job (`Job.settings(NormsSettings)`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnscope.maps.head_norms import MEMORY_BUDGET_MB


@dataclass(frozen=True)
class NormsSettings:
    """`batch_size` sequences per batch; `spearman_sample_size` and `seed`: the Spearman
    sample (`NormsAccumulator`); `max_rel_residual`: the decomposition check's bound;
    `maps_dtype` and `maps_top_k` (0: every entry): the stored maps; `memory_budget_mb`: the
    working memory of one query chunk of the head-summed map; `sample_rate` and
    `scatter_max_points`: the scatter tables; `device`: a torch device string."""

    family: ClassVar[str] = "norms"
    batch_size: int
    spearman_sample_size: int
    seed: int
    max_rel_residual: float
    maps_dtype: str = "float32"
    maps_top_k: int = 0
    memory_budget_mb: float = MEMORY_BUDGET_MB
    sample_rate: float = 1.0
    scatter_max_points: int = 0
    device: str = "cpu"
