"""The language-model head over the vocabulary, in chunks: memory bounded whatever V.

A head (`canonical.PredictionHead`) turns the last state X_L [.., d] into logits over the
vocabulary [.., V]. Built whole for a batch, they are B n V numbers: Gemma-3's 262,144 pieces
for 16 sequences of 128 make 2 GiB in float32 (4 GiB in float64), however small the model. So
the losses and predictions here build them for a chunk of positions (and, where one row alone
is too large, of the vocabulary) at a time, `CHUNK_BYTES` of float32 logits per chunk (of
rows x the whole vocabulary; `chunk_shape`), and carry a running log-sum-exp in float32:

    lse_i = m_i + log sum_v exp(z_iv - m_i)   (m_i the running maximum over the chunks seen)
    CE_i  = lse_i - z_i,t                     (t the target piece)

Under autograd each chunk of positions is checkpointed (`torch.utils.checkpoint`): its
logits are rebuilt in the backward instead of being kept, so a backward through the loss
holds one chunk's logits too (`cross_entropy`).
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from attnscope.core.attention import through
from attnscope.core.canonical import CanonicalLayerNorm, PredictionHead

CHUNK_BYTES = 64 * 2**20  # float32 logits per chunk (rows x columns x 4 bytes)


def head_input(
    head: PredictionHead, final_ln: CanonicalLayerNorm | None, X: torch.Tensor
) -> torch.Tensor:
    """What the unembedding reads: X_L [.., d] through the final norm and a masked-LM head's
    transform and LayerNorm.  [.., d_e]"""
    h = through(final_ln, X)
    return h if head.transform is None else through(head.ln, head.transform(h))


def unembed(head: PredictionHead, h: torch.Tensor, columns=slice(None)) -> torch.Tensor:
    """The logits of the vocabulary `columns` (a slice, or token ids) from the unembedding's
    input h [.., d_e]: multiplier, bias and soft-cap included.  [.., |columns|]"""
    W = head.W_U[:, columns].to(h.dtype)
    z = (h @ W + head.b_U[columns].to(h.dtype)) * head.multiplier
    return z if head.softcap is None else torch.tanh(z / head.softcap) * head.softcap


def head_logits(
    head: PredictionHead, final_ln: CanonicalLayerNorm | None, X: torch.Tensor
) -> torch.Tensor:
    """Every logit of the head from X_L [.., d], whole: only for a few positions (a
    prediction's), never a batch's every position (`cross_entropy` for a loss).  [.., V]"""
    return unembed(head, head_input(head, final_ln, X))


def chunk_shape(V: int, d: int, chunk_bytes: int = CHUNK_BYTES) -> tuple[int, int]:
    """(rows, columns) of one chunk of float32 logits: as many rows as fit `chunk_bytes` with
    the whole vocabulary (at least one: a backward rebuilds a chunk of rows whole), and of the
    vocabulary as many columns as keep both the chunk's logits and the float32 slice of W_U
    [d, columns] within it."""
    rows = max(1, chunk_bytes // (4 * V))
    return rows, max(1, min(V, chunk_bytes // (4 * d), chunk_bytes // (4 * rows)))


def at_least_float32(h: torch.Tensor) -> torch.Tensor:
    """h in float32, or kept in float64: a 16-bit model's logits are summed in float32."""
    return h.to(torch.promote_types(h.dtype, torch.float32))


def log_sum_exp(head: PredictionHead, h: torch.Tensor, columns: int) -> torch.Tensor:
    """log sum_v exp(z_v) over the whole vocabulary, `columns` pieces at a time, in float32 with
    a running maximum (float64 for float64 h).  h [P, d_e] -> [P]"""
    V = head.W_U.shape[1]
    h = at_least_float32(h)
    m = h.new_full(h.shape[:1], -torch.inf)
    s = h.new_zeros(h.shape[:1])
    for first in range(0, V, columns):
        z = unembed(head, h, slice(first, first + columns))
        top = torch.maximum(m, z.max(-1).values)
        s = s * torch.exp(m - top) + torch.exp(z - top[:, None]).sum(-1)
        m = top
    return m + torch.log(s)


def _rows_cross_entropy(h: torch.Tensor, targets: torch.Tensor, head, columns: int):
    """CE of one chunk of rows: h [p, d_e], targets [p] -> [p]"""
    h = at_least_float32(h)
    target_logit = (h * head.W_U.T[targets].to(h.dtype)).sum(-1) + head.b_U[targets].to(h.dtype)
    target_logit = target_logit * head.multiplier
    if head.softcap is not None:
        target_logit = torch.tanh(target_logit / head.softcap) * head.softcap
    return log_sum_exp(head, h, columns) - target_logit


def cross_entropy(
    head: PredictionHead, h: torch.Tensor, targets: torch.Tensor, chunk_bytes: int = CHUNK_BYTES
) -> torch.Tensor:
    """-log softmax(logits)[target] at P positions from the unembedding's input h [P, d_e]
    (`head_input`), targets [P] token ids, in nats: float32 (float64 for float64 h), the
    logits built one chunk at a time (`chunk_shape`). Differentiable in h: under autograd
    each chunk of rows is checkpointed, so the backward rebuilds its logits instead of
    keeping them.  [P]"""
    rows, columns = chunk_shape(head.W_U.shape[1], head.W_U.shape[0], chunk_bytes)
    grad = torch.is_grad_enabled() and h.requires_grad
    out = []
    for first in range(0, len(h), rows):
        part = h[first : first + rows], targets[first : first + rows]
        if grad:
            out.append(checkpoint(_rows_cross_entropy, *part, head, columns, use_reentrant=False))
        else:
            out.append(_rows_cross_entropy(*part, head, columns))
    return torch.cat(out) if out else at_least_float32(h).sum(-1)  # [0], in h's graph


def sequence_losses(
    head: PredictionHead, h: torch.Tensor, labels: torch.Tensor, chosen: torch.Tensor
) -> torch.Tensor:
    """Mean cross-entropy over each sequence's chosen positions (masked pieces, or those
    predicting the next piece), 0 for a sequence with none; only the chosen positions'
    logits are built (`cross_entropy`).  h [B, n, d_e], labels, chosen [B, n] -> [B]"""
    rows = chosen.nonzero(as_tuple=True)[0]
    ce = cross_entropy(head, h[chosen], labels[chosen])
    total = ce.new_zeros(len(h)).index_add(0, rows, ce)
    return total / chosen.sum(-1).clamp_min(1)
