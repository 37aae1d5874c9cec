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
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from attnscope.core.checks import require_finite
from attnscope.core.streaming import Moments
from attnscope.core.tables import indexed_table


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

MASSIVE_ABSOLUTE = 100.0  # |x| above this ...
MASSIVE_RELATIVE = 1000.0  # ... and at least this many times the layer's median |x|


def layer_median(X: np.ndarray, mask: np.ndarray) -> float:
    """The median |x| over every entry (all d features) of every real position of one hidden
    state in the corpus: Sun et al.'s "median magnitude of the layer's hidden states".
    X [N, n, d], mask [N, n]."""
    return float(np.median(np.abs(X[mask.astype(bool)])))


def massive_entries(X: np.ndarray, mask: np.ndarray, median: float) -> np.ndarray:
    """(sequence, position, feature) of every massive entry at a real position: |x| > 100 and
    |x| >= 1000 x `median` (Sun et al. 2024).  X [N, n, d], mask [N, n] -> [E, 3] int"""
    big = np.abs(X)
    found = (big > MASSIVE_ABSOLUTE) & (big >= MASSIVE_RELATIVE * median)
    return np.argwhere(found & mask.astype(bool)[..., None])


def massive_dimensions(hidden, mask: np.ndarray, input_ids: np.ndarray, token_of) -> pd.DataFrame:
    """Every massive entry of every stored state: `state dim sequence position piece value
    layer_median ratio` (state 0 = the embedding output, l = layer l's output; dim 0-based;
    ratio = |value| / layer_median). `hidden(state)` -> [N, n, d] of that state (one state in
    memory at a time); `token_of` maps piece ids to their text."""
    frames = []
    for state, X in hidden:
        median = layer_median(X, mask)
        s, p, k = massive_entries(X, mask, median).T
        values = X[s, p, k].astype(np.float64)
        frames.append(
            pd.DataFrame(
                {
                    "state": state,
                    "dim": k,
                    "sequence": s,
                    "position": p,
                    "piece": token_of(input_ids[s, p].tolist()),
                    "value": values,
                    "layer_median": median,
                    "ratio": np.abs(values) / median if median > 0 else np.inf,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)
