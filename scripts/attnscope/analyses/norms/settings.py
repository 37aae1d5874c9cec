"""The norms family's settings (config `analyses.norms`): each setting's one home, its
default, bounds and description (`core.settings.setting`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnscope.core.settings import MEMORY_BUDGET_MB, setting, top_level


def _seed():
    return setting(
        "seeds the (alpha, ||f(x)||) pair sample and the head drawn per layer for the "
        "singular-value figure",
        0,
    )


@dataclass(frozen=True)
class NormsSettings:
    """One norms_compute (or norms_shard) job's settings: `batch_size` sequences per batch
    (the top-level `batch_size`); `memory_budget_mb`: the working memory of one query chunk
    of the head-summed map; `device`: a torch device string (both read from the
    configuration by `Job.settings`)."""

    family: ClassVar[str] = "norms"
    batch_size: int = top_level("batch_size")
    spearman_sample_size: int = setting(
        "pairs per category in the uniform (bottom-k) sample for Spearman; exact when a "
        "category has fewer pairs",
        1000000,
        minimum=2,
    )
    seed: int = _seed()
    max_rel_residual: float = setting(
        "largest relative residual of the decomposition against the module output before the "
        "run fails",
        1.0e-4,
        exclusive_minimum=0,
    )
    maps_dtype: str = setting(
        "storage type of the head-summed norm maps (attn_n_maps.h5)",
        "float32",
        choices=("float32", "float16"),
    )
    maps_top_k: int = setting(
        "0 stores attn_n_maps.h5's maps whole; k > 0 only each query row's k largest entries "
        "(maps/{layer}/key and /value, [N, L, k]), for long sequences",
        0,
        minimum=0,
    )
    memory_budget_mb: float = MEMORY_BUDGET_MB
    sample_rate: float = setting(
        "Bernoulli rate of the alpha vs ||f(x)|| scatter sample per category (1% in the paper)",
        0.01,
        exclusive_minimum=0,
        maximum=1,
    )
    scatter_max_points: int = setting(
        "at most this many scatter points per category (a uniform subsample of the rate sample;"
        " at most spearman_sample_size)",
        20000,
        minimum=1,
    )
    device: str = "cpu"


@dataclass(frozen=True)
class MassiveCriterion:
    """Sun et al. 2024's massive entries: |x| above `absolute` and at least `ratio` times the
    state's median |x|; a (state, dim) massive on more than `ordinary_share` of the ordinary
    positions recurs on ordinary tokens, and is kept apart (`massive_activations`).
    (`SinkCardSettings.criterion`, whose fields hold the defaults.)"""

    absolute: float = 100.0
    ratio: float = 1000.0
    ordinary_share: float = 0.01


@dataclass(frozen=True)
class SinkCardSettings:
    """One norms_sink_card job's settings: `batch_size` sequences per batch (the top-level
    `batch_size`); Gu et al.'s Sink^eps and Sun et al.'s criterion (`criterion`)."""

    family: ClassVar[str] = "norms"
    batch_size: int = top_level("batch_size")
    sink_epsilon: float = setting(
        "Sink^eps (Gu et al. 2024, computed as their code does): a head is a sink in a sequence"
        " when the importance of the first position, the sum over every query row i of alpha(i,"
        " 0) / sink_positions, exceeds this; Sink^eps is that indicator's mean over sequences, "
        "layers and heads",
        0.3,
        exclusive_minimum=0,
        exclusive_maximum=1,
    )
    sink_positions: int = setting(
        "Sink^eps reads each sequence's first this many pieces (64 in the paper), run through "
        "the model again cut there; shorter sequences are left out, and the norms corpora's "
        "max_length must be at least this",
        64,
        minimum=2,
    )
    sink_sequences: int = setting(
        "the sink card (Sink^eps and its repeated-token inputs, a second forward pass; the "
        "stream; the massive dimensions and the intervention) reads the corpus's first this "
        "many sequences (0, all); its Kobayashi summary is attention_sinks.tsv's, over every "
        "sequence",
        256,
        minimum=0,
    )
    massive_absolute: float = setting(
        "Sun et al. 2024's massive activations: an entry of a hidden state is massive when its "
        "|x| exceeds this ...",
        100.0,
        minimum=0,
    )
    massive_ratio: float = setting(
        "... and is at least this many times the state's median |x| (Sun et al.: 'at least or "
        "around' 1,000; the states and dimensions found depend on it, see "
        "docs/analyses/norms.md)",
        1000.0,
        exclusive_minimum=0,
    )
    massive_ordinary_share: float = setting(
        "a (state, dim) massive on more than this share of the ordinary positions (not the "
        "first, not a special piece, '.' or ',') is an outlier that recurs on ordinary tokens, "
        "kept apart from Sun et al.'s massive activations and never edited by the intervention",
        0.01,
        minimum=0,
        maximum=1,
    )

    @property
    def criterion(self) -> MassiveCriterion:
        return MassiveCriterion(
            self.massive_absolute, self.massive_ratio, self.massive_ordinary_share
        )
