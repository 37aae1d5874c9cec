"""The weights family's gradient settings of one job (`Job.settings(GradientSettings)`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar


@dataclass(frozen=True)
class GradientSettings:
    """`batch_size` sequences per batch; `mask_rate` and `seed`: the pieces a masked LM's
    loss masks (`gradients.loss_targets`; unused for a causal LM); `n_sequences`: the first
    sequences analysed (0: all); `device`: a torch device string."""

    family: ClassVar[str] = "weights"
    batch_size: int
    mask_rate: float
    seed: int
    n_sequences: int = 0
    device: str = "cpu"

    @property
    def limit(self) -> int | None:
        """The number of sequences analysed, None for all."""
        return self.n_sequences or None
