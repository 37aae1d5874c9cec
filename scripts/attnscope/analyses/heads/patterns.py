"""The small attention patterns of the atlas cards: every head's weights on a few pieces of
one natural sequence and of one repeated sequence, recomputed from the stored states.

natural   queries and keys: the first `pieces` pieces of the natural corpus's first sequence
repeated  queries: the first `pieces` pieces of the second copy (positions s..s + p - 1);
          keys: positions 0..p + 1 (START and the first copy's first p + 1 pieces), so that a
          duplicate-token head lights the diagonal below the first column and an induction head
          the diagonal next to it
"""

from __future__ import annotations

import numpy as np
import torch

from attnscope.analyses.heads.repeat_scores import repeat_length
from attnscope.core.attention import attention_probs
from attnscope.core.canonical import CanonicalModel
from attnscope.core.store import HiddenStates

DECIMALS = 3


def pattern(store: HiddenStates, weights: CanonicalModel, queries, keys, labels) -> dict:
    """{queries: labels, keys: labels, weights: [L][H][q][k] (None for a layer not stored)} of
    the store's first sequence; `labels(ids)` -> the pieces as text."""
    n = int(store.lengths[0])
    ids = store.input_ids[0, :n]
    maps = []
    for l in range(weights.n_layers):
        if l not in store.layers:
            maps.append(None)
            continue
        batch = store.batch(l, 0, 1, n)
        with torch.no_grad():
            alpha = attention_probs(batch.X, batch.mask, weights.layers[l])[0]
        block = alpha[:, queries][:, :, keys].cpu().numpy()
        maps.append(np.round(block.astype(float), DECIMALS).tolist())
    return {
        "queries": labels(ids[queries]),
        "keys": labels(ids[keys]),
        "query_positions": [int(q) for q in queries],
        "key_positions": [int(k) for k in keys],
        "weights": maps,
    }


def natural_pattern(store: HiddenStates, weights: CanonicalModel, pieces: int, labels) -> dict:
    """The first `pieces` pieces (at most the sequence) of the store's first sequence."""
    p = np.arange(min(pieces, int(store.lengths[0])))
    return pattern(store, weights, p, p, labels)


def repeated_pattern(store: HiddenStates, weights: CanonicalModel, pieces: int, labels) -> dict:
    """The second copy's first p pieces against positions 0..p + 1 (p at most |r| - 1)."""
    n = int(store.lengths[0])
    m = repeat_length(store.input_ids[0], n)
    p = min(pieces, m - 1)
    return pattern(store, weights, 1 + m + np.arange(p), np.arange(p + 2), labels)
