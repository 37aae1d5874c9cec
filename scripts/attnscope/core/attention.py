"""Recompute a layer's attention from its stored input X_l, in canonical form.

Shapes: X [B, n, d] (the hidden state layer l reads, `hidden/{l}` of the store),
mask [B, n] (1 = real token), alpha [B, H, n, n] (query i, key j), values
f^h(x_j) [B, H, n, d].

For pre-LN models (GPT-2) the attention block reads LN(X); `attention_input` applies it,
so "x" in f(x) is always what the attention block actually reads.
"""

from __future__ import annotations

import torch

from attnscope.core.canonical import CanonicalLayer


def attention_input(X: torch.Tensor, layer: CanonicalLayer) -> torch.Tensor:
    """What the attention block reads: LN(X) for pre-LN, X for post-LN.  [B, n, d]"""
    return layer.ln_attn(X) if layer.pre_ln else X


def queries_keys(X: torch.Tensor, layer: CanonicalLayer):
    """Per-head queries and keys, biases included.  Each [B, H, n, d']."""
    x = attention_input(X, layer)
    q = torch.einsum("bnd,hde->bhne", x, layer.W_Q) + layer.b_Q[None, :, None, :]
    k = torch.einsum("bnd,hde->bhne", x, layer.W_K) + layer.b_K[None, :, None, :]
    return q, k


def visible_pairs(mask: torch.Tensor, causal: bool) -> torch.Tensor:
    """Whether query i sees key j: both real tokens, and j <= i when causal.  [B, n] -> [B, n, n]"""
    real = mask.bool()
    pairs = real[:, :, None] & real[:, None, :]
    if causal:
        n = mask.shape[-1]
        pairs &= torch.ones(n, n, dtype=torch.bool, device=mask.device).tril()
    return pairs


def additive_mask(mask: torch.Tensor, causal: bool, dtype: torch.dtype) -> torch.Tensor:
    """[B, 1, n, n] additive mask: 0 where key j is visible to query i, dtype min elsewhere."""
    n = mask.shape[-1]
    visible = mask[:, None, None, :].bool()
    if causal:
        lower = torch.ones(n, n, dtype=torch.bool, device=mask.device).tril()
        visible = visible & lower[None, None]
    zero = torch.zeros((), dtype=dtype, device=mask.device)
    return torch.where(visible, zero, torch.finfo(dtype).min)


def attention_probs(X: torch.Tensor, mask: torch.Tensor, layer: CanonicalLayer) -> torch.Tensor:
    """alpha^h_ij = softmax_j(q_i k_j^T * scale) over visible keys.  [B, H, n, n]

    Rows of padding queries are defined but meaningless; ignore them with `mask`.
    """
    q, k = queries_keys(X, layer)
    scores = torch.einsum("bhie,bhje->bhij", q, k) * layer.scale
    scores = scores + additive_mask(mask, layer.causal, scores.dtype)
    return torch.softmax(scores, dim=-1)


def value_vectors(X: torch.Tensor, layer: CanonicalLayer) -> torch.Tensor:
    """f^h(x_j) = (x_j W_V^h + b_V^h) W_O^h, the vector head h moves from token j.  [B, H, n, d]"""
    x = attention_input(X, layer)
    v = torch.einsum("bnd,hde->bhne", x, layer.W_V) + layer.b_V[None, :, None, :]
    return torch.einsum("bhne,hed->bhnd", v, layer.W_O)


def attention_output(alpha: torch.Tensor, fx: torch.Tensor, layer: CanonicalLayer):
    """y_i = sum_h sum_j alpha^h_ij f^h(x_j) + b_O, the attention block's output.  [B, n, d]"""
    return torch.einsum("bhij,bhjd->bid", alpha, fx) + layer.b_O


def feed_forward(h: torch.Tensor, layer: CanonicalLayer) -> torch.Tensor:
    """FF(h) = act(h W_in + b_in) W_out + b_out.  [B, n, d]"""
    return layer.activation(h @ layer.W_in + layer.b_in) @ layer.W_out + layer.b_out


def layer_forward(X: torch.Tensor, mask: torch.Tensor, layer: CanonicalLayer):
    """The whole layer recomputed from canonical weights: X_l -> X_{l+1}.  [B, n, d]"""
    y = attention_output(attention_probs(X, mask, layer), value_vectors(X, layer), layer)
    if layer.pre_ln:
        h = X + y
        return h + feed_forward(layer.ln_ff(h), layer)
    h = layer.ln_attn(X + y)
    return layer.ln_ff(h + feed_forward(h, layer))
