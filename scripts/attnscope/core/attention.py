"""Recompute a layer's attention from its stored input X_l, in canonical form.

Shapes: X [B, n, d] (the hidden state layer l reads, `hidden/{l}` of the store),
mask [B, n] (1 = real token), alpha [B, H, n, n] (query i, key j), values
f^h(x_j) [B, H, n, d].

Where the layer's plan has an input norm (pre-LN), the attention block reads its norm of X;
`attention_input` applies it, so "x" in f(x) is always what the attention block actually
reads. Queries and keys follow the module: projection, QK-norm, rotation by position; keys
and values of a grouped-query model are shared by the query heads of their group (returned
repeated, one per query head).
"""

from __future__ import annotations

import torch

from attnscope.core.canonical import CanonicalLayer


def attention_input(X: torch.Tensor, layer: CanonicalLayer) -> torch.Tensor:
    """What the attention block reads: the plan's attn_in_norm of X (pre-LN), X itself where
    there is none (post-LN, OLMo-2).  [B, n, d]"""
    return through(layer.plan.attn_in_norm, X)


def repeat_kv(t: torch.Tensor, layer: CanonicalLayer) -> torch.Tensor:
    """Key/value heads repeated for the query heads sharing them.  [B, H_kv, ..] -> [B, H, ..]"""
    groups = layer.n_heads // layer.n_kv_heads
    return t if groups == 1 else t.repeat_interleave(groups, dim=1)


def _project(x: torch.Tensor, W: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """x [B, n, d] -> heads [B, H, n, d']."""
    return torch.einsum("bnd,hde->bhne", x, W) + b[None, :, None, :]


def _qk_norm(t: torch.Tensor, norm, whole: bool) -> torch.Tensor:
    """QK-norm per head ([d'] weights) or over the whole projection ([H d'] weights)."""
    if norm is None:
        return t
    if not whole:
        return norm(t)
    B, H, n, e = t.shape
    flat = t.transpose(1, 2).reshape(B, n, H * e)
    return norm(flat).reshape(B, n, H, e).transpose(1, 2)


def queries_keys(X: torch.Tensor, layer: CanonicalLayer, rotate: bool = True):
    """Per-head queries and keys as the scores read them: biases, QK-norm and (`rotate`) the
    rotation by position included; keys repeated per query head.  Each [B, H, n, d']."""
    x = attention_input(X, layer)
    q = _qk_norm(_project(x, layer.W_Q, layer.b_Q), layer.q_norm, layer.qk_norm_whole)
    k = _qk_norm(_project(x, layer.W_K, layer.b_K), layer.k_norm, layer.qk_norm_whole)
    if rotate and layer.rotary is not None:
        q, k = layer.rotary.rotate(q), layer.rotary.rotate(k)
    return q, repeat_kv(k, layer)


def visible_pairs(
    mask: torch.Tensor, causal: bool, sliding_window: int | None = None
) -> torch.Tensor:
    """Whether query i sees key j: both real tokens, j <= i when causal, and i - j < w within a
    sliding window w.  [B, n] -> [B, n, n]"""
    real = mask.bool()
    pairs = real[:, :, None] & real[:, None, :]
    n = mask.shape[-1]
    if causal:
        pairs &= torch.ones(n, n, dtype=torch.bool, device=mask.device).tril()
    if sliding_window is not None:
        pairs &= torch.ones(n, n, dtype=torch.bool, device=mask.device).triu(1 - sliding_window)
    return pairs


def layer_visible_pairs(mask: torch.Tensor, layer: CanonicalLayer) -> torch.Tensor:
    """`visible_pairs` for one layer's mask (causal, sliding window).  [B, n] -> [B, n, n]"""
    return visible_pairs(mask, layer.causal, layer.sliding_window)


def additive_mask(mask: torch.Tensor, causal: bool, dtype: torch.dtype, window=None):
    """[B, 1, n, n] additive mask: 0 where key j is visible to query i, dtype min elsewhere."""
    visible = visible_pairs(torch.ones_like(mask), causal, window) & mask[:, None, :].bool()
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    return torch.where(visible[:, None], zero, torch.finfo(dtype).min)


def attention_scores(X: torch.Tensor, layer: CanonicalLayer) -> torch.Tensor:
    """The logits before the mask: q_i k_j^T * scale, soft-capped where the model caps.
    [B, H, n, n]"""
    q, k = queries_keys(X, layer)
    scores = torch.einsum("bhie,bhje->bhij", q, k).mul_(layer.scale)
    if layer.softcap is not None:
        scores = torch.tanh(scores / layer.softcap) * layer.softcap
    return scores


def attention_probs(X: torch.Tensor, mask: torch.Tensor, layer: CanonicalLayer) -> torch.Tensor:
    """alpha^h_ij = softmax_j(scores_ij) over visible keys.  [B, H, n, n]

    Rows of padding queries are defined but meaningless; ignore them with `mask`.
    Without autograd the softmax overwrites the scores one head at a time, so the only
    [B, H, n, n] tensor is alpha itself (one head's [B, n, n] beside it).
    """
    scores = attention_scores(X, layer)
    scores += additive_mask(mask, layer.causal, scores.dtype, layer.sliding_window)
    if torch.is_grad_enabled():
        return torch.softmax(scores, dim=-1)
    for h in range(scores.shape[1]):
        scores[:, h] = torch.softmax(scores[:, h], dim=-1)
    return scores


def head_values(X: torch.Tensor, layer: CanonicalLayer) -> torch.Tensor:
    """v^h_j = x_j W_V^h + b_V^h, each head's value of token j (W_V of its key/value head,
    repeated per query head).  [B, H, n, d']"""
    return repeat_kv(_project(attention_input(X, layer), layer.W_V, layer.b_V), layer)


def value_vectors(X: torch.Tensor, layer: CanonicalLayer, v: torch.Tensor | None = None):
    """f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h, the vector head h moves from token j (W_V of its
    key/value head); `v`: `head_values(X, layer)` where the caller has them.  [B, H, n, d]"""
    v = head_values(X, layer) if v is None else v
    return torch.einsum("bhne,hed->bhnd", v, layer.W_O)


def head_outputs(alpha: torch.Tensor, v: torch.Tensor, layer: CanonicalLayer) -> torch.Tensor:
    """z^h_i = sum_j alpha^h_ij f^h(x_j) = (sum_j alpha^h_ij v^h_j) W_O^h, each head's output
    (no b_O), from the values `v` [B, H, n, d'] (`head_values`): n^2 d' + n d' d products per
    head instead of the n^2 d of weighting f(x) itself.  [B, H, n, d]"""
    return torch.einsum("bhne,hed->bhnd", alpha @ v, layer.W_O)


def attention_output(alpha: torch.Tensor, fx: torch.Tensor, layer: CanonicalLayer):
    """y_i = sum_h sum_j alpha^h_ij f^h(x_j) + b_O, the attention block's output.  [B, n, d]"""
    return torch.einsum("bhij,bhjd->bid", alpha, fx) + layer.b_O


def through(norm, x: torch.Tensor) -> torch.Tensor:
    """x through `norm`, or x itself where the layer has no norm there (None)."""
    return x if norm is None else norm(x)


def attention_block(X: torch.Tensor, mask: torch.Tensor, layer: CanonicalLayer) -> torch.Tensor:
    """What the attention block adds to the residual stream: y through the plan's
    attn_out_norm (y itself where there is none).  [B, n, d]"""
    y = attention_output(attention_probs(X, mask, layer), value_vectors(X, layer), layer)
    return through(layer.plan.attn_out_norm, y)


def feed_forward(h: torch.Tensor, layer: CanonicalLayer) -> torch.Tensor:
    """FF(h) as the layer's feed-forward computes it (no norms).  [B, n, d]"""
    return layer.ff(h)


def layer_forward(
    X: torch.Tensor, mask: torch.Tensor, layer: CanonicalLayer, attention: torch.Tensor = None
):
    """The whole layer recomputed from canonical weights, its `BlockPlan` read step by step
    (`block_steps`): X_l -> X_{l+1}.  [B, n, d]
    `attention`: the attention block's output (`attention_block`) when the caller computed it
    (to keep its attention weights), else computed here."""
    a = attention_block(X, mask, layer) if attention is None else attention
    return through(layer.plan.output_norm, block_steps(X, a, layer)[-1])


def block_steps(X: torch.Tensor, a: torch.Tensor, layer: CanonicalLayer):
    """The layer's `BlockPlan` after its attention block, from X [B, n, d] and the block's
    output a (`attention_block`: after its output norm): (h = X + a, ff_in, f = the FF block's
    output after its norm, r = the residual sum before the output norm).  Each [B, n, d]"""
    plan = layer.plan
    h = X + a
    ff_in = through(plan.ff_in_norm, X if plan.ff_reads_block_input else h)
    f = through(plan.ff_out_norm, layer.ff(ff_in))
    return h, ff_in, f, (ff_in if plan.residual_is_ff_input else h) + f
