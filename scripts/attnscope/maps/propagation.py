"""The whole-layer decomposition carried from the input tokens through every layer.

The per-layer stages (`layer_decomposition.layer_stages`) split a layer's output by the tokens
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
those per-token quantities, `layer_stages`' `recorded`, and gives the next whole state, the
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

from collections.abc import Callable
from dataclasses import dataclass

import torch

from attnscope.architectures import ModelLayer
from attnscope.core.canonical import CanonicalModel, cast
from attnscope.maps.layer_decomposition import (
    MEMORY_BUDGET_MB,
    STAGE_COPIES,
    VECTOR_SCOPES,
    Carried,
    closing_layer_norm,
    layer_stages,
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
    """The state after one layer split by input token, assembled over the chunks. norms
    [B, n, n]: ||p_{i<-j}|| (float64 on the CPU; invisible pairs are 0 up to rounding, not
    masked); total [B, n, d]: sum_j p_{i<-j} + bias_i, the state the split rebuilds; others
    [B, n, d]: sum_{j != i} p_{i<-j}; bias [B, n, d]."""

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


class _Assembly:
    """One layer's sums over the chunks: each stage's total (first chunk: parts and bias;
    the others: parts), the others' sum, the norms and the bias."""

    def __init__(self, B: int, n: int, like: torch.Tensor):
        self.sums: dict[str, torch.Tensor] = {}
        self.norms = torch.zeros(B, n, n, dtype=CARRY_DTYPE)
        self.others = torch.zeros_like(like)
        self.bias: torch.Tensor | None = None

    def add_stage(self, scope: str, value: torch.Tensor) -> None:
        if scope in self.sums:
            self.sums[scope] += value
        else:
            self.sums[scope] = value

    def add_state(self, chunk: Chunk) -> None:
        parts, (j0, j1) = chunk.split.parts, (chunk.sources.start, chunk.sources.stop)
        self.norms[:, :, j0:j1] = parts.norm(dim=-1).cpu()
        own = parts.diagonal(offset=-j0, dim1=1, dim2=2).transpose(1, 2)  # [B, c, d], i in chunk
        self.others += parts.sum(2)
        self.others[:, j0:j1] -= own
        if chunk.carries_bias:
            self.bias = chunk.split.bias


def propagate(
    model,
    weights: CanonicalModel,
    state: Callable[[int], torch.Tensor | None],
    mask: torch.Tensor,
    ig_steps: int,
    check: Callable[[int, str, torch.Tensor, torch.Tensor], None],
    on_layer: Callable[[int, LayerSplit], None] | None = None,
    on_chunk: Callable[[Chunk], None] | None = None,
    memory_budget_mb: float = MEMORY_BUDGET_MB,
) -> None:
    """Carry the token split of one batch through every layer, in chunks of input tokens
    (module docstring's Memory) that fit in `memory_budget_mb` MiB.

    `state(l)`: the stored hidden state X_l [B, n, d] (l = 0 .. L), or None where the store is
    not exact (16-bit): the layer then reads the whole state carried alongside. `check(layer,
    stage, got, want)` receives every stage's rebuilt output (summed over the chunks) and the
    real one (1-based layer; the attention from the module itself, the last stage the stored
    next state when exact; also `FfCompleteness`). `on_chunk(chunk)` sees each chunk's state
    split after each layer (its tensors are carried on: a change to them is carried too);
    `on_layer(l, split)` (1-based) each layer's assembled split, in layer order, once the last
    chunk is through that layer.
    """
    X0 = state(0)
    B, n, d = X0.shape
    width = source_chunk(B, n, d, memory_budget_mb)
    pending: list[_Assembly | None] = [None] * weights.n_layers
    for j0 in range(0, n, width):
        sources = slice(j0, min(n, j0 + width))
        last = sources.stop == n
        whole = X0.to(CARRY_DTYPE)
        carried = token_split(whole, sources)
        for index in range(weights.n_layers):
            handle = ModelLayer(model, weights, index)
            layer = handle.weights
            X = state(index)
            X = whole.to(X0.dtype) if X is None else X
            X64 = X.to(CARRY_DTYPE)
            closing = closing_layer_norm(weights.outline, weights.final_ln, index)
            layer64, closing64 = cast(layer, CARRY_DTYPE), cast(closing, CARRY_DTYPE)
            wanted = stream_scope(layer.plan)
            memo: dict = {}
            recorded: dict = {}
            one_source = Carried(whole[:, :, None], torch.zeros_like(whole))
            for stage in layer_stages(
                X64,
                mask,
                layer64,
                closing64,
                ig_steps,
                None,
                one_source,
                memo=memo,
                recorded=recorded,
            ):
                if stage.scope == wanted:
                    following_whole = stage.total()
            assembly = pending[index] or _Assembly(B, n, whole)
            extra: dict = {}
            stages = layer_stages(
                X64,
                mask,
                layer64,
                closing64,
                ig_steps,
                extra,
                carried,
                memo=memo,
                recorded=recorded,
            )
            for stage in stages:
                first = sources.start == 0
                assembly.add_stage(stage.scope, stage.total() if first else stage.parts.sum(2))
                if stage.scope == wanted:  # later stages make new tensors: no copy needed
                    bias = stage.bias if first else torch.zeros_like(stage.bias)
                    following = Carried(stage.parts, bias, sources.start)
            del stages
            whole, carried = following_whole, following
            chunk = Chunk(index + 1, carried, sources, whole)
            if on_chunk is not None:
                on_chunk(chunk)
            assembly.add_state(chunk)
            pending[index] = None if last else assembly
            if last:
                _finish(handle, closing, X, state, mask, assembly, extra, check)
                if on_layer is not None:
                    split = LayerSplit(
                        assembly.norms, assembly.sums[wanted], assembly.others, assembly.bias
                    )
                    on_layer(index + 1, split)


def _finish(handle, closing, X, state, mask, assembly, extra, check) -> None:
    """Check every stage's sum over the chunks of layer `handle.index` against the module."""
    index = handle.index
    y = handle.attention_output(X, mask)
    reference = reference_outputs(X, y, handle.weights, closing, state(index + 1))
    for scope in VECTOR_SCOPES:
        check(index + 1, scope, assembly.sums[scope], reference[scope])
        if scope == "AttnResLnFf":
            check(index + 1, COMPLETENESS, assembly.sums[scope], extra["ff_real"])
