"""Massive activations (Sun et al. 2024): a few features of the first position's residual
stream grow orders of magnitude larger than any feature of the other tokens.

Per stored hidden state `hidden/{l}` (l = 0 the embedding output, l >= 1 the output of layer
l: the raw residual stream, before any final norm) and per sequence s with at least two real
tokens, in the units of the stream:

    first_s   max_k |x_0k|                                the first position's largest feature
    other_s   median over real j >= 1 of max_k |x_jk|     the other positions' typical largest
    ratio_s   first_s / other_s

The table gives per l the means over those sequences (`first_max`, `other_median`, `ratio`),
the largest ratio (`ratio_max`), and the feature k (0-based) that is the first position's
largest most often (`top_dim`) with the share of sequences where it is (`top_dim_share`).

Sun et al.'s criterion (`massive_dimensions`, the sink card): an entry x of a stored state is
massive when |x| > `absolute` (100) and |x| >= `ratio` (1,000; the paper says "at least or
around") times the state's median |x| over the corpus. Each entry's position is of a kind:
the first position, a delimiter (a special piece, "." or ","), or an ordinary piece. Per
(state, dim), a dimension massive on more than `ordinary_share` of the ordinary positions is
an outlier that recurs on ordinary tokens (kind `ordinary`), kept apart from Sun et al.'s
massive activations, which live on the first position and delimiters (kind `massive`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from attnscope.analyses.norms.settings import MassiveCriterion
from attnscope.core.checks import require_finite
from attnscope.core.streaming import Moments
from attnscope.core.tables import indexed_table
from attnscope.core.tokens import OTHER


def largest_features(X: torch.Tensor, mask: torch.Tensor) -> dict[str, np.ndarray]:
    """first_s, other_s, ratio_s and argmax_k |x_0k| of the sequences with at least two real
    tokens (see the module docstring).  X [B, n, d], mask [B, n] -> each [B']"""
    top = X.abs().amax(-1).double().cpu().numpy()  # [B, n]
    real = mask.bool().cpu().numpy()
    require_finite(top[real], "largest |feature| per position (massive activations)")
    kept = real[:, 1:].any(1)
    others = np.where(real[:, 1:], top[:, 1:], np.nan)[kept]
    first, other = top[kept, 0], np.nanmedian(others, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = first / other
    dim = X[:, 0].abs().argmax(-1).cpu().numpy()[kept]
    return {"first": first, "other": other, "ratio": ratio, "dim": dim}


class MassiveActivations:
    """The massive-activation table of every hidden state, fed one batch of one state at a time."""

    def __init__(self, n_states: int):
        self.first = Moments((n_states,))
        self.other = Moments((n_states,))
        self.ratio = Moments((n_states,))
        self.dims: list[np.ndarray] = [np.zeros(0, dtype=np.int64) for _ in range(n_states)]

    def add_batch(self, state: int, X: torch.Tensor, mask: torch.Tensor) -> None:
        """X [B, n, d] = hidden/{state} of a batch, mask [B, n]."""
        found = largest_features(X, mask)
        for moments, name in ((self.first, "first"), (self.other, "other"), (self.ratio, "ratio")):
            moments.add(state, torch.from_numpy(found[name]))
        counts = np.bincount(found["dim"], minlength=len(self.dims[state]))
        counts[: len(self.dims[state])] += self.dims[state]
        self.dims[state] = counts

    def table(self) -> pd.DataFrame:
        """`layer n_sequences first_max other_median ratio ratio_max top_dim top_dim_share`
        (layer 0 = embedding output; NaN and top_dim -1 where no sequence counted)."""
        count = self.first.count
        with np.errstate(invalid="ignore", divide="ignore"):
            columns = {
                "n_sequences": count.astype(int),
                "first_max": self.first.total / count,
                "other_median": self.other.total / count,
                "ratio": self.ratio.total / count,
                "ratio_max": np.where(count > 0, self.ratio.maximum, np.nan),
                "top_dim": [d.argmax() if d.sum() else -1 for d in self.dims],
                "top_dim_share": [d.max() / d.sum() if d.sum() else np.nan for d in self.dims],
            }
        return indexed_table(columns, layer=range(len(count)))


# ---- Sun et al.'s criterion: which entries are massive --------------------------------------

FIRST, DELIMITER, ORDINARY = "first", "delimiter", "ordinary"  # position kinds
MASSIVE, RECURRING = "massive", "ordinary"  # kinds of a (state, dim)


def position_kinds(category: np.ndarray) -> np.ndarray:
    """The kind of every position: `first` (position 0, whatever its piece), `delimiter` (a
    special piece or "." or "," later on: category CLS, SEP or PUNCT) or `ordinary` (any
    other piece).  category [N, n] -> [N, n] str"""
    kinds = np.where(category == OTHER, ORDINARY, DELIMITER).astype(object)
    kinds[:, 0] = FIRST
    return kinds


def layer_median(X: np.ndarray, mask: np.ndarray) -> float:
    """The median |x| over every entry (all d features) of every real position of one hidden
    state in the corpus: Sun et al.'s "median magnitude of the layer's hidden states".
    X [N, n, d], mask [N, n]."""
    return float(np.median(np.abs(X[mask.astype(bool)])))


def massive_entries(
    X: np.ndarray, mask: np.ndarray, median: float, criterion: MassiveCriterion
) -> np.ndarray:
    """(sequence, position, feature) of every massive entry at a real position: |x| >
    `criterion.absolute` and |x| >= `criterion.ratio` x `median` (Sun et al. 2024: 100 and
    "at least or around" 1,000).  X [N, n, d], mask [N, n] -> [E, 3] int"""
    big = np.abs(X)
    found = (big > criterion.absolute) & (big >= criterion.ratio * median)
    return np.argwhere(found & mask.astype(bool)[..., None])


def dimension_kinds(entries: pd.DataFrame, n_ordinary: int, share: float) -> pd.DataFrame:
    """Per (state, dim) of `entries` (`massive_dimensions`' columns state, dim and
    position_kind): `ordinary_share`, the share of the `n_ordinary` ordinary positions where
    it is massive, and `kind`: `ordinary` (an outlier that recurs on ordinary tokens: share
    above `share`) or `massive` (Sun et al.'s: on the first positions and delimiters)."""
    ordinary = entries["position_kind"] == ORDINARY
    counts = ordinary.groupby([entries["state"], entries["dim"]]).sum()
    shares = counts / max(n_ordinary, 1)
    kinds = np.where(shares > share, RECURRING, MASSIVE)
    return pd.DataFrame({"ordinary_share": shares, "kind": kinds}, index=counts.index)


def massive_dimensions(
    hidden, tokens: dict[str, np.ndarray], token_of, criterion: MassiveCriterion
) -> pd.DataFrame:
    """Every massive entry of every stored state: `state dim sequence position piece
    position_kind value layer_median ratio ordinary_share kind` (state 0 = the embedding
    output, l = layer l's output; dim 0-based; ratio = |value| / layer_median; the last two
    of its (state, dim), `dimension_kinds`). `hidden`: (state, [N, n, d]) pairs (one state
    in memory at a time); `tokens`: the store's attention_mask, input_ids and category;
    `token_of` maps piece ids to their text."""
    mask, ids = tokens["attention_mask"], tokens["input_ids"]
    kinds = position_kinds(tokens["category"])
    n_ordinary = int(((kinds == ORDINARY) & mask.astype(bool)).sum())
    frames = []
    for state, X in hidden:
        median = layer_median(X, mask)
        s, p, k = massive_entries(X, mask, median, criterion).T
        values = X[s, p, k].astype(np.float64)
        frames.append(
            pd.DataFrame(
                {
                    "state": state,
                    "dim": k,
                    "sequence": s,
                    "position": p,
                    "piece": token_of(ids[s, p].tolist()),
                    "position_kind": kinds[s, p].astype(str),
                    "value": values,
                    "layer_median": median,
                    "ratio": np.abs(values) / median if median > 0 else np.inf,
                }
            )
        )
    found = pd.concat(frames, ignore_index=True)
    by_dim = dimension_kinds(found, n_ordinary, criterion.ordinary_share)
    return found.join(by_dim, on=["state", "dim"])
