"""Role scores on the repeated corpus (kind repeated_random: START r r) and the in-context
loss, from the stored hidden states: each layer's attention recomputed from its stored input
(`core.attention.attention_probs`), one layer and one batch at a time.

With length m, the second copy starts at s = 1 + m; its query s + k holds the piece of position
1 + k. Per head, the mean over every sequence's queries (pooled) of:
    induction       alpha[s + k, 2 + k], k = 0..m-1: the piece after the first occurrence
    duplicate       alpha[s + k, 1 + k], k = 0..m-1: the first occurrence itself
    previous_token  alpha[i, i - 1],     i = 1..2m: every piece but the start
In-context loss (a causal LM): the mean next-piece loss of the pieces r_1..r_{m-1} of the first
copy (positions 2..m) and of the same pieces of the second copy (s + 1..s + m - 1); r_0 is left
out of both (the first is unpredictable, the second follows r_{m-1}, never followed before).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from attnscope.core.attention import attention_probs
from attnscope.core.canonical import CanonicalModel
from attnscope.core.lm_head import cross_entropy, head_input
from attnscope.core.store import HiddenStates
from attnscope.core.tables import indexed_table

SCORES = ("induction", "duplicate", "previous_token")


def repeat_length(ids: np.ndarray, n: int) -> int:
    """m of a sequence START r r of n real pieces `ids`; ValueError when it is not one."""
    m = (n - 1) // 2
    if n != 1 + 2 * m or m < 2 or not np.array_equal(ids[1 : 1 + m], ids[1 + m : n]):
        raise ValueError(
            f"a sequence of {n} pieces is not START r r with r of 2 or more pieces: the heads "
            "family's corpus must be of kind repeated_random"
        )
    return m


def score_pairs(m: int) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{score: (queries, keys)} 0-based positions of START r r with |r| = m."""
    s, k = 1 + m, np.arange(m)
    every = np.arange(1, 1 + 2 * m)
    return {
        "induction": (s + k, 2 + k),
        "duplicate": (s + k, 1 + k),
        "previous_token": (every, every - 1),
    }


class RepeatScores:
    """Sums of the scores' weights per layer and head, and their query counts (float64)."""

    def __init__(self, n_layers: int, n_heads: int):
        self.sums = np.zeros((n_layers, n_heads, len(SCORES)))
        self.counts = np.zeros((n_layers, len(SCORES)))

    def add(self, layer: int, alpha: torch.Tensor, ids: np.ndarray, lengths: np.ndarray) -> None:
        """alpha [B, H, n, n] of 0-based `layer`; ids [B, n]; lengths [B] real pieces."""
        for b, n in enumerate(lengths):
            pairs = score_pairs(repeat_length(ids[b], int(n)))
            for c, name in enumerate(SCORES):
                q, k = (torch.from_numpy(p).to(alpha.device) for p in pairs[name])
                self.sums[layer, :, c] += alpha[b][:, q, k].double().sum(-1).cpu().numpy()
                self.counts[layer, c] += len(q)

    def table(self) -> pd.DataFrame:
        """`layer head induction duplicate previous_token n_queries` (n_queries: induction's)."""
        L, H, _ = self.sums.shape
        with np.errstate(invalid="ignore", divide="ignore"):
            means = self.sums / self.counts[:, None, :]
        values = {name: means[..., c] for c, name in enumerate(SCORES)}
        values["n_queries"] = np.repeat(self.counts[:, :1], H, axis=1).astype(int)
        return indexed_table(values, layer=L, head=H)


def role_scores(
    store: HiddenStates, weights: CanonicalModel, batch_size: int, device: str = "cpu"
) -> pd.DataFrame:
    """The `RepeatScores` table of the store's analysed layers (rows of the others NaN)."""
    found = RepeatScores(weights.n_layers, weights.n_heads)
    for l in store.layers:
        layer = weights.layers[l]
        for batch in store.batches(l, batch_size, device):
            with torch.no_grad():
                alpha = attention_probs(batch.X, batch.mask, layer)
            lengths = batch.mask.sum(-1).cpu().numpy()
            found.add(l, alpha, batch.input_ids, lengths)
    return found.table()


def loss_positions(m: int) -> tuple[np.ndarray, np.ndarray]:
    """(first, second): the 0-based positions whose next piece is predicted in each copy."""
    k = np.arange(1, m)
    return k, 1 + m + k - 1


def in_context_loss(store: HiddenStates, head, final_ln, batch_size: int, device: str = "cpu"):
    """`loss_first loss_second loss_drop n_sequences n_predictions`: the mean next-piece loss
    (nats) on each copy, from the last stored state through the LM `head` (and `final_ln`),
    the vocabulary in chunks (`core.lm_head.cross_entropy`: no [B, n, V] logits)."""
    totals, count = np.zeros(2), 0
    for batch in store.batches(store.n_layers, batch_size, device):
        for b, n in enumerate(batch.mask.sum(-1).cpu().numpy()):
            m = repeat_length(batch.input_ids[b], int(n))
            for c, rows in enumerate(loss_positions(m)):
                targets = torch.from_numpy(batch.input_ids[b, rows + 1].astype(np.int64))
                X = batch.X[b, torch.from_numpy(rows)]
                with torch.no_grad():
                    h = head_input(head, final_ln, X)
                    losses = cross_entropy(head, h, targets.to(X.device))
                totals[c] += float(losses.double().sum())
            count += m - 1
    first, second = totals / max(count, 1)
    return pd.DataFrame(
        {
            "loss_first": [first],
            "loss_second": [second],
            "loss_drop": [first - second],
            "n_sequences": [store.n_sequences],
            "n_predictions": [count],
        }
    )
