"""Attention-weight statistics per head (Clark et al. 2019, "What Does BERT
Look At?", section 3).

Every statistic reads one attention tensor alpha [B, H, n, n] (query i, key j) with its
mask [B, n] (1 = real token), token categories [B, n] (attnscope.core.tokens codes) and whether
the model is causal. Hand-made tensors can be fed directly, so known answers are testable.

Which rows count: real query rows that see at least two keys. For bidirectional models that
is every real token; for causal models (GPT-2) position 0 is left out, because it sees only
itself and its row is always [1]. Keys: real tokens, and for causal models only j <= i.

Per sequence and head (then averaged over sequences; a value undefined in a sequence, e.g.
no [SEP] row, leaves that sequence out):
    prev          mean alpha_{i,i-1} over counted rows that have a previous token
    self          mean alpha_{i,i} over counted rows
    next          mean alpha_{i,i+1} over counted rows with a real next token (0 when causal)
    cls/sep/punct mean over counted rows of the attention mass on keys of that category
    sep_to_sep    the same for [SEP] mass, over [SEP] query rows only
    other_to_sep  the same over every other counted query row ([CLS] included, as Clark)
    entropy       mean row entropy in nats; rows smoothed 0.9999 * a + 0.0001 / k over the
                  k visible keys (Clark), so a uniform row has entropy log k exactly
    cls_entropy   entropy of the [CLS] query row (NaN for causal models: row 0 is excluded)
Clark divides prev/next by the number of tokens n; here the denominator counts only rows
that have such a neighbour, so that a head that always attends to the previous token
scores exactly 1 (Clark's value is this one times (n - 1) / n).
Uniform baseline per sequence: mean log k over counted rows (log n when bidirectional).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from attnscope.core.attention import attention_probs, visible_pairs
from attnscope.core.canonical import CanonicalModel
from attnscope.core.checks import require_finite
from attnscope.core.store import HiddenStates
from attnscope.core.tables import indexed_table
from attnscope.core.tokens import CLS, PUNCT, SEP

ENTROPY_SMOOTHING = 1e-4
HEAD_STATISTICS = (
    "prev",
    "self",
    "next",
    "cls",
    "sep",
    "punct",
    "sep_to_sep",
    "other_to_sep",
    "entropy",
    "cls_entropy",
)


def counted_rows(mask: torch.Tensor, causal: bool) -> torch.Tensor:
    """Query rows that enter the statistics: real rows seeing at least two keys.  [B, n] bool"""
    return visible_pairs(mask, causal).sum(-1) >= 2


def row_entropy(alpha: torch.Tensor, visible: torch.Tensor, smoothing: float) -> torch.Tensor:
    """Entropy in nats of every row smoothed as (1 - s) * a + s / k over its k visible keys.

    alpha [B, H, n, n], visible [B, n, n] -> [B, H, n] (0 for rows with no visible key).
    One head at a time: the temporaries are [B, n, n], not a copy of alpha.
    """
    k = visible.sum(-1, keepdim=True).clamp_min(1).to(alpha.dtype)  # [B, n, 1]
    hidden = ~visible
    entropy = alpha.new_empty(alpha.shape[:-1])
    for h in range(alpha.shape[1]):
        p = torch.add(smoothing / k, alpha[:, h], alpha=1 - smoothing)
        p.masked_fill_(hidden, 1.0)  # 1 log 1 = 0 off the visible keys
        entropy[:, h] = -torch.log(p).mul_(p).sum(-1)
    return entropy


def _row_mean(values: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """Mean over the selected rows of values [B, H, n], rows [B, n] -> [B, H] float64; NaN if
    no row is selected."""
    values = values.double()
    rows = rows.double()
    count = rows.sum(-1)[:, None]
    total = torch.linalg.vecdot(values, rows[:, None])
    return torch.where(count > 0, total / count.clamp_min(1), torch.nan)


def sequence_statistics(
    alpha: torch.Tensor, mask: torch.Tensor, category: torch.Tensor, causal: bool
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Every head statistic of every sequence, and the uniform baseline.

    alpha [B, H, n, n], mask [B, n], category [B, n] -> ({name: [B, H] float64}, [B] float64).
    Row sums are taken in alpha's dtype (at least float32), means over rows in float64.
    A NaN statistic means that no row of the sequence qualifies (the accumulator leaves the
    sequence out); so an inf or NaN in alpha, which would pass for that, raises NonFiniteError.
    """
    require_finite(alpha, "attention weights alpha of the weights statistics")
    if alpha.dtype not in (torch.float32, torch.float64):
        alpha = alpha.float()
    category = category.to(alpha.device)
    visible = visible_pairs(mask, causal)
    rows = counted_rows(mask, causal)
    real = mask.bool()
    zero = torch.zeros_like(alpha[..., :1, 0])  # [B, H, 1]
    diag = torch.diagonal(alpha, dim1=-2, dim2=-1)
    before = torch.cat([zero, torch.diagonal(alpha, offset=-1, dim1=-2, dim2=-1)], -1)
    after = torch.cat([torch.diagonal(alpha, offset=1, dim1=-2, dim2=-1), zero], -1)
    has_prev = torch.cat([torch.zeros_like(real[:, :1]), real[:, :-1]], -1)
    has_next = torch.cat([real[:, 1:], torch.zeros_like(real[:, :1])], -1)
    keys = torch.stack([category == CLS, category == SEP, category == PUNCT], -1)
    cls_mass, sep_mass, punct_mass = torch.einsum(
        "bhij,bjc->cbhi", alpha, keys.to(alpha.dtype)
    )  # each [B, H, n]
    entropy = row_entropy(alpha, visible, ENTROPY_SMOOTHING)
    is_sep = category == SEP
    stats = {
        "prev": _row_mean(before, rows & has_prev),
        "self": _row_mean(diag, rows),
        "next": _row_mean(after, rows & has_next),
        "cls": _row_mean(cls_mass, rows),
        "sep": _row_mean(sep_mass, rows),
        "punct": _row_mean(punct_mass, rows),
        "sep_to_sep": _row_mean(sep_mass, rows & is_sep),
        "other_to_sep": _row_mean(sep_mass, rows & ~is_sep),
        "entropy": _row_mean(entropy, rows),
        "cls_entropy": _row_mean(entropy, rows & (category == CLS)),
    }
    log_keys = torch.log(visible.sum(-1).clamp_min(1).double())[:, None]
    uniform = _row_mean(log_keys, rows)[:, 0]
    return stats, uniform


class StatisticsAccumulator:
    """Sums of per-sequence statistics over a corpus, per layer and head (float64)."""

    def __init__(self, n_layers: int, n_heads: int):
        shape = (n_layers, n_heads)
        self.sums = {name: np.zeros(shape) for name in HEAD_STATISTICS}
        self.counts = {name: np.zeros(shape) for name in HEAD_STATISTICS}
        self.uniform = np.zeros(2)  # sum and count of the baseline: layer shards' add

    def add(self, layer: int, stats: dict[str, torch.Tensor]) -> None:
        """Add one batch of `sequence_statistics` output for 0-based `layer`."""
        for name in HEAD_STATISTICS:
            values = stats[name].cpu().numpy()
            defined = ~np.isnan(values)
            self.sums[name][layer] += np.where(defined, values, 0.0).sum(0)
            self.counts[name][layer] += defined.sum(0)

    def add_uniform(self, uniform: torch.Tensor) -> None:
        values = uniform.cpu().numpy()
        values = values[~np.isnan(values)]
        self.uniform += (values.sum(), values.size)

    def head_table(self) -> pd.DataFrame:
        """One row per head: layer, head (1-based), every statistic, n_sequences."""
        n_layers, n_heads = self.sums["prev"].shape
        values = {}
        with np.errstate(invalid="ignore", divide="ignore"):
            for name in HEAD_STATISTICS:
                mean = self.sums[name] / self.counts[name]
                values[name] = np.where(self.counts[name] > 0, mean, np.nan)
        values["n_sequences"] = self.counts["self"].astype(int)
        return indexed_table(values, layer=n_layers, head=n_heads)

    def uniform_entropy(self) -> float:
        total, count = self.uniform
        return float(total / max(count, 1))

    def tables(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """(heads, layers): `head_table` and its `layer_table`."""
        heads = self.head_table()
        return heads, layer_table(heads, self.uniform_entropy())


def layer_table(heads: pd.DataFrame, uniform_entropy: float) -> pd.DataFrame:
    """Per layer: the mean over heads of every statistic, plus the uniform baseline."""
    table = heads.groupby("layer", as_index=False)[list(HEAD_STATISTICS)].mean()
    table["uniform_entropy"] = uniform_entropy
    return table


def attention_statistics(
    store: HiddenStates,
    weights: CanonicalModel,
    batch_size: int,
    device: str = "cpu",
    limit: int | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(heads, layers) tables over the first `limit` sequences of a store (all if None)."""
    return accumulate_statistics(store, weights, batch_size, device, limit).tables()


def accumulate_statistics(
    store: HiddenStates,
    weights: CanonicalModel,
    batch_size: int,
    device: str = "cpu",
    limit: int | None = None,
    layers: list[int] | None = None,
) -> StatisticsAccumulator:
    """The statistics of `layers` (0-based; None: all; a layer shard's, to be `merged`) over
    the first `limit` sequences of a store (all if None).

    Attention is recomputed layer by layer from the stored layer inputs, one batch at a time.
    """
    acc = StatisticsAccumulator(weights.n_layers, weights.n_heads)
    for l in range(weights.n_layers) if layers is None else layers:
        layer = weights.layers[l]
        for batch in store.batches(l, batch_size, device, limit):
            with torch.no_grad():
                alpha = attention_probs(batch.X, batch.mask, layer)
            category = torch.from_numpy(batch.category.astype(np.int64))
            stats, uniform = sequence_statistics(alpha, batch.mask, category, layer.causal)
            acc.add(l, stats)
            if l == store.layers[0]:  # the same for every layer: added once, by one shard
                acc.add_uniform(uniform)
    return acc
