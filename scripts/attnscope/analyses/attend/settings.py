"""The attend family's settings (config `analyses.attend`): each setting's one home, its
default, bounds and description (`core.settings.setting`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from attnscope.core.settings import setting


@dataclass(frozen=True)
class AttendSettings:
    """One attend_compute job's settings (`Job.settings(AttendSettings)`); `device`: a torch
    device string."""

    family: ClassVar[str] = "attend"
    sequences: int = setting(
        "the first this many sequences of each corpus are analysed (all if fewer); the cost "
        "grows as sequences x layers x components^2 (SmolLM2 at 128 pieces, about a minute per "
        "sequence on 2 CPU cores)",
        2,
        minimum=1,
    )
    max_rel_residual: float = setting(
        "largest relative residual of the split (state, attention output, row lifts) before the"
        " run fails",
        1.0e-4,
        exclusive_minimum=0,
    )
    top_k: int = setting(
        "component pairs, query-side and key-side components kept per head and key class (by "
        "|lift|) in lift.tsv and key_classes.tsv",
        10,
        minimum=1,
    )
    component_window: int = setting(
        "at each analysed layer l, the heads and FF blocks of layers l - w .. l - 1 stay "
        "components of their own and those of layers 1 .. l - w - 1 are merged into two, "
        "L1-{l-w-1}.heads and L1-{l-w-1}.FF (exact, the same sums coarser), so the components, "
        "the split's memory and the pair sums stop growing with depth; 0 keeps every layer head"
        " by head (C = 2 + L (H + 1) after L layers)",
        0,
        minimum=0,
    )
    massive_directions: bool = setting(
        "split each head's key-side lift along the massive dimensions of the residual state "
        "(the norms family's massive_dimensions.tsv for the same model and corpus, so the norms"
        " family must read the corpus) against the rest of the state: groups.tsv's direction "
        "rows. None where the norms family found no massive dimension, or with a layer subset "
        "(the sink card that finds them needs every layer)",
        True,
    )
    device: str = "cpu"


@dataclass(frozen=True)
class AttendFigureSettings:
    """The settings of the attend family's figures (passed by rules/figures.smk)."""

    family: ClassVar[str] = "attend"
    figure_heads: int = setting(
        "heads drawn per key class (first, previous) in the lift_pairs figure, those with the "
        "largest lift towards that class, and per offset (t = -1, +1) in the trt_terms figure, "
        "those with the strongest peak of the logit's tr_t there",
        2,
        minimum=1,
    )
