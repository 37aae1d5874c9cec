"""The probing family's settings (config `analyses.probing`): each setting's one home, its
default, bounds and description (`core.settings.setting`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnscope.core.settings import setting, top_level


def _sources():
    return setting(
        "map sources: weights (alpha per head), norms (||alpha f(x)|| per head plus the "
        "head-summed map as head 0), and scopes of the mixing family's maps.h5 (e.g. AttnResLn;"
        " head 0), read only when the mixing family is enabled for that corpus",
        ("weights", "norms"),
    )


@dataclass(frozen=True)
class ProbingSettings:
    """One probing_syntax or probing_coref job's settings: the maps probed
    (`sources.MODEL_SOURCES` and the mixing family's scopes); how piece maps become word maps
    (`features.word_level`); `batch_size` sequences per batch (the top-level `batch_size`);
    `device`: a torch device string."""

    family: ClassVar[str] = "probing"
    sources: tuple[str, ...] = _sources()
    word_mode: str = setting(
        "row of a split word: mean over its pieces (the paper) or its first piece (Clark's "
        "code); attention to a word is always summed over its pieces",
        "mean",
        choices=("mean", "first"),
    )
    batch_size: int = top_level("batch_size", kw_only=True)
    device: str = "cpu"


@dataclass(frozen=True)
class ProbeSettings:
    """One probing_probe job's settings: the attention-and-words probe's training."""

    family: ClassVar[str] = "probing"
    sources: tuple[str, ...] = _sources()
    seed: int = setting("probe initialisation and batch order", 0)
    epochs: int = setting(
        "passes over the training sentences (EWT dev) per probe",
        30,
        key="probe_epochs",
        minimum=1,
    )
    learning_rate: float = setting(
        "Adam learning rate of the probes",
        0.02,
        key="probe_learning_rate",
        exclusive_minimum=0,
    )
    learning_curve: tuple[float, ...] = setting(
        "shares of the training sentences for the learning curve (the full set is probe.tsv)",
        (0.1, 0.25, 0.5),
    )


@dataclass(frozen=True)
class ProbingFigureSettings:
    """The settings of the probing family's figures (passed by rules/figures.smk)."""

    family: ClassVar[str] = "probing"
    heatmap_relations: tuple[str, ...] = setting(
        "relations drawn as layer x head accuracy heatmaps", ("det", "nsubj", "obj", "case")
    )
