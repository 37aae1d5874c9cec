"""Does the t = -1 peak come from the position embeddings? (Yamamoto & Matsuzaki, end of
section 3.5; issue #36.) For models with learned absolute position embeddings, the tr_t
profile of each embedding term of a head's logits against the full logit's.

With the embedding output split into `embed.word` and `embed.position` (`maps.attend`; the
token-type part, every head, FF block and bias are the rest R), the logit of query i and
key j is

    s_ij = sum_{a, b in word, position} scale q_i(a) . k_j(b)  +  rest_ij,
    rest_ij = scale (q_i . k_j - q_i(E) . k_j(E)),   E = word + position,

with q_i, k_j summed over every component of the split. Per pair of terms the profile is
tr_t (`core.diagonals.diagonal_sums`: the sum over query rows i of the term at key i + t)
over the pairs the layer lets the query see (0 elsewhere: t > 0 of a causal layer), per
sequence; `logit` is the same of the module's own logits, so the five terms sum to it up
to rounding. The tables give the mean over sequences (logit units summed over rows, as the
position family's tr_t(Q S K^T) in xcov_sum.tsv).
"""

from __future__ import annotations

import torch

from attnscope.core.diagonals import diagonal_sums

OFFSETS = tuple(range(-10, 11))  # t = -10..10, the position family's default t_max
EMBED_PAIRS = (
    ("word", "word"),
    ("word", "position"),
    ("position", "word"),
    ("position", "position"),
)
REST, LOGIT = "rest", "logit"
PROFILES = (*(f"{q} x {k}" for q, k in EMBED_PAIRS), REST, LOGIT)
WORD, POSITION = "embed.word", "embed.position"


def has_learned_positions(components: list[str]) -> bool:
    """Whether the split has a learned position embedding component of its own."""
    return POSITION in components


def term_profiles(Q, K, logits, visible, scale: float, components: list[str]) -> torch.Tensor:
    """The tr_t profile of every entry of `PROFILES` for every head of one layer and one
    sequence.  Q, K [H, C, n, d'] (q_i(c), k_j(c') as `maps.attend` carries them, keys per
    query head), logits [H, n, n] (the module's, before the mask), visible [n, n] bool,
    components [C] (`embed.word` and `embed.position` among them) -> [H, P, T] over `OFFSETS`"""
    w, p = components.index(WORD), components.index(POSITION)
    side = {"word": w, "position": p}
    terms = [Q[:, side[a]] @ K[:, side[b]].transpose(-1, -2) for a, b in EMBED_PAIRS]
    q, k = Q.sum(1), K.sum(1)  # [H, n, d']
    qe, ke = Q[:, w] + Q[:, p], K[:, w] + K[:, p]
    rest = q @ k.transpose(-1, -2) - qe @ ke.transpose(-1, -2)
    split = torch.stack([*terms, rest], 1) * scale  # [H, 5, n, n]
    maps = torch.cat([split, logits[:, None]], 1) * visible
    return diagonal_sums(maps, OFFSETS)
