"""The weights family's settings (config `analyses.weights`): each setting's one home, its
default, bounds and description (`core.settings.setting`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnscope.core.settings import setting, top_level


def _seed():
    return setting(
        "seeds the MDS initialisation and the pieces masked for the gradient analysis", 0
    )


@dataclass(frozen=True)
class StatisticsSettings:
    """One weights_stats job's settings: `batch_size` sequences per batch (the top-level
    `batch_size`)."""

    family: ClassVar[str] = "weights"
    batch_size: int = top_level("batch_size")


@dataclass(frozen=True)
class DistanceSettings:
    """One weights_distances job's settings: the JS head distances, their MDS map, clusters
    and behaviours (Clark 2019)."""

    family: ClassVar[str] = "weights"
    batch_size: int = setting(
        "sequences per batch of the JS distances (memory is L*H*B*n*n floats for the maps)",
        8,
        key="distance_batch_size",
        minimum=1,
    )
    n_sequences: int = setting(
        "sequences whose JS distances are summed (the first ones of the corpus); 0 takes all",
        0,
        key="distance_sequences",
        minimum=0,
    )
    seed: int = _seed()
    mds_n_init: int = setting(
        "SMACOF runs of the metric MDS from seeded random starts; the lowest stress is kept",
        4,
        minimum=1,
    )
    mds_max_iter: int = setting("SMACOF iterations per MDS run", 300, minimum=1)
    cluster_method: str = setting(
        "scipy linkage method of the hierarchical clustering of heads on the JS distances",
        "average",
        choices=("average", "complete", "single", "weighted"),
    )
    n_clusters: int = setting(
        "flat clusters cut from the dendrogram (maxclust) for head_map.tsv", 6, minimum=1
    )
    broad_entropy: float = setting(
        "behaviour broad when a head's mean attention entropy (nats) exceeds this (Clark)", 3.8
    )
    special_mass: float = setting(
        "behaviour CLS, SEP or punct when the head's mass on those tokens exceeds this (Clark)",
        0.6,
    )
    position_mass: float = setting(
        "behaviour prev or next when the head's attention to that token exceeds this (Clark)",
        0.5,
    )

    @property
    def limit(self) -> int | None:
        """The number of sequences analysed, None for all."""
        return self.n_sequences or None


@dataclass(frozen=True)
class GradientSettings:
    """One weights_gradients job's settings: `batch_size` sequences per batch (the top-level
    `batch_size`); the pieces a masked LM's loss masks (`gradients.loss_targets`; unused for a
    causal LM); `device`: a torch device string."""

    family: ClassVar[str] = "weights"
    batch_size: int = top_level("batch_size")
    mask_rate: float = setting(
        "share of each sequence's non-special pieces replaced by [MASK] for the masked-LM loss",
        0.15,
        key="gradient_mask_rate",
        exclusive_minimum=0,
        maximum=1,
    )
    seed: int = _seed()
    n_sequences: int = setting(
        "sequences in the gradient analysis (the first ones of the corpus); 0 takes all",
        0,
        key="gradient_sequences",
        minimum=0,
    )
    device: str = "cpu"

    @property
    def limit(self) -> int | None:
        """The number of sequences analysed, None for all."""
        return self.n_sequences or None
