"""The whole-layer decomposition carried from the input tokens through every layer.

The per-layer stages (`layer_decomposition.factored_stages`) split a layer's output by the tokens
of its own input X_l. Here the split is carried instead (as DecompX, Modarressi et al. 2023,
does for BERT): the embedding output starts split by input token, and every stage of every
layer is applied to the carried parts, so the state after layer l is

    x_{l, i} = sum_j p_{l, i<-j} + bias_{l, i},     p [B, n, n, d] (token i, input token j).

Start: the embedding output at position i is input token i's part (its word, position and
type embeddings and the embedding norm act at position i alone), and the bias is 0; every
bias term of the layers (b_O, b_V, norm offsets, FF biases) joins `bias`. Exact through
norms and gated FF blocks: a norm's scale and the FF's IG coefficients depend only on each
token's total, which the parts sum to. What is carried is the residual stream state X_l
(pre-LN: the block output, `AttnResLnFfRes`; post-LN: `AttnResLnFfResLn`).

Precision: the parts and every stage's arithmetic are float64 (`CARRY_DTYPE`; the layer's
weights are cast one layer at a time), the stored states and the module references stay
float32. Carried in float32, the rounding of n parts per token accumulates through the depth
and a correct split of a real 30-layer model with a 12,000 massive activation missed the
1e-4 bound (1.3e-4 at its last layer); in float64 the residual is what the float32 forward's
own rounding leaves, and the bound means the same at every depth.

Memory: in chunks of input tokens. Every stage is linear in the parts once each token's norm
scales and FF coefficients are fixed, and those depend on the token's whole state only. So
the state is carried twice per layer: whole, as one source (the state itself: it records
those per-token quantities, `carried_stages`' `recorded`, and gives the next whole state, the
same float64 arithmetic as the sum of the parts), then split, the parts of a chunk of c input
tokens p[:, :, j0:j1] [B, n, c, d], with the recorded quantities. Each chunk goes through the
whole depth on its own; the first chunk carries the bias (the others' stage biases repeat the
constant terms and are dropped). Each layer's outputs are assembled over the chunks
(`LayerSplit`, and the stage checks compare the SUM of the chunks' totals with the module
once the last chunk is through). c follows from `memory_budget_mb`: `CARRIED_COPIES` tensors
[B, n, c, d] float64 fit in it (c = n, one chunk, when the whole split does). Beyond the
chunk: per layer the [B, n, n] norms (float64, on the CPU) and, while chunks are pending,
eight [B, n, d] float64 sums; with one chunk every layer is assembled at once and only one
layer's sums are alive. A 16-bit store chunks the same way: the layer then reads the whole
state carried alongside, which needs no other chunk. Cost per layer and chunk: the attention
mixes the chunk's parts, B n^2 c d multiply-adds, the FF block B n c d d_ff (twice for a
gated one); the whole state's pass and the attention weights are recomputed per chunk
(B n^2 d), the module references once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from attnscope.architectures import ModelLayer
from attnscope.core.canonical import CanonicalModel, cast
from attnscope.core.checks import ResidualLog
from attnscope.maps.layer_decomposition import (
    MEMORY_BUDGET_MB,
    STAGE_COPIES,
    VECTOR_SCOPES,
    Carried,
    LayerInput,
    Stage,
    TokenFactors,
    carried_stages,
    closing_layer_norm,
    query_chunk,
    reference_outputs,
    stream_scope,
)
from attnscope.maps.layer_maps import COMPLETENESS

CARRY_DTYPE = torch.float64  # the carried parts and every stage's arithmetic (module docstring)
CARRIED_COPIES = 2 * STAGE_COPIES  # [B, n, c, d] float64 tensors alive at once, as measured
# (benchmarks/bench_length.py --steps propagate: 8.5 at n 1,024, d 256 with 6): the stages'
# copies, the carried input held through the layer, the attention's values and mixed values
# and einsum's permuted copies of them


def token_split(X0: torch.Tensor, sources: slice | None = None) -> Carried:
    """The embedding output split by input token: x_{0, i} is token i's one part, bias 0;
    with `sources`, only the parts of those input tokens j0 <= j < j1 (a chunk).
    X0 [B, n, d] -> parts [B, n, c, d] (c = j1 - j0; n without `sources`)."""
    B, n, d = X0.shape
    j0, j1 = (0, n) if sources is None else (sources.start, sources.stop)
    parts = X0.new_zeros(B, n, j1 - j0, d)
    parts.diagonal(offset=-j0, dim1=1, dim2=2).copy_(X0[:, j0:j1].transpose(1, 2))
    return Carried(parts, torch.zeros_like(X0), j0)


def source_chunk(batch: int, n: int, width: int, budget_mb: float) -> int:
    """Input tokens per chunk: `CARRIED_COPIES` float64 tensors [batch, n, chunk, width] fit in
    `budget_mb` MiB (at least 1, at most n)."""
    itemsize = torch.finfo(CARRY_DTYPE).bits // 8
    return query_chunk(batch, n, width, itemsize, budget_mb, CARRIED_COPIES)


@dataclass
class Chunk:
    """The state after layer `layer` (1-based) split by the input tokens j in `sources`:
    `split` parts [B, n, c, d] of those tokens and, in the first chunk (sources from 0), the
    bias [B, n, d]; 0 in the others. `total` [B, n, d]: the whole state, which every chunk's
    parts and the first chunk's bias sum to."""

    layer: int
    split: Carried
    sources: slice
    total: torch.Tensor

    @property
    def carries_bias(self) -> bool:
        return self.sources.start == 0


@dataclass
class LayerSplit:
    """The state after layer `layer` (1-based) split by input token, assembled over the
    chunks. norms [B, n, n]: ||p_{i<-j}|| (float64 on the CPU; invisible pairs are 0 up to
    rounding, not masked); total [B, n, d]: sum_j p_{i<-j} + bias_i, the state the split
    rebuilds; others [B, n, d]: sum_{j != i} p_{i<-j}; bias [B, n, d]."""

    layer: int
    norms: torch.Tensor
    total: torch.Tensor
    others: torch.Tensor
    bias: torch.Tensor

    def own_norm(self) -> torch.Tensor:
        """||p_{i<-i}||, the token's own part.  [B, n] (on the device of `total`)"""
        return self.norms.diagonal(dim1=1, dim2=2).to(self.total.device)

    def bias_share(self) -> torch.Tensor:
        """||bias_i|| / (sum_j ||p_{i<-j}|| + ||bias_i||): the share of the state's norm budget
        that no input token carries.  [B, n]"""
        bias = self.bias.norm(dim=-1)
        total = self.norms.sum(-1).to(bias) + bias
        return torch.where(total > 0, bias / total.clamp_min(1e-30), torch.zeros_like(total))


@dataclass(frozen=True)
class StageCheck:
    """One stage of layer `layer` (1-based) rebuilt by the split, summed over the chunks
    (`got` [B, n, d]), and the real output it rebuilds (`want` [B, n, d])."""

    layer: int
    stage: str
    got: torch.Tensor
    want: torch.Tensor

    def record(self, residuals: ResidualLog, mask: torch.Tensor, prefix: str = "") -> None:
        """Add the check to `residuals` (which raises above its bound), its stage named
        `prefix` + stage."""
        residuals.add(self.layer, prefix + self.stage, self.got, self.want, mask)


class _Assembly:
    """One layer's sums over the chunks: each stage's total (first chunk: parts and bias;
    the others: parts), the others' sum, the norms, the bias and the real FF output."""

    def __init__(self, B: int, n: int, like: torch.Tensor):
        self.sums: dict[str, torch.Tensor] = {}
        self.norms = torch.zeros(B, n, n, dtype=CARRY_DTYPE)
        self.others = torch.zeros_like(like)
        self.bias: torch.Tensor | None = None
        self.ff_real: torch.Tensor | None = None

    def add_stage(self, stage: Stage, first: bool) -> None:
        """A chunk's stage: its total in the first chunk, its parts' sum in the others."""
        value = stage.total() if first else stage.parts.sum(2)
        if stage.scope in self.sums:
            self.sums[stage.scope] += value
        else:
            self.sums[stage.scope] = value
        if stage.ff_real is not None:  # the whole state's, recorded: the same in every chunk
            self.ff_real = stage.ff_real

    def add_state(self, chunk: Chunk) -> None:
        parts, (j0, j1) = chunk.split.parts, (chunk.sources.start, chunk.sources.stop)
        self.norms[:, :, j0:j1] = parts.norm(dim=-1).cpu()
        own = parts.diagonal(offset=-j0, dim1=1, dim2=2).transpose(1, 2)  # [B, c, d], i in chunk
        self.others += parts.sum(2)
        self.others[:, j0:j1] -= own
        if chunk.carries_bias:
            self.bias = chunk.split.bias

    def split(self, layer: int, scope: str) -> LayerSplit:
        """The layer's assembled split (`scope`: the stage that is the state)."""
        return LayerSplit(layer, self.norms, self.sums[scope], self.others, self.bias)


Event = StageCheck | LayerSplit | Chunk  # what `propagate` yields


def propagate(
    model,
    weights: CanonicalModel,
    state: Callable[[int], torch.Tensor | None],
    mask: torch.Tensor,
    ig_steps: int = 0,
    memory_budget_mb: float = MEMORY_BUDGET_MB,
) -> Iterator[Event]:
    """Carry the token split of one batch through every layer, in chunks of input tokens
    (module docstring's Memory) that fit in `memory_budget_mb` MiB, and yield its events.

    `state(l)`: the stored hidden state X_l [B, n, d] (l = 0 .. L), or None where the store is
    not exact (16-bit): the layer then reads the whole state carried alongside. Yields, per
    chunk and layer, the `Chunk` of that layer's state split (its tensors are carried on: a
    change to them is carried too); once the last chunk is through a layer, that layer's
    `StageCheck`s (every stage's rebuilt output summed over the chunks against the real one:
    the attention from the module itself, the last stage the stored next state when exact;
    also `FfCompleteness`), then its assembled `LayerSplit`, in layer order.
    """
    X0 = state(0)
    B, n, d = X0.shape
    width = source_chunk(B, n, d, memory_budget_mb)
    pending: list[_Assembly | None] = [None] * weights.n_layers
    for j0 in range(0, n, width):
        sources = slice(j0, min(n, j0 + width))
        whole = X0.to(CARRY_DTYPE)
        carried = token_split(whole, sources)
        for index in range(weights.n_layers):
            handle = ModelLayer(model, weights, index)
            X = state(index)
            X = whole.to(X0.dtype) if X is None else X
            closing = closing_layer_norm(weights.outline, weights.final_ln, index)
            at = LayerInput(
                X.to(CARRY_DTYPE),
                mask,
                cast(handle.weights, CARRY_DTYPE),
                cast(closing, CARRY_DTYPE),
                ig_steps,
            )
            assembly = pending[index] or _Assembly(B, n, whole)
            whole, carried = _carry_layer(at, whole, carried, assembly)
            chunk = Chunk(index + 1, carried, sources, whole)
            yield chunk
            assembly.add_state(chunk)
            last = sources.stop == n
            pending[index] = None if last else assembly
            if last:
                yield from _checks(handle, closing, X, state(index + 1), mask, assembly)
                yield assembly.split(index + 1, stream_scope(handle.weights.plan))


def _carry_layer(
    at: LayerInput, whole: torch.Tensor, carried: Carried, assembly: _Assembly
) -> tuple[torch.Tensor, Carried]:
    """One chunk through one layer: the whole state [B, n, d] as one source (which records
    the per-token quantities and gives the next whole state), then the chunk's split with
    them, each stage added to `assembly`. Returns (the next whole state, the chunk's next
    split; its bias 0 unless the chunk starts at token 0)."""
    wanted = stream_scope(at.layer.plan)
    recorded = TokenFactors()
    one_source = Carried(whole[:, :, None], torch.zeros_like(whole))
    for stage in carried_stages(at, one_source, recorded):
        if stage.scope == wanted:
            following_whole = stage.total()
    first = carried.first == 0
    for stage in carried_stages(at, carried, recorded):
        assembly.add_stage(stage, first)
        if stage.scope == wanted:  # later stages make new tensors: no copy needed
            bias = stage.bias if first else torch.zeros_like(stage.bias)
            following = Carried(stage.parts, bias, carried.first)
    return following_whole, following


def _checks(handle, closing, X, X_next, mask, assembly: _Assembly) -> Iterator[StageCheck]:
    """Every stage's sum over the chunks of layer `handle.index` against the module (and the
    FF's completeness against its real output); X_next: the stored next state or None."""
    layer = handle.index + 1
    y = handle.attention_output(X, mask)
    reference = reference_outputs(X, y, handle.weights, closing, X_next)
    for scope in VECTOR_SCOPES:
        yield StageCheck(layer, scope, assembly.sums[scope], reference[scope])
        if scope == "AttnResLnFf":
            yield StageCheck(layer, COMPLETENESS, assembly.sums[scope], assembly.ff_real)
