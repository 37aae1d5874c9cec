"""Statistics over a stream too large to hold: moments per slot and a seeded uniform sample.

Both take observations batch by batch (torch tensors, any device) and keep float64 state on
the CPU, so memory does not grow with the corpus. `merged` joins the accumulators of two
disjoint parts of a stream (two layer shards) into those of the whole.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import torch

from attnscope.core.tables import indexed_table


class Moments:
    """Streaming count, sum, sum of squares, max and min (float64) for an array of slots."""

    def __init__(self, shape: tuple[int, ...]):
        self.count = np.zeros(shape)
        self.total = np.zeros(shape)
        self.total_sq = np.zeros(shape)
        self.maximum = np.full(shape, -np.inf)
        self.minimum = np.full(shape, np.inf)

    def add(self, at, values: torch.Tensor) -> None:
        """Add observations along the last axis of `values` to the slot(s) `self.count[at]`."""
        v = values.double()
        self.count[at] += v.shape[-1]
        self.total[at] += v.sum(-1).cpu().numpy()
        self.total_sq[at] += v.square().sum(-1).cpu().numpy()
        if v.shape[-1]:
            self.maximum[at] = np.maximum(self.maximum[at], v.amax(-1).cpu().numpy())
            self.minimum[at] = np.minimum(self.minimum[at], v.amin(-1).cpu().numpy())

    def merged(self, other: Moments) -> Moments:
        """The moments of both streams: counts and sums add, extremes combine."""
        out = Moments(self.count.shape)
        out.count, out.total = self.count + other.count, self.total + other.total
        out.total_sq = self.total_sq + other.total_sq
        out.maximum = np.maximum(self.maximum, other.maximum)
        out.minimum = np.minimum(self.minimum, other.minimum)
        return out

    def pooled(self) -> Moments:
        """All slots together, as one slot."""
        out = Moments(())
        out.count, out.total, out.total_sq = self.count.sum(), self.total.sum(), self.total_sq.sum()
        out.maximum, out.minimum = self.maximum.max(), self.minimum.min()
        return out

    def frame(self, names: tuple[str, ...] = ()) -> pd.DataFrame:
        """`names... mean sd cv max min`, one row per slot; slot indices 1-based."""
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = self.total / self.count
            sd = np.sqrt(np.maximum(self.total_sq / self.count - mean**2, 0))
            cv = sd / mean
        stats = dict(mean=mean, sd=sd, cv=cv, max=self.maximum, min=self.minimum)
        return indexed_table(stats, **dict(zip(names, np.shape(self.count), strict=True)))


class BottomKSample:
    """Seeded uniform sample without replacement of at most `size` rows of a stream.

    Every row offered carries an independent Uniform[0, 1) key; the sample keeps the `size`
    rows with the smallest keys ("bottom-k"). While the stream has at most `size` rows the
    sample is the whole stream (so Spearman on it is exact); otherwise it is a uniform random
    subset. The rows of the stream with key < p are a Bernoulli(p) sample; their `limit`
    smallest keys are a uniform subsample of it, and they are in this sample whenever
    `limit <= size` (see `below`). Callers may drop rows whose key is not below
    `threshold()` before offering them: they could not enter the sample.
    Offered rows are buffered and the sample is cut back to `size` rows once the buffer holds
    `size / 4` rows (amortised O(1) per row); `compact()` cuts it now and orders the rows by
    key. Once the sample is full, a cut writes the buffered rows that enter it over the rows
    they push out, in place, so memory stays near the sample's own however long the stream
    (a sample rebuilt by concatenation from a buffer of `size` rows took 5 times its own).
    """

    def __init__(self, size: int, n_fields: int):
        self.size = size
        self.seen = 0
        self.keys = torch.empty(0, dtype=torch.float64)
        self.rows = torch.empty(0, n_fields, dtype=torch.float64)
        self._bound = 1.0
        self._buffer: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._buffered = 0

    def threshold(self) -> float:
        """Rows with a key at or above this value cannot enter the sample any more."""
        return self._bound

    def offer(self, keys: torch.Tensor, rows: torch.Tensor, seen: int) -> None:
        """keys [m], rows [m, fields]: candidates out of `seen` new rows of the stream."""
        self.seen += seen
        if len(keys):
            self._buffer.append((keys.to(torch.float64), rows.to(torch.float64)))
            self._buffered += len(keys)
        if self._buffered >= max(self.size // 4, 1):
            self._cut()

    def _cut(self) -> None:
        """Merge the buffer into the sample, keeping the `size` rows with the smallest keys."""
        if not self._buffer:
            return
        keys = torch.cat([k for k, _ in self._buffer])
        rows = torch.cat([r for _, r in self._buffer])
        self._buffer, self._buffered = [], 0
        held = len(self.keys)
        if held < self.size:  # filling: the sample grows, then is cut to size once
            keys, rows = torch.cat([self.keys, keys]), torch.cat([self.rows, rows])
            if len(keys) > self.size:
                keep = torch.topk(keys, self.size, largest=False).indices
                keys, rows = keys[keep], rows[keep]
            self.keys, self.rows = keys, rows
        else:  # full: entering rows overwrite the rows they push out (as many of each)
            every = torch.cat([self.keys, keys])
            kept = every <= torch.kthvalue(every, self.size).values
            if int(kept.sum()) != self.size:  # ties at the cut: pick `size` of them
                kept = torch.zeros_like(kept)
                kept[torch.topk(every, self.size, largest=False).indices] = True
            del every
            out = (~kept[:held]).nonzero().squeeze(1)
            entering = kept[held:].nonzero().squeeze(1)
            self.keys[out], self.rows[out] = keys[entering], rows[entering]
        if len(self.keys) >= self.size:
            self._bound = float(self.keys.max())

    def compact(self) -> None:
        """Merge the buffer now (`_cut`) and order the sample's rows by key, so that it is the
        same whatever order its rows came in."""
        self._cut()
        order = torch.argsort(self.keys)
        self.keys, self.rows = self.keys[order], self.rows[order]

    def merged(self, other: BottomKSample) -> BottomKSample:
        """The sample of both streams: the `size` rows with the smallest keys of the two."""
        if (self.size, self.rows.shape[1]) != (other.size, other.rows.shape[1]):
            raise ValueError("samples of different sizes or fields cannot be merged")
        out = BottomKSample(self.size, self.rows.shape[1])
        for sample in (self, other):
            sample.compact()
            out.offer(sample.keys, sample.rows, sample.seen)
        out.compact()
        return out

    def below(self, p: float, limit: int) -> torch.Tensor:
        """The rows with key < p (a Bernoulli(p) sample), at most `limit` of them (those with
        the smallest keys: a uniform subsample).  [m, fields]"""
        if limit > self.size:
            raise ValueError(f"limit {limit} exceeds the sample size {self.size}")
        self.compact()  # ordered by key
        return self.rows[self.keys < p][:limit]


def merged(a, b):
    """Two accumulators of disjoint parts of one stream (each layer in one part) as those of
    the whole stream: `Moments` and `BottomKSample` merge, arrays of counts and sums add (1-D
    counts of different lengths padded with zeros), tables (DataFrames) are concatenated,
    dicts, tuples, lists and objects merge item by item, and the rest (settings: sizes, names,
    seeds) must be equal in both."""
    if isinstance(a, Moments | BottomKSample):
        return a.merged(b)
    if isinstance(a, np.ndarray):
        if a.ndim == b.ndim == 1 and len(a) != len(b):  # counts that grow (bincounts)
            a, b = (np.pad(x, (0, max(len(a), len(b)) - len(x))) for x in (a, b))
        return a + b
    if isinstance(a, pd.DataFrame):
        return pd.concat([a, b], ignore_index=True)
    if isinstance(a, dict):
        return {k: merged(a[k], b[k]) if k in a and k in b else a.get(k, b.get(k)) for k in a | b}
    if isinstance(a, tuple | list) and type(a) is type(b) and len(a) == len(b):
        return type(a)(merged(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is type(b) and hasattr(a, "__dict__") and not callable(a):
        out = copy.copy(a)
        out.__dict__.update({k: merged(v, b.__dict__[k]) for k, v in a.__dict__.items()})
        return out
    if a != b:
        raise ValueError(f"parts of one stream disagree on a setting: {a!r} and {b!r}")
    return a
