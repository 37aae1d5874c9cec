"""The heads family's settings of one job (`Job.settings(HeadsSettings)`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar


@dataclass(frozen=True)
class HeadsSettings:
    """`batch_size`: sequences per batch of the role pass; `pattern_pieces`: the pieces of the
    small attention patterns on the atlas cards; `thresholds`: {role: threshold} in place of
    the defaults of `roles.ROLES`; `min_share`: the smallest share of a role's lift that
    circuits.tsv keeps as an edge; `device`: a torch device string."""

    family: ClassVar[str] = "heads"
    batch_size: int = 16
    pattern_pieces: int = 16
    thresholds: dict = field(default_factory=dict)
    min_share: float = 0.1
    device: str = "cpu"
