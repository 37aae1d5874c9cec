"""How a family declares its jobs' working memory (`Family.jobs`), in the terms the memory
estimate counts (`pipeline.memory_estimate`). No torch: family declarations import this.

With B sequences per batch of n pieces, H heads, L layers (those held at once), width d, a
vocabulary of V pieces (0: no language-model head) and float32 values (4 bytes):

    attention  A = B H n^2 4   one layer's attention weights of a batch
    map        M = B n^2 4     one [B, n, n] map (the additive mask, one head's softmax)
    vocabulary W = 3 min(CHUNK, P V 4)   the logits of P positions, built a chunk of at most
               `core.lm_head.CHUNK_BYTES` (64 MiB) at a time: the chunk, its shifted copy
               and their exponentials (the same under autograd: the backward rebuilds one
               chunk at a time)
    states     2 A + M + B (L + 1) n d 4   the extraction's eager scores and weights, and
               every layer's states (`extract_hidden_states`)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

FLOAT = 4  # bytes: the analyses decompose in float32
MB = 2**20
CHUNK_BYTES = 64 * MB  # `core.lm_head.CHUNK_BYTES` (torch there), held equal by a test


@dataclass(frozen=True)
class Sizes:
    """What a job's working memory depends on: B sequences per batch of n pieces, L layers
    (those held at once), H heads, width d, V pieces of the vocabulary (0: no LM head)."""

    B: int
    n: int
    L: int
    H: int
    d: int
    V: int = 0

    @property
    def attn_weights(self) -> int:
        """A: one layer's attention weights of a batch, bytes."""
        return self.B * self.H * self.n * self.n * FLOAT

    @property
    def one_map(self) -> int:
        """M: one [B, n, n] map, bytes."""
        return self.B * self.n * self.n * FLOAT

    @property
    def logits(self) -> int:
        """W: the logits of the batch's B n positions, a chunk at a time, bytes."""
        return vocabulary_bytes(self.B * self.n, self.V)

    @property
    def states(self) -> int:
        """The extraction's working memory (`extract_hidden_states`), bytes."""
        states = self.B * (self.L + 1) * self.n * self.d * FLOAT
        return 2 * self.attn_weights + self.one_map + states


def vocabulary_bytes(positions: int, V: int) -> int:
    """The logits of `positions` positions over V pieces, a chunk at a time (W above)."""
    return 3 * min(CHUNK_BYTES, positions * V * FLOAT)


def batch_size(config: dict, settings: dict) -> int:
    """The default batch of a job: the configuration's `batch_size`."""
    return config["batch_size"]


@dataclass(frozen=True)
class Memory:
    """How the memory estimate counts one job of a family. Every rule of
    `rules/<family>.smk` but its local ones is declared (`check_declared_jobs`): a job
    without a formula says why in `unestimated`.

    bytes        (Sizes, memory_budget_mb, the family's settings) -> bytes of working memory
                 beside the model's weights; None: not estimated
    unestimated  why a job has no formula (what bounds it instead)
    batch        (config, the family's settings) -> B, sequences per batch
    streamed     True: one layer at a time on the layer-streamed route (L = 1 there)
    every_layer  True: made only for the whole model (not under a subset of `layers:`)
    lm_head      True: made only for a model with a language-model head (V > 0)
    """

    bytes: Callable[[Sizes, float, dict], int] | None = None
    unestimated: str = ""
    batch: Callable[[dict, dict], int] = batch_size
    streamed: bool = False
    every_layer: bool = False
    lm_head: bool = False

    def __post_init__(self):
        if (self.bytes is None) == (not self.unestimated):
            raise ValueError("a Memory has a formula (bytes) or says why it has none (unestimated)")


def budget_bytes(budget_mb: float) -> int:
    """The `memory_budget_mb` setting in bytes."""
    return int(budget_mb * MB)
