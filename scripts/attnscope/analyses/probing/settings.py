"""The probing family's settings of one job (`Job.settings(ProbingSettings)`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class ProbingSettings:
    """`sources`: the maps probed (`sources.MODEL_SOURCES` and the mixing family's scopes);
    `batch_size` sequences per batch; `word_mode`: how piece maps become word maps
    (`features.word_level`); `limit`: only the first sequences (None: all); `device`: a
    torch device string."""

    family: ClassVar[str] = "probing"
    sources: tuple[str, ...]
    batch_size: int
    word_mode: str
    limit: int | None = None
    device: str = "cpu"
