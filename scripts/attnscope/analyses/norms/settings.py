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


@dataclass(frozen=True)
class MassiveCriterion:
    """Sun et al. 2024's massive entries: |x| above `absolute` and at least `ratio` times the
    state's median |x|; a (state, dim) massive on more than `ordinary_share` of the ordinary
    positions recurs on ordinary tokens, and is kept apart (`massive_activations`)."""

    absolute: float = 100.0
    ratio: float = 1000.0
    ordinary_share: float = 0.01


@dataclass(frozen=True)
class SinkCardSettings:
    """The sink card's settings (rule norms_sink_card): `batch_size` sequences per batch;
    Gu et al.'s Sink^eps over the first `sink_positions` pieces with threshold
    `sink_epsilon`, over the corpus's first `sink_sequences` sequences (0: all), which every
    part of the card but the Kobayashi summary reads; Sun et al.'s criterion
    (`massive_absolute`, `massive_ratio`, `massive_ordinary_share`: `MassiveCriterion`)."""

    family: ClassVar[str] = "norms"
    batch_size: int
    sink_epsilon: float = 0.3
    sink_positions: int = 64
    sink_sequences: int = 256
    massive_absolute: float = 100.0
    massive_ratio: float = 1000.0
    massive_ordinary_share: float = 0.01

    @property
    def criterion(self) -> MassiveCriterion:
        return MassiveCriterion(
            self.massive_absolute, self.massive_ratio, self.massive_ordinary_share
        )
