"""A whole layer decomposed into one vector per (query i, key j) plus a bias per token.

At every stage (scope) of layer l the real module output at token i is rebuilt exactly as

    out_i = sum_j z_ij + bias_i,     z [B, n, n, d] (query i, key j),  bias [B, n, d],

starting from the layer input X_l, whose parts are the tokens themselves (x_i is the one part
at j = i). Stages in module order:

post-LN (BERT, RoBERTa, ELECTRA): X -> Attn -> +Res -> LN -> FF -> +Res -> LN = X_{l+1}
    Attn              z_ij = sum_h alpha^h_ij f^h(x_j)  (f includes b_V: Kobayashi 2020's
                      f(x) = (x W_V + b_V) W_O, as the norms family); bias b_O
    AttnRes           + x_i at j = i
    AttnResLn         z_ij -> gamma (z_ij - mean(z_ij)) / s_i, s_i from the whole sum (biased
                      variance + eps); the bias likewise, plus beta
    AttnResLnFf       FF(h_i) split by Integrated Gradients (see `activation_split`): part j
                      gives (z_ij W_in * c_i) W_out; the bias part (bias_i W_in + b_in) * c_i W_out
                      + b_out goes to the bias
    AttnResLnFfRes    FF parts + the AttnResLn parts (the residual around the FF block)
    AttnResLnFfResLn  the second LayerNorm: its parts rebuild X_{l+1}

pre-LN (GPT-2): LN1 -> Attn -> +Res -> LN2 -> FF -> +Res, then the next LayerNorm
    Attn              attention on LN1(X): LN1 acts on each token alone, so with the tokens as
                      parts, LN1(x_j) is simply part j; z_ij = sum_h alpha^h_ij f^h(LN1(x_j))
    AttnRes           + x_i at j = i (the residual carries X, not LN1(X))
    AttnResLn         LN2 (ln_ff) of the AttnRes parts: what the FF block reads
    AttnResLnFf       the FF block, split as above
    AttnResLnFfRes    FF parts + the AttnRes parts: rebuilds X_{l+1} (the block output)
    AttnResLnFfResLn  the LayerNorm that reads X_{l+1} next (LN1 of layer l + 1, ln_f after
                      the last layer): what the next block actually sees

Both orders, and those of the decoders below, are one `BlockPlan` (`CanonicalLayer.plan`,
core/canonical.py) read step by step: its docstring gives the generic layer, stage by stage.
Rotary decoders (`architectures/decoders.py`, `neox.py`) take the pre-LN path with their own
norms (RMSNorm: no centring, s from the mean square): a norm on a block's output (Gemma-2/3,
OLMo-2: `post_attn`, `post_ff`) maps that block's parts like any norm, its scale from the whole
sum; a block without an input norm (OLMo-2) reads the AttnRes parts themselves; with a parallel
residual (NeoX, Cohere) the FF reads its norm of X, so its parts are the tokens themselves. The
FF is any `FeedForward.linearise`: plain (c = g(U)/U), gated (`gated_split`), or a mixture of
experts (each chosen expert's gated split, weighted by the router).

Cost: the FF stage dominates. Its pre-activation parts z_ij W_in are not formed as n^2
products with the [d, d_ff] matrix W_in: the AttnResLn parts are LayerNorm-scaled sums of H
head vectors and the residual, z_ij = gamma * C(sum_h alpha^h_ij f^h(x_j) + [i = j] x_i) / s_i
(C subtracts the mean over d), so W_in is applied to the H n head vectors once and the parts
are mixed from them (`HeadFactors`): n^2 H d_ff instead of n^2 d d_ff multiply-adds. What
remains is the product of every part with W_out, n^2 d_ff d, which no factorisation avoids:
each part's FF vector depends on its own query's IG coefficients.

The same stages carry any split of X into parts of other sources (`Carried`, e.g. the input
tokens carried through the whole depth by `propagation`): attention then mixes every part
through W_V W_O (`carried_attention`) and the FF reads the parts without head factors.

Memory: every stage of query i reads only row i of the parts and per-token quantities of
token i (a norm's scale, the FF's IG coefficients), so a layer can be decomposed for a block
of queries at a time (`queries`): its stages hold parts [B, c, n, d] (c queries, every key),
at most `STAGE_COPIES` of them at once. `query_chunk` picks c from a memory budget (the
config's `memory_budget_mb`), so that the working memory stays within the budget and what
grows with n^2 is only the [B, n, n] maps. Within a stage the FF is applied to a sub-chunk of
queries at a time, so the [B, keys, chunk, d_ff] pre-activation parts stay under
`FF_CHUNK_ELEMENTS`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property

import torch

from attnscope.core.attention import attention_probs, block_steps, through, value_vectors
from attnscope.core.canonical import BlockPlan, CanonicalLayer, CanonicalLayerNorm, Linearised
from attnscope.core.settings import MEMORY_BUDGET_MB  # noqa: F401 (layer_maps, propagation)
from attnscope.maps.scopes import SCOPES, VECTOR_SCOPES, WEIGHT_SCOPES  # noqa: F401

STAGE_COPIES = 4  # [B, c, n, d] tensors alive at once in a chunk's stages (parts, the residual
# parts, the FF parts, a norm's centred copy)
FF_CHUNK_ELEMENTS = 2**22  # [B, n, chunk, d_ff] float32 pre-activation parts: <= 16 MiB (faster
# than 64 MiB chunks at BERT-base shapes: benchmarks/bench_mixing.py)


def query_chunk(
    batch: int, n: int, width: int, itemsize: int, budget_mb: float, copies: int = STAGE_COPIES
) -> int:
    """Queries per chunk so that `copies` tensors [batch, chunk, n, width] of `itemsize`
    bytes per value fit in `budget_mb` MiB (at least 1, at most n)."""
    row = copies * batch * n * width * itemsize
    return max(1, min(n, int(budget_mb * 2**20 // max(1, row))))


@dataclass
class Stage:
    """One scope of a layer: parts z [B, c, n, d] (query i, key j) and bias [B, c, d] for the
    c queries from `offset` on (all n from 0 unless the layer is decomposed in query chunks);
    `factors`: the same parts in factored form, where a stage has one (AttnResLn)."""

    scope: str
    parts: torch.Tensor
    bias: torch.Tensor
    factors: HeadFactors | None = None
    offset: int = 0
    ff_real: torch.Tensor | None = None  # AttnResLnFf: the real FF output FF(h) [B, c, d] (through
    # a norm on the block's output), the completeness check's reference

    def total(self) -> torch.Tensor:
        """sum_j z_ij + bias_i: the module output this stage rebuilds.  [B, c, d]"""
        return self.parts.sum(2) + self.bias

    def queries(self) -> slice:
        """The positions of this stage's query rows."""
        return slice(self.offset, self.offset + self.parts.shape[1])


def weight_maps(alpha: torch.Tensor) -> dict[str, torch.Tensor]:
    """Attn-w = mean over heads of alpha; AttnRes-w = (Attn-w + I) / 2.  Each [B, n, n]"""
    attn_w = alpha.mean(1)
    eye = torch.eye(alpha.shape[-1], dtype=alpha.dtype, device=alpha.device)
    return {"Attn-w": attn_w, "AttnRes-w": (attn_w + eye) / 2}


def attention_parts(alpha: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
    """z_ij = sum_h alpha^h_ij f^h(x_j).  alpha [B, H, n, n], fx [B, H, n, d] -> [B, n, n, d]"""
    return torch.einsum("bhij,bhjd->bijd", alpha, fx)


def add_residual(parts: torch.Tensor, X: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """parts + x_i at j = i (in place), for the queries from position `offset` on.
    parts [B, c, n, d], X [B, c, d] (those queries' inputs)"""
    parts.diagonal(offset=offset, dim1=1, dim2=2).add_(X.transpose(1, 2))
    return parts


def centred(v: torch.Tensor) -> torch.Tensor:
    """v minus its mean over the last axis."""
    return v - v.mean(-1, keepdim=True)


def layer_norm_scale(total: torch.Tensor, ln: CanonicalLayerNorm) -> torch.Tensor:
    """The norm's divisor per token: sqrt(biased variance + eps) for LayerNorm, sqrt(mean
    square + eps) for RMSNorm.  total [B, n, d] -> s [B, n, 1]"""
    return ln.scale(total)


def layer_norm_parts(
    parts: torch.Tensor,
    bias: torch.Tensor,
    ln: CanonicalLayerNorm,
    s: torch.Tensor | None = None,
):
    """LN(sum_j z_j + b) = sum_j gamma C(z_j) / s + [gamma C(b) / s + beta], one s per token
    from the whole sum; C subtracts the mean over d for LayerNorm and is the identity for
    RMSNorm (whose beta is 0).

    parts [B, n, n, d], bias [B, n, d] -> (parts, bias) of the same shapes. `s` [B, n, 1]: the
    scale when the caller has it already (`layer_norm_scale`); computed here otherwise.
    """
    if s is None:
        s = layer_norm_scale(parts.sum(2) + bias, ln)
    new_parts = centred(parts).mul_(ln.gamma) if ln.centred else parts * ln.gamma
    new_parts.div_(s[:, :, None])
    new_bias = ln.gamma * ln.centre(bias) / s + ln.beta
    return new_parts, new_bias


@dataclass
class HeadFactors:
    """LayerNorm-scaled parts in factored form (the AttnResLn stage):

        z_ij = gamma * C(sum_h alpha^h_ij f^h_j + [i = j] x_i) / s_i,   C(v) = v - mean_d(v)

    alpha [B, H, c, n], fx = f^h(x_j) [B, H, n, d], X = x_i [B, c, d] (the residual),
    gamma [d], s [B, c, 1] (the LayerNorm's scale from the whole sum) for the c queries from
    position `offset` on; `centred` False for RMSNorm (C is the identity). A norm on the
    attention block's own output (Gemma-2's sandwich) is folded in by the caller: alpha
    divided by its scale per query, fx multiplied by its gamma (and centred for LayerNorm).
    `memo`: a dict shared by the query chunks of one layer, which keeps the head vectors
    times W (computed once per layer).
    """

    alpha: torch.Tensor
    fx: torch.Tensor
    X: torch.Tensor
    gamma: torch.Tensor
    s: torch.Tensor
    centred: bool = True
    offset: int = 0
    memo: dict | None = None

    def _centre(self, v: torch.Tensor) -> torch.Tensor:
        return centred(v) if self.centred else v

    def times(self, W: torch.Tensor) -> Callable[..., torch.Tensor]:
        """z_ij W for a chunk of queries, mixed from the head vectors: (i0, i1, keys) ->
        [B, keys (key j < keys), i1 - i0 (query i, rows i0:i1 of this block), d_out]. W
        [d, d_out] is applied once, to the H n head vectors and c residual vectors, not to
        the n^2 parts."""
        W_gamma = self.gamma[:, None] * W
        memo = {} if self.memo is None else self.memo
        kept = memo.get("W")
        if kept is None or kept.shape != W.shape or not torch.equal(kept, W):
            heads = self._centre(self.fx) @ W_gamma  # [B, H, n, d_out]
            memo.update(W=W, heads=heads.transpose(1, 2))  # [B, n (j), H, d_out]
        heads = memo["heads"]
        residual = self._centre(self.X) @ W_gamma  # [B, c, d_out]

        def chunk(i0: int, i1: int, keys: int | None = None) -> torch.Tensor:
            keys = heads.shape[1] if keys is None else keys
            scale = 1 / self.s[:, i0:i1]  # [B, c, 1]
            weights = (self.alpha[:, :, i0:i1, :keys] * scale[:, None]).permute(0, 3, 2, 1)
            u = weights @ heads[:, :keys]  # [B, keys (j), c (i), H] @ [B, keys, H, d_out]
            own = u.diagonal(offset=-(self.offset + i0), dim1=1, dim2=2)  # j = i, [B, d_out, c]
            own.add_((residual[:, i0:i1] * scale).transpose(1, 2))
            return u

        return chunk


def feed_forward_parts(
    parts: torch.Tensor,
    bias: torch.Tensor,
    layer: CanonicalLayer,
    ig_steps: int,
    factors: HeadFactors | None = None,
    offset: int = 0,
    linearised: tuple[Linearised, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The FF block applied to the parts, its activation split by IG (zero baseline).

    The FF is linearised once per batch at the total input h_i = sum_j z_ij + bias_i
    (`FeedForward.linearise`: coefficients c_i per query token, shared by every key j; gated
    and mixture-of-experts blocks stack their pre-activations side by side). Part j ->
    fold((z_ij W_pre) * c_i) W_post; bias -> fold((bias_i W_pre + b_pre) * c_i) W_post + b_out
    (`fold` adds a gated block's gate and input shares before W_out).
    Returns (parts [B, c, n, d], bias [B, c, d], the real FF output FF(h) [B, c, d] for the
    completeness check), for the c queries of `parts` (from position `offset` on).
    `factors`: the same parts in factored form, which makes z_ij W_pre n/H times cheaper
    (module docstring); without them z_ij W_pre is computed from `parts`. Queries are
    processed in sub-chunks: no [B, c, n, m] tensor. In a causal layer the parts of
    keys after the chunk's last query are 0 at this stage and are skipped (half the work);
    `offset` is the first query's position minus the first key's (negative for a chunk of
    carried sources from a later token on, `Carried.first`).
    `linearised`: (the linearisation, FF(h)) at the total input when the caller has them
    (`linearise_ff`; a carried split of some of the sources does not sum to h).
    """
    B, c, n, _ = parts.shape
    if linearised is None:
        linearised = linearise_ff(parts.sum(2) + bias, layer, ig_steps)
    lin, ff_real = linearised
    m = lin.W_pre.shape[1]
    if factors is None:

        def pre_activation(i0: int, i1: int, keys: int) -> torch.Tensor:
            # one product of every (key, query) row with W_pre: the transposed [B, keys, c, d]
            # view would be multiplied key by key, each reading all of W_pre for c rows
            # (benchmarks/bench_flops.py: 3x slower at SmolLM2's shape)
            z = parts[:, i0:i1, :keys].transpose(1, 2)
            return (z.reshape(-1, z.shape[-1]) @ lin.W_pre).reshape(*z.shape[:-1], -1)

    else:
        pre_activation = factors.times(lin.W_pre)
    out = torch.zeros_like(parts)
    chunk = max(1, FF_CHUNK_ELEMENTS // max(1, B * n * m))
    for i0 in range(0, c, chunk):
        i1 = min(c, i0 + chunk)
        keys = min(n, offset + i1) if layer.causal else n
        if keys <= 0:  # every part of these queries is 0 (a chunk of later sources)
            continue
        u = pre_activation(i0, i1, keys).mul_(lin.c[:, None, i0:i1])  # [B, keys, c (i), m]
        out[:, i0:i1, :keys] = (lin.fold(u) @ lin.W_post).transpose(1, 2)
    new_bias = lin.fold((bias @ lin.W_pre + lin.b_pre) * lin.c) @ lin.W_post + lin.b_out
    return out, new_bias, ff_real


def linearise_ff(total: torch.Tensor, layer: CanonicalLayer, ig_steps: int):
    """The FF block's linearisation (IG coefficients) at its total input h [B, c, d], and its
    real output FF(h) [B, c, d] (the completeness check's reference)."""
    return layer.ff.linearise(total, ig_steps), layer.ff(total)


class TokenFactors:
    """The per-token quantities of one layer's (or the head's) stages, keyed by where they act
    (every norm's scale, the FF's linearisation and real output): each is computed from the
    first split's stage total and recorded, then used as it is by every later split. A split
    that sums to the state (one source: the state itself) records them; a split of only some
    sources, which does not, is then decomposed exactly with them."""

    def __init__(self):
        self._values: dict[str, object] = {}

    def get(self, key: str, parts: torch.Tensor, bias: torch.Tensor, compute: Callable):
        """The quantity `key`: recorded, or `compute` applied to sum_j parts_ij + bias_i."""
        if key not in self._values:
            self._values[key] = compute(parts.sum(2) + bias)
        return self._values[key]


def per_token(
    recorded: TokenFactors | None, key: str, parts: torch.Tensor, bias: torch.Tensor, compute
):
    """A per-token quantity of a stage (a norm's scale, the FF's linearisation): `compute`
    applied to the stage's total sum_j parts_ij + bias_i, or what `recorded` holds (or
    records) under `key`."""
    if recorded is None:
        return compute(parts.sum(2) + bias)
    return recorded.get(key, parts, bias, compute)


def _normed(parts, bias, norm, recorded: TokenFactors | None = None, key: str = ""):
    """(parts, bias) through `norm` (the scale from their sum, or recorded under `key`), or
    unchanged when None."""
    if norm is None:
        return parts, bias
    s = per_token(recorded, key, parts, bias, norm.scale)
    return layer_norm_parts(parts, bias, norm, s)


@dataclass
class Carried:
    """A hidden state X [B, n, d] split into the parts of m sources (the input tokens, when a
    decomposition is carried through the depth): X_i = sum_j parts_ij + bias_i, parts
    [B, n, m, d], bias [B, n, d]."""

    parts: torch.Tensor
    bias: torch.Tensor
    first: int = 0  # sources that are the tokens first .. first + m - 1 of the sequence (a
    # chunk of input tokens): a causal layer gives no token a part of a later one

    def total(self) -> torch.Tensor:
        return self.parts.sum(2) + self.bias


def carried_attention(
    alpha: torch.Tensor,
    carried: Carried,
    layer: CanonicalLayer,
    recorded: TokenFactors | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention block applied to a carried split of its input (before any output norm).

    The block is linear in the values, and the values are affine in what the block reads
    (the plan's attn_in_norm of X, a norm per token: `layer_norm_parts`): with x_k = sum_j p_kj +
    b_k, part j of the output at query i is sum_h sum_k alpha^h_ik p_kj W_V^h W_O^h, and the
    bias gets sum_h sum_k alpha^h_ik (b_k W_V^h + b_V^h) W_O^h + b_O.
    alpha [B, H, n, n] -> (parts [B, n, m, d], bias [B, n, d]). `recorded`: as in
    `carried_stages`.
    """
    parts, bias = _normed(carried.parts, carried.bias, layer.plan.attn_in_norm, recorded, "ln_attn")
    B, H, n, _ = alpha.shape
    G = layer.n_kv_heads
    alpha = alpha.reshape(B, G, H // G, n, n)  # query heads grouped by their key/value head
    W_O = layer.W_O.reshape(G, H // G, *layer.W_O.shape[1:])
    values = torch.einsum("bkjd,gde->bgkje", parts, layer.W_V)  # [B, G, n (k), m (j), d']
    mixed = torch.einsum("bgrik,bgkje->bgrije", alpha, values)
    del values
    out = torch.einsum("bgrije,gred->bijd", mixed, W_O)
    del mixed
    bias_values = torch.einsum("bkd,gde->bgke", bias, layer.W_V) + layer.b_V[None, :, None]
    out_bias = torch.einsum("bgrik,bgke,gred->bid", alpha, bias_values, W_O) + layer.b_O
    return out, out_bias


@dataclass(frozen=True)
class LayerInput:
    """One layer at one input, what both walks over its `BlockPlan` read: X [B, n, d] the
    layer input (hidden/{l}), mask [B, n], the canonical `layer`, `closing_ln` (where the layer
    ends on the stream (pre-LN), the norm that reads its output next: `closing_layer_norm`;
    None where the next layer reads the stream itself; unused where the layer's own output
    norm closes it, post-LN) and `ig_steps` (the FF split, 0: closed form). Its attention
    weights, value vectors and the FF's head vectors are computed once, on first use, and
    shared by every query chunk and every split decomposed at this input."""

    X: torch.Tensor
    mask: torch.Tensor
    layer: CanonicalLayer
    closing_ln: CanonicalLayerNorm | None = None
    ig_steps: int = 0
    head_memo: dict = field(default_factory=dict, compare=False, repr=False)  # `HeadFactors`

    @cached_property
    def alpha(self) -> torch.Tensor:
        """The attention weights.  [B, H, n, n]"""
        return attention_probs(self.X, self.mask, self.layer)

    @cached_property
    def fx(self) -> torch.Tensor:
        """f^h(x_j), the value vectors through W_O.  [B, H, n, d]"""
        return value_vectors(self.X, self.layer)

    @cached_property
    def fx_post(self) -> torch.Tensor:
        """fx through the gamma (and centring) of a norm on the attention block's output:
        the factored form of the normed parts.  [B, H, n, d]"""
        post = self.layer.plan.attn_out_norm
        return post.gamma * post.centre(self.fx)


def factored_stages(at: LayerInput, queries: tuple[int, int] | None = None) -> Iterator[Stage]:
    """Yield the six vector stages of one layer split by the tokens of its own input (x_i is
    the one part at j = i), in module order (the module docstring); the AttnResLn stage also
    in factored form (`HeadFactors`), which the FF reads. A yielded stage's tensors may be
    modified by the next step: use them (norms, sums) before advancing.

    `queries` (i0, i1): decompose only those queries (parts [B, i1 - i0, n, d]; the module
    docstring's Memory); every query by default. The query chunks of one `at` share its
    attention, value vectors and FF head vectors.
    """
    plan, layer = at.layer.plan, at.layer
    q0, q1 = (0, at.X.shape[1]) if queries is None else queries
    alpha, fx, Xq = at.alpha[:, :, q0:q1], at.fx, at.X[:, q0:q1]
    parts = attention_parts(alpha, fx)
    bias = layer.b_O.expand_as(Xq).clone()
    if plan.attn_out_norm is not None:  # sandwich / OLMo-2: a norm on the block's output
        s_post = plan.attn_out_norm.scale(parts.sum(2) + bias)
        parts, bias = layer_norm_parts(parts, bias, plan.attn_out_norm, s_post)
        alpha, fx = alpha / s_post[:, None], at.fx_post  # the factored form of the normed parts
    yield Stage("Attn", parts, bias, offset=q0)
    parts = add_residual(parts, Xq, q0)
    residual = Stage("AttnRes", parts, bias, offset=q0)  # the residual around the FF ...
    yield residual
    if plan.ff_reads_block_input:  # parallel residual: the FF reads (its norm of) X, whose
        alpha, fx = alpha[:, :0], fx[:, :0]  # parts are the tokens themselves
        parts = add_residual(torch.zeros_like(parts), Xq, q0)
        bias = torch.zeros_like(bias)
    ln = plan.ff_in_norm
    if ln is None:  # OLMo-2: the FF reads the stream itself
        ones = torch.ones_like(Xq[..., :1])
        factors = HeadFactors(
            alpha, fx, Xq, torch.ones_like(at.X[0, 0]), ones, False, q0, at.head_memo
        )
    else:
        scale = ln.scale(parts.sum(2) + bias)
        factors = HeadFactors(alpha, fx, Xq, ln.gamma, scale, ln.centred, q0, at.head_memo)
        parts, bias = layer_norm_parts(parts, bias, ln, scale)
    read = Stage("AttnResLn", parts, bias, factors, q0)
    if plan.residual_is_ff_input:  # ... or the FF's input (post-LN: AttnResLn)
        residual = read
    yield read
    tail = _feed_forward_stages(at, read, residual, q0)
    del parts, bias, factors, alpha, fx, read, residual  # the tail holds what it needs
    yield from tail


def carried_stages(
    at: LayerInput, carried: Carried, recorded: TokenFactors | None = None
) -> Iterator[Stage]:
    """Yield the six vector stages of one layer for a split of its input X into parts of m
    sources (`Carried`, e.g. the input tokens carried from the embeddings): parts
    [B, n, m, d]. Attention mixes every part through W_V W_O (`carried_attention`); the norms'
    scales and the FF's IG coefficients depend only on each token's total, so the split is
    exact. A yielded stage's tensors may be modified by the next step.

    `recorded`: the per-token quantities (`TokenFactors`): each missing one is computed from
    the stage's total and recorded, each present one used as it is. So a split of only some
    sources (a chunk of the input tokens, whose parts do not sum to the state) is decomposed
    exactly after a decomposition of the whole state (one source: the state itself) with the
    same `recorded`. Their bias is then the chunk's own image of its bias plus every
    constant term (b_O, beta, b_V, FF biases) once more.
    """
    plan = at.layer.plan
    parts, bias = carried_attention(at.alpha, carried, at.layer, recorded)
    parts, bias = _normed(parts, bias, plan.attn_out_norm, recorded, "post_attn")
    yield Stage("Attn", parts, bias)
    parts, bias = parts.add_(carried.parts), bias + carried.bias
    residual = Stage("AttnRes", parts, bias)  # the residual around the FF ...
    yield residual
    if plan.ff_reads_block_input:  # parallel residual: the FF reads (its norm of) X
        parts, bias = carried.parts, carried.bias
    parts, bias = _normed(parts, bias, plan.ff_in_norm, recorded, "ln_ff")
    read = Stage("AttnResLn", parts, bias)  # a carried split has no factored form
    if plan.residual_is_ff_input:  # ... or the FF's input (post-LN: AttnResLn)
        residual = read
    yield read
    tail = _feed_forward_stages(at, read, residual, -carried.first, recorded)
    del parts, bias, read, residual  # the tail holds what it needs
    yield from tail


def _feed_forward_stages(
    at: LayerInput,
    read: Stage,
    residual: Stage,
    offset: int,
    recorded: TokenFactors | None = None,
) -> Iterator[Stage]:
    """The last three stages of either walk: the FF block on what it reads (`read`, the
    AttnResLn stage), its residual sum (with `residual`'s parts) and the closing norm.
    `offset`: `feed_forward_parts`' (the first query's position minus the first key's). The
    AttnResLnFf stage carries the real FF output (`Stage.ff_real`)."""
    layer, plan = at.layer, at.layer.plan
    linearised = None
    if recorded is not None:

        def linearise(total):
            return linearise_ff(total, layer, at.ig_steps)

        linearised = recorded.get("ff", read.parts, read.bias, linearise)
    ff_parts, ff_bias, ff_real = feed_forward_parts(
        read.parts, read.bias, layer, at.ig_steps, read.factors, offset, linearised
    )
    del read
    ff_parts, ff_bias = _normed(ff_parts, ff_bias, plan.ff_out_norm, recorded, "post_ff")
    ff_real = through(plan.ff_out_norm, ff_real)
    yield Stage("AttnResLnFf", ff_parts, ff_bias, offset=residual.offset, ff_real=ff_real)
    parts = ff_parts.add_(residual.parts)
    bias = ff_bias + residual.bias
    offset = residual.offset
    del residual
    yield Stage("AttnResLnFfRes", parts, bias, offset=offset)
    closing = at.closing_ln if plan.ends_on_stream else plan.output_norm
    parts, bias = _normed(parts, bias, closing, recorded, "closing")
    yield Stage("AttnResLnFfResLn", parts, bias, offset=offset)


def closing_layer_norm(layers: list[CanonicalLayer], final_ln, index: int):
    """The norm that reads layer `index`'s output next where the layer ends on the stream
    (pre-LN): the next layer's attn_in_norm (None where that layer reads the stream itself,
    OLMo-2) or the final norm after the last layer. None where the layer's own output norm
    closes it (post-LN)."""
    if not layers[index].plan.ends_on_stream:
        return None
    return layers[index + 1].plan.attn_in_norm if index + 1 < len(layers) else final_ln


def stream_scope(plan: BlockPlan) -> str:
    """The stage that is the residual stream state X_{l+1}: the residual sum where the layer
    ends on the stream (pre-LN), its output norm otherwise (post-LN)."""
    return "AttnResLnFfRes" if plan.ends_on_stream else "AttnResLnFfResLn"


def reference_outputs(
    X: torch.Tensor,
    y_attention: torch.Tensor,
    layer: CanonicalLayer,
    closing_ln: CanonicalLayerNorm | None,
    X_next: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """The real output of every stage, from the attention module's own output `y_attention`
    [B, n, d] (Architecture.attention_output; a norm on the block's output is applied here)
    and the canonical norm/FF recomputation; the last residual stream state is the stored
    next hidden state `X_next` when given. The layer's `BlockPlan` read step by step, as
    `attention.layer_forward` reads it (`block_steps`)."""
    plan = layer.plan
    a = through(plan.attn_out_norm, y_attention)
    h, ff_in, f, r = block_steps(X, a, layer)
    if plan.ends_on_stream:  # X_{l+1} = r, which closing_ln reads next
        r = r if X_next is None else X_next
        last = through(closing_ln, r)
    else:  # X_{l+1} = output_norm(r)
        last = plan.output_norm(r) if X_next is None else X_next
    return dict(zip(VECTOR_SCOPES, (a, h, ff_in, f, r, last), strict=True))
