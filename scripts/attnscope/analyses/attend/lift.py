"""What lifts the keys a head attends to above the rest (issue #36): the component split of
`maps.attend` summed over query rows, without its [n, n, C, C] terms.

Softmax ignores what is equal for every key a row sees, so for query row i, its visible keys
V_i and a weighting w_i of them (summing to 1), what decides where it looks is

    lift_i(c, c') = sum_j w_ij T_ij(c, c') - mean_{j in V_i} T_ij(c, c')

for query-side component c and key-side component c' (`maps.attend`: T_ij(c, c') = scale
q_i(c) . k_j(c')). The terms are bilinear, so with W = w - u (u_ij = 1 / |V_i| on V_i)

    lift_i(c, c') = scale q_i(c) . dk_i(c'),      dk_i(c') = sum_j W_ij k_j(c'),

at a cost of C n^2 d' + C^2 n d' per head and weighting instead of n^2 C^2 (the pairs,
`lift_sums`), and of C n d' + n^2 d' for the sums over one side's components (the
marginals). Summed over c and c' it is sum_j W_ij s_ij, the row's logit at those keys above
its mean over V_i (logit units).

The weightings (`key_weights`), each on the keys of V_i only:
    attended   w = alpha, the head's own weights
    first      the first position (the sink of decoders, [CLS] of encoders)
    previous   key i - 1;   self: key i
    CLS, SEP, punct   (encoders) uniform over the row's keys of that category
                      (`core.tokens`; Clark et al.'s categories)
    induction  the keys j whose previous piece is the query's piece (ids[j - 1] = ids[i],
               j - 1 != i): where an induction head looks (Olsson et al. 2022)
    duplicate  the keys j holding the query's piece (ids[j] = ids[i], j != i): where a
               duplicate-token head looks (Wang et al. 2022)
A row counts for a weighting when it sees at least two keys and at least one of the class.
Per rotary band b (`canonical.rotary_bands`), over all components: scale q_i[b] . dk_i[b].
"""

from __future__ import annotations

import torch

from attnscope.core.tokens import CATEGORY_NAMES, CLS, PUNCT, SEP

POSITION_CLASSES = ("first", "previous", "self")
CATEGORY_CLASSES = {CATEGORY_NAMES[c]: c for c in (CLS, SEP, PUNCT)}
TOKEN_CLASSES = ("induction", "duplicate")
ATTENDED = "attended"


def key_classes(causal: bool) -> list[str]:
    """The key classes of a layer: the positional ones, Clark's categories for encoders, and
    the token classes (induction, duplicate) last."""
    return [*POSITION_CLASSES, *([] if causal else CATEGORY_CLASSES), *TOKEN_CLASSES]


def token_members(ids: torch.Tensor) -> dict[str, torch.Tensor]:
    """The token classes of every query row (module docstring), visible or not.  ids [n] ->
    {name: [n, n] bool, query i x key j}"""
    n = ids.shape[0]
    at = torch.arange(n, device=ids.device)
    same = ids[:, None] == ids[None, :]  # ids[i] = ids[j]
    before = torch.zeros_like(same)
    before[:, 1:] = same[:, :-1]  # ids[i] = ids[j - 1]
    return {
        "induction": before & (at[None, :] - 1 != at[:, None]),
        "duplicate": same & (at[None, :] != at[:, None]),
    }


def key_weights(alpha: torch.Tensor, visible: torch.Tensor, pieces: dict, causal):
    """The weightings of every head (module docstring) as W = w - u, zero on rows that do not
    count, and which rows count.  alpha [H, n, n], visible [n, n] bool, pieces {"category":
    [n], "ids": [n]} (`core.tokens` categories, piece ids) -> names [ATTENDED,
    *key_classes], W [H, K, n, n], rows [K, n] bool"""
    n = visible.shape[0]
    at = torch.arange(n, device=visible.device)
    members = {
        "first": at[None, :] == 0,
        "previous": at[None, :] == at[:, None] - 1,
        "self": at[None, :] == at[:, None],
    }
    for name, code in CATEGORY_CLASSES.items():
        members[name] = (pieces["category"] == code)[None, :]
    members |= token_members(pieces["ids"])
    names = key_classes(causal)
    member = torch.stack([members[name].expand(n, n) & visible for name in names])
    seen = visible.sum(-1)  # [n]
    rows = torch.cat([torch.ones(1, n, dtype=torch.bool), member.any(-1)]) & (seen >= 2)
    uniform = visible / seen.clamp_min(1)[:, None]
    classes = member / member.sum(-1, keepdim=True).clamp_min(1)
    w = torch.cat([alpha[:, None], classes[None].expand(alpha.shape[0], -1, -1, -1).to(alpha)], 1)
    W = (w - uniform) * rows[None, :, :, None]
    return [ATTENDED, *names], W, rows


def lift_sums(Q, K, W, scale: float, band: torch.Tensor) -> dict[str, torch.Tensor]:
    """The lift of every head and weighting summed over rows.  Q, K [H, C, n, d'] (q_i(c),
    k_j(c') of each head as `maps.attend` carries them; K with the key heads repeated for
    grouped-query attention), W [H, K, n, n] (`key_weights`, the attended keys first), band
    [d'] (`canonical.rotary_bands`) ->
        pairs  [H, K, C, C]  sum_i scale q_i(c) . dk_i(c') of every weighting
        query  [H, K, C]  sum_i scale q_i(c) . dk_i, dk_i summed over components
        key    [H, K, C]  sum_j scale (sum_i W_ij q_i) . k_j(c'), q_i summed over components
        bands  [H, K, B]  sum_i scale q_i[b] . dk_i[b], summed over components
    The pairs cost C n^2 d' + C^2 n d' per head and weighting (one weighting's dk [H, C, n, d']
    held at a time), the rest C n d' + n^2 d' per weighting."""
    H, C = Q.shape[:2]
    flat = Q.reshape(H, C, -1)
    pairs = pair_sums(Q, K, W)
    q, k = Q.sum(1), K.sum(1)  # [H, n, d']
    dk_sum = W @ k[:, None]  # [H, K, n, d']
    qw = W.transpose(-1, -2) @ q[:, None]  # sum_i W_ij q_i  [H, K, n, d']
    query = flat @ dk_sum.reshape(H, W.shape[1], -1).transpose(1, 2)  # [H, C, K]
    key = K.reshape(H, C, -1) @ qw.reshape(H, W.shape[1], -1).transpose(1, 2)
    per_dim = (q[:, None] * dk_sum).sum(2)  # [H, K, d']
    bands = torch.zeros(*per_dim.shape[:2], int(band.max()) + 1, dtype=q.dtype, device=q.device)
    bands.index_add_(2, band, per_dim)
    out = {"pairs": pairs, "query": query.transpose(1, 2), "key": key.transpose(1, 2)}
    return {name: value * scale for name, value in (out | {"bands": bands}).items()}


def pair_sums(Q: torch.Tensor, K: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """sum_i q_i(c) . dk_i(c') of every head, weighting and component pair, dk_i(c') =
    sum_j W_ij k_j(c') (`lift_sums` without its scale).  Q, K [H, C, n, d'], W [H, K, n, n]
    -> [H, K, C, C]. Both sides laid out dimension by dimension once ([C, d', n]), so that per
    weighting and head dk is one [C d', n] x [n, n] product (not C products [n, n] x [n, d'])
    and the pairs one [C, d' n] x [d' n, C]."""
    H, C, n, d = Q.shape
    q_by_dim = Q.transpose(-1, -2).reshape(H, C, d * n)  # q_i(c)[e] at column e n + i
    k_by_dim = K.transpose(-1, -2).reshape(H, C * d, n)  # k_j(c')[e] in row c' d' + e
    pairs = []
    for k in range(W.shape[1]):
        dk = (k_by_dim @ W[:, k].transpose(-1, -2)).view(H, C, d * n)  # dk_i(c')[e]
        pairs.append(q_by_dim @ dk.transpose(1, 2))
    return torch.stack(pairs, 1)


def row_lifts(logits: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """The lift of every row straight from the logits: sum_j W_ij s_ij.  logits [H, n, n],
    W [H, K, n, n] -> [H, K, n] (summed over rows: the check of the sums)"""
    return (W * logits[:, None]).sum(-1)
