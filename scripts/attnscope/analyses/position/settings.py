"""The position family's settings (config `analyses.position`): each setting's one home, its
default, bounds and description (`core.settings.setting`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnscope.core.settings import setting, top_level


def _t_max():
    return setting("tr_t(A) vectors cover t = -t_max..t_max", 10, minimum=1)


def _include_bias():
    return setting("include the query and key biases in W^A through [x, 1]", False)


@dataclass(frozen=True)
class PositionSettings:
    """One position_corpus (or position_shard) job's settings: `heads`: those of g(f, theta)
    and xcorr (`diagonals.select_heads`); `batch_size` sequences per batch (the top-level
    `batch_size`); `device`: a torch device string."""

    family: ClassVar[str] = "position"
    t_max: int = _t_max()
    xcorr_t_max: int = setting(
        "xcov_j(t), xcorr_j(t) and the identity check cover t = -xcorr_t_max..xcorr_t_max",
        30,
        minimum=1,
    )
    include_bias: bool = _include_bias()
    heads: tuple = setting(
        "[layer, head] pairs (1-based) that get g(f, theta) and xcorr tables and figures; "
        "empty: the head attending most to t = -1 and the one attending most to t = +1",
        (),
    )
    batch_size: int = top_level("batch_size", 16)
    device: str = "cpu"


@dataclass(frozen=True)
class RotarySettings:
    """One position_rotary job's settings: the logits' offsets -t_max..t_max by frequency
    band; `batch_size` sequences per batch (the top-level `batch_size`)."""

    family: ClassVar[str] = "position"
    t_max: int = _t_max()
    batch_size: int = top_level("batch_size", 16)


@dataclass(frozen=True)
class BilinearSettings:
    """One position_svd job's settings: W^A with or without the query and key biases."""

    family: ClassVar[str] = "position"
    include_bias: bool = _include_bias()


@dataclass(frozen=True)
class ClusterSettings:
    """One position_clusters job's settings: k-means of the tr_t(A) vectors."""

    family: ClassVar[str] = "position"
    n_clusters: int = setting("k-means clusters of the tr_t(A) vectors", 6, minimum=1)
    seed: int = setting("random state of k-means", 0)
