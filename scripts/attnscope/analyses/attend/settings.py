"""The attend family's settings of one job (`Job.settings(AttendSettings)`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class AttendSettings:
    """`sequences`: the first sequences analysed; `max_rel_residual`: the decomposition
    check's bound; `top_k`: the lift tables' keys per head; `component_window`: the layers
    kept head by head at each layer, older ones merged (0: all; `corpus_pass.sequence_pass`);
    `massive_directions`: split the key side along the norms family's massive dimensions
    (read by the rule; `groups.tsv`'s direction rows); `device`: a torch device string."""

    family: ClassVar[str] = "attend"
    sequences: int
    max_rel_residual: float
    top_k: int = 0
    component_window: int = 0
    massive_directions: bool = True
    device: str = "cpu"
