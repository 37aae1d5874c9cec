"""Rotary attention split into frequency bands (Barbero et al. 2024, "Round and Round We Go!"),
asked the position questions of Yamamoto & Matsuzaki.

RoPE turns each pair of query and key dimensions by position * theta_b, so a head's logit of
query i and key j is a sum over bands:

    s_ij = sum_b s^b_ij,    s^b_ij = scale * q_i[band b] . k_j[band b]

with q, k as the scores read them (QK-norm and rotation included, `queries_keys`), before
soft-capping, which applies to the sum. Band b = 0..dims/2 - 1 holds the two dimensions turned
by inv_freq[b]: (b, b + dims/2), or (2b, 2b + 1) when interleaved, as `Rotary.partner` pairs
them. A partial-rotary head has one more band, the last, holding all its unrotated dimensions
(theta 0, wavelength inf); a layer without rotation (SmolLM3's NoPE layers) has that band alone.

`RotaryStatistics` accumulates, per head and band of one layer, over the visible causal pairs
(query i, key j <= i, both real, inside the sliding window):
- abs_share: mean of |s^b_ij| / sum_b' |s^b'_ij| (pairs where that sum is 0 are skipped);
- the offset profile: mean of s^b_ij over the pairs with i - j = t, t = 0..t_max, with counts;
- positional_share: R^2 of s^b on the offset i - j, sum_t n_t (mean_t - mean)^2 over
  sum (s - mean)^2, from per-offset counts, sums and sums of squares (float64) over every
  offset the store can hold; NaN where s^b is constant (variance <= 1e-12 of its mean square);
- q_norm, k_norm: mean ||q^b||, ||k^b|| over real tokens (keys repeated per query head);
- residual: max |sum_b s^b - q k^T scale| / max |q k^T scale| over the visible pairs.

How: sequence by sequence, the scores are computed once per block of query rows i, every
head and band at once, laid out by offset: s [heads, bands, r, T] holds s^b for query i and
key j = i - t, t = 0..T - 1 (T = min(the block's last row + 1, the sliding window): the
causal pairs alone), read from a strided view of the keys (`by_offset`). The shares, the
check and the per-offset sums and sums of squares come from that block: a per-offset sum is a
sum over the block's rows (a column sum), so no loop runs over offsets. A block's sums over
its rows are in X's dtype (at most MOST_ROWS rows; the shares over r x T pairs), everything
accumulated over blocks in float64.

Memory: besides one batch's q, k and their copies by band ([B, H, n, d'] each, more where a
narrow band is padded to the widest) and one sequence's keys after n zeros (twice its k),
one block of scores, heads x bands x r x T <= CHUNK = 2^23 values (32 MiB in float32, one
[bands, n, n] of SmolLM2's 32 bands at n = 512; r = `rows_per_block`, 56 rows there), a few
[heads, r, T], and one layer's accumulators [H, bands, length] in float64. Nothing of size
[bands, n, n] exists beyond that block.

Layers and heads are 1-based in the tables, bands 0-based.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from attnscope.core.attention import queries_keys
from attnscope.core.canonical import CanonicalLayer, CanonicalModel, Rotary, rotary_bands
from attnscope.core.layer_kinds import KIND_COLUMNS, kind_summary
from attnscope.core.store import HiddenStates
from attnscope.core.tables import index_grid

CONSTANT = 1e-12  # variance / mean square below which a band's scores count as constant
BOUND = 1e-5  # largest relative residual of the band sum against the logits (float32 rounding)


def bands(rotary: Rotary | None, d_head: int) -> torch.Tensor:
    """The band of every head dimension (`canonical.rotary_bands`).  [d_head] int64"""
    return rotary_bands(rotary, d_head)


def n_bands(rotary: Rotary | None, d_head: int) -> int:
    """How many bands a head has: dims / 2, plus one where some dimensions are not rotated."""
    return int(bands(rotary, d_head).max()) + 1


def band_angles(rotary: Rotary | None, d_head: int) -> tuple[np.ndarray, np.ndarray]:
    """(theta, wavelength) per band: theta_b in radians per token (0 for the unrotated band),
    wavelength 2 pi / theta_b in tokens (inf where theta is 0).  Each [bands] float64"""
    theta = np.zeros(n_bands(rotary, d_head))
    if rotary is not None:
        theta[: rotary.dims // 2] = rotary.inv_freq.double().cpu().numpy()
    wavelength = np.full_like(theta, np.inf)
    np.divide(2 * np.pi, theta, out=wavelength, where=theta > 0)
    return theta, wavelength


def _band_dims(rotary: Rotary | None, d_head: int, device) -> list[torch.Tensor]:
    """The head dimensions of each band, band by band.  list of [2] (or [d' - dims]) int64"""
    band = bands(rotary, d_head)
    return [torch.nonzero(band == b).flatten().to(device) for b in range(int(band.max()) + 1)]


def _band_index(rotary: Rotary | None, d_head: int, device) -> torch.Tensor:
    """Every band's head dimensions as one table: row b holds band b's, padded with d_head (the
    zero dimension `by_band` appends) where a band is narrower than the widest (a
    partial-rotary head's unrotated band is wider than its pairs).  [bands, W] int64"""
    dims = _band_dims(rotary, d_head, "cpu")
    index = torch.full((len(dims), max(len(d) for d in dims)), d_head, dtype=torch.long)
    for b, d in enumerate(dims):
        index[b, : len(d)] = d
    return index.to(device)


def by_band(t: torch.Tensor, rotary: Rotary | None) -> torch.Tensor:
    """Queries or keys regrouped by band: out[..., b, i, :] holds t[..., i, band b's dims], zero
    past a narrow band's width.  t [..., n, d'] -> [..., bands, n, W]"""
    index = _band_index(rotary, t.shape[-1], t.device)
    padded = torch.nn.functional.pad(t, (0, 1))  # dimension d' is zero
    return padded[..., index].movedim(-3, -2)


def head_band_scores(X: torch.Tensor, layer: CanonicalLayer) -> Iterator[tuple[int, torch.Tensor]]:
    """(head, s [B, bands, n, n]) for every head (0-based) of the layer, s[:, b] = s^b =
    scale * q[band b] k[band b]^T before soft-capping: summed over bands they give the logits
    q k^T * scale. One head's band scores exist at a time (beyond q, k [B, H, n, d'])."""
    q, k = queries_keys(X, layer)
    for h in range(layer.n_heads):
        q_bands, k_bands = by_band(q[:, h], layer.rotary), by_band(k[:, h], layer.rotary)
        yield h, (q_bands @ k_bands.transpose(-1, -2)) * layer.scale


CHUNK = 2**23  # values in one block of band scores [heads, bands, rows, offsets] (32 MiB float32)
MOST_ROWS = 64  # query rows per block at most: float32 sums over a block's rows stay short


def rows_per_block(head_bands: int, n: int) -> int:
    """Query rows per block of scores of head_bands (heads x bands) rows of n keys: as many
    as CHUNK values hold, 1 to MOST_ROWS."""
    return min(MOST_ROWS, max(1, CHUNK // (head_bands * n)))


def zero_before(t: torch.Tensor) -> torch.Tensor:
    """t [..., n] after n zeros (the keys j < 0 of `by_offset`), contiguous.  [..., 2n]"""
    return torch.nn.functional.pad(t, (t.shape[-1], 0)).contiguous()


def by_offset(keys: torch.Tensor, first: int, rows: int, offsets: int) -> torch.Tensor:
    """What each query row meets, by offset: out[..., l, u] = key j = i - t of query
    i = first + l at offset t = offsets - 1 - u (zero where j < 0). A strided view of
    keys = `zero_before(k)` [..., 2n] (row l starts one key after row l - 1): no copy.
    [..., rows, offsets]"""
    if keys.stride(-1) != 1:
        raise ValueError(f"by_offset needs contiguous keys, not strides {keys.stride()}")
    start = keys.shape[-1] // 2 + first - offsets + 1  # key j = first - offsets + 1: l, u = 0
    return keys.as_strided(
        (*keys.shape[:-1], rows, offsets),
        (*keys.stride()[:-1], 1, 1),
        keys.storage_offset() + start,
    )


def offset_logits(q_rows: torch.Tensor, keys: torch.Tensor, first: int, offsets: int):
    """q_i . k_j laid out as `by_offset`: one product with the keys the rows meet, then its
    band of diagonals.  q_rows [..., r, d'] (queries first..), keys = `zero_before(k^T)`
    [..., d', 2n] -> [..., r, offsets]"""
    r, start = q_rows.shape[-2], keys.shape[-1] // 2 + first - offsets + 1
    products = q_rows @ keys[..., start : start + r + offsets - 1]  # [..., r, r + offsets - 1]
    return products.as_strided(
        (*products.shape[:-1], offsets), (*products.stride()[:-2], r + offsets, 1)
    )


def band_widths(rotary: Rotary | None, d_head: int) -> list[int]:
    """Band b's number of dimensions: 2 for a rotated band, the rest for the unrotated one,
    never narrower than the band before it (the unrotated band is last)."""
    widths = torch.bincount(bands(rotary, d_head)).tolist()
    assert widths == sorted(widths), widths
    return widths


class RotaryStatistics:
    """The band statistics of one layer, fed batch by batch (`update`); see the module
    docstring. `length`: the longest sequence a batch can have (offsets 0..length - 1 are
    accumulated for positional_share). Accumulators on `device`, float64."""

    def __init__(self, layer: CanonicalLayer, length: int, t_max: int, device="cpu"):
        self.layer, self.t_max = layer, t_max
        self.theta, self.wavelength = band_angles(layer.rotary, layer.d_head)
        self.n_bands = len(self.theta)
        self.band = bands(layer.rotary, layer.d_head).to(device)
        widths = band_widths(layer.rotary, layer.d_head)
        # dimension w of the padded band vectors: bands first_wide[w].. have it
        self.first_wide = [sum(width <= w for width in widths) for w in range(max(widths))]
        H, K, T = layer.n_heads, self.n_bands, max(length, t_max + 1)
        f64 = dict(dtype=torch.float64, device=device)
        self.share_sums = torch.zeros(H, K, **f64)  # sum of |s^b| / sum_b' |s^b'|
        self.share_pairs = torch.zeros(H, **f64)  # pairs where sum_b' |s^b'| > 0
        self.sums = torch.zeros(H, K, T, **f64)  # per offset t = i - j
        self.squares = torch.zeros(H, K, T, **f64)
        self.counts = torch.zeros(T, **f64)
        self.norm_sums = {"q": torch.zeros(H, K, **f64), "k": torch.zeros(H, K, **f64)}
        self.tokens = 0
        self.largest = {"residual": 0.0, "score": 0.0}

    def update(self, X: torch.Tensor, mask: torch.Tensor) -> None:
        """Add one batch: X [B, n, d] the layer's input, mask [B, n] (1 = real token).
        Sequence by sequence and block of query rows by block, every head at once: each
        block's scores are [heads, bands, rows, offsets], offsets t = 0..T - 1 where
        T = min(the block's last row + 1, the sliding window), the causal pairs alone."""
        q, k = queries_keys(X, self.layer)
        real = mask.bool()
        self.tokens += int(real.sum())
        for name, t in (("q", q), ("k", k)):
            self.norm_sums[name] += self._band_norms(t, real)
        q = q * self.layer.scale  # q k^T: the logits
        zeroed = real[:, None, :, None]  # a padding token's scores are 0 in every band
        q_bands = by_band(q * zeroed, self.layer.rotary)  # [B, H, K, n, W]
        k_bands = by_band(k * zeroed, self.layer.rotary).transpose(-1, -2)  # [.., K, W, n]
        (B, n), H, K = mask.shape, self.layer.n_heads, self.n_bands
        rows = rows_per_block(H * K, n)
        buffer = q.new_empty(H * K * rows * n)  # one block's scores, reused
        for i in range(B):
            keys, band_keys = zero_before(k[i].transpose(-1, -2)), zero_before(k_bands[i])
            real_keys = zero_before(real[i].to(q.dtype))
            for first in range(0, n, rows):
                r = min(rows, n - first)
                T = min(first + r, self.layer.sliding_window or n)  # offsets 0..T - 1
                visible = (by_offset(real_keys, first, r, T) > 0) & real[i, first : first + r, None]
                self._add_offsets(self.counts, visible.sum(0))
                block = buffer[: H * K * r * T].view(H, K, r, T)
                q_rows = q_bands[i, :, :, first : first + r]
                self._band_scores(q_rows, by_offset(band_keys, first, r, T), block)
                logits = offset_logits(q[i, :, first : first + r], keys, first, T)
                self._check(block.sum(1), logits, visible)
                self._update_block(block, visible)

    def _band_scores(self, q_rows, key_rows, out) -> None:
        """s^b[l, u] = scale q^b_i . k^b_j of every head and band into out [H, K, r, T]:
        q_rows [H, K, r, W] (scaled), key_rows [H, K, W, r, T] (`by_offset`)."""
        torch.mul(key_rows[:, :, 0], q_rows[..., 0, None], out=out)
        for w in range(1, q_rows.shape[-1]):
            b = self.first_wide[w]  # narrower bands are zero in dimension w
            out[:, b:].addcmul_(key_rows[:, b:, w], q_rows[:, b:, :, w, None])

    def _update_block(self, scores: torch.Tensor, visible: torch.Tensor) -> None:
        """Every head's statistics from a block of band scores [H, K, r, T] (column u:
        offset t = T - 1 - u; taken to |s|, then s^2, in place), visible [r, T]."""
        H, K = scores.shape[:2]
        self._add_offsets(self.sums, scores.sum(2))
        size = scores.abs_().sum(1)  # sum_b |s^b|  [H, r, T]
        counted = visible & (size > 0)
        self.share_pairs += counted.sum((1, 2))
        inverse = torch.where(counted, size, 1.0).reciprocal() * counted
        pairs = inverse.reshape(H, -1)  # a product per head: faster than one bmm on CPU
        shares = torch.stack([scores[h].view(K, -1) @ pairs[h] for h in range(H)])  # [H, K]
        self.share_sums += shares.double()
        self._add_offsets(self.squares, scores.mul_(scores).sum(2))  # mul_: square_ is slow

    def _add_offsets(self, into: torch.Tensor, by_column: torch.Tensor) -> None:
        """Add per-offset sums [..., T] in a block's column order (offset T - 1 - u) to an
        accumulator [..., length] over offsets 0..T - 1."""
        T = by_column.shape[-1]
        into[..., :T] += by_column.flip(-1).double()

    def _band_norms(self, t: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """sum over real tokens of ||t^b||.  t [B, H, n, d'] -> [H, bands] float64"""
        squares = t.new_zeros(*t.shape[:-1], self.n_bands).index_add_(-1, self.band, t * t)
        return (squares.sqrt() * real[:, None, :, None]).sum((0, 2)).double()

    def _check(self, total: torch.Tensor, direct: torch.Tensor, visible: torch.Tensor) -> None:
        """Keep the largest |sum_b s^b - q k^T scale| and |q k^T scale| over visible pairs."""
        residual = torch.where(visible, (total - direct).abs(), 0.0).max()
        score = torch.where(visible, direct.abs(), 0.0).max()
        self.largest["residual"] = max(self.largest["residual"], float(residual))
        self.largest["score"] = max(self.largest["score"], float(score))

    @property
    def abs_share(self) -> np.ndarray:
        """Mean |s^b| / sum_b' |s^b'| over visible pairs.  [H, bands]"""
        pairs = self.share_pairs[:, None]
        return (self.share_sums / pairs).cpu().numpy()

    @property
    def offset_count(self) -> np.ndarray:
        """Visible pairs with i - j = t, t = 0..t_max.  [t_max + 1] int64"""
        return self.counts[: self.t_max + 1].cpu().numpy().astype(np.int64)

    @property
    def offset_mean(self) -> np.ndarray:
        """Mean s^b over visible pairs with i - j = t, t = 0..t_max (NaN where none).
        [H, bands, t_max + 1]"""
        T = self.t_max + 1
        return (self.sums[..., :T] / self.counts[:T]).cpu().numpy()

    @property
    def positional_share(self) -> np.ndarray:
        """R^2 of s^b on the offset: between-offset over total sum of squares (NaN where the
        band's scores are constant or there are none).  [H, bands]"""
        seen = self.counts > 0
        n_t, S_t, Q_t = self.counts[seen], self.sums[..., seen], self.squares[..., seen]
        mean_t = S_t / n_t
        mean = S_t.sum(-1, keepdim=True) / n_t.sum()
        between = (n_t * (mean_t - mean).square()).sum(-1)
        within = (Q_t - S_t * mean_t).clamp(min=0).sum(-1)
        total = between + within
        constant = total <= CONSTANT * Q_t.sum(-1)
        return torch.where(constant, torch.nan, between / total).cpu().numpy()

    def norm(self, name: str) -> np.ndarray:
        """Mean ||q^b|| (name "q") or ||k^b|| ("k") over real tokens.  [H, bands]"""
        return (self.norm_sums[name] / self.tokens).cpu().numpy()

    @property
    def residual(self) -> float:
        """max |sum_b s^b - q k^T scale| / max |q k^T scale| over the visible pairs seen."""
        return self.largest["residual"] / max(self.largest["score"], np.finfo(float).tiny)

    def summary(self) -> LayerSummary:
        """The layer's results as arrays, without its [H, bands, length] accumulators."""
        return LayerSummary(
            t_max=self.t_max,
            n_heads=self.layer.n_heads,
            n_bands=self.n_bands,
            theta=self.theta,
            wavelength=self.wavelength,
            abs_share=self.abs_share,
            positional_share=self.positional_share,
            q_norm=self.norm("q"),
            k_norm=self.norm("k"),
            offset_mean=self.offset_mean,
            offset_count=self.offset_count,
            residual=self.residual,
            residual_abs=self.largest["residual"],
        )


@dataclass
class LayerSummary:
    """One layer's band statistics (`RotaryStatistics.summary`); shapes as there."""

    t_max: int
    n_heads: int
    n_bands: int
    theta: np.ndarray
    wavelength: np.ndarray
    abs_share: np.ndarray
    positional_share: np.ndarray
    q_norm: np.ndarray
    k_norm: np.ndarray
    offset_mean: np.ndarray
    offset_count: np.ndarray
    residual: float
    residual_abs: float


@dataclass
class RotaryResult:
    """One pass over a store; L layers, H heads, K = the most bands any layer has (layers with
    fewer, a NoPE layer's single band, are NaN past their own), T = t_max + 1.

    n_bands [L]; theta, wavelength [L, K] (radians per token, tokens); abs_share,
    positional_share, q_norm, k_norm [L, H, K]; offset_mean [L, H, K, T]; offset_count [L, T];
    residual [L] (relative, see `RotaryStatistics.residual`), residual_abs [L] (its numerator)."""

    t_max: int
    n_bands: np.ndarray
    theta: np.ndarray
    wavelength: np.ndarray
    abs_share: np.ndarray
    positional_share: np.ndarray
    q_norm: np.ndarray
    k_norm: np.ndarray
    offset_mean: np.ndarray
    offset_count: np.ndarray
    residual: np.ndarray
    residual_abs: np.ndarray

    @classmethod
    def collect(cls, layers: list[LayerSummary]) -> RotaryResult:
        """Stack the layers' summaries (all with the same t_max and heads)."""
        t_max = layers[0].t_max
        L, H = len(layers), layers[0].n_heads
        K = max(s.n_bands for s in layers)
        arrays = {
            name: np.full((L, *shape), np.nan)
            for name, shape in (
                ("theta", (K,)),
                ("wavelength", (K,)),
                ("abs_share", (H, K)),
                ("positional_share", (H, K)),
                ("q_norm", (H, K)),
                ("k_norm", (H, K)),
                ("offset_mean", (H, K, t_max + 1)),
            )
        }
        for l, summary in enumerate(layers):
            nb = summary.n_bands
            for name in ("theta", "wavelength"):
                arrays[name][l, :nb] = getattr(summary, name)
            for name in ("abs_share", "positional_share", "q_norm", "k_norm", "offset_mean"):
                arrays[name][l, :, :nb] = getattr(summary, name)
        return cls(
            t_max=t_max,
            n_bands=np.array([s.n_bands for s in layers]),
            offset_count=np.stack([s.offset_count for s in layers]),
            residual=np.array([s.residual for s in layers]),
            residual_abs=np.array([s.residual_abs for s in layers]),
            **arrays,
        )


def rotary_pass(
    store: HiddenStates, weights: CanonicalModel, *, t_max: int, batch_size: int, device: str
) -> RotaryResult:
    """The band statistics of every layer the store was made for (`layers:`; the others' are
    NaN), one layer's accumulators at a time, streaming the store's batches (as
    `corpus_pass.trt_pass`)."""
    summaries = []
    for l, layer in enumerate(weights.layers):
        stats = RotaryStatistics(layer, store.length, t_max, device)
        if l in store.layers:
            for batch in store.batches(l, batch_size, device):
                stats.update(batch.X, batch.mask)
        with np.errstate(invalid="ignore", divide="ignore"):  # a layer left out: no pairs
            summaries.append(stats.summary())  # the accumulators go with `stats`
    return RotaryResult.collect(summaries)


def _layer_bands(result: RotaryResult, l: int) -> pd.DataFrame:
    """`layer head band` of layer l (0-based) over its own bands."""
    table = index_grid(head=result.abs_share.shape[1], band=np.arange(result.n_bands[l]))
    table.insert(0, "layer", l + 1)
    return table


def band_table(result: RotaryResult) -> pd.DataFrame:
    """`layer head band theta wavelength rotated abs_share positional_share q_norm k_norm`,
    every layer's own bands; the unrotated band of a partial-rotary head is the last
    (rotated False, theta 0, wavelength inf)."""
    frames = []
    for l, nb in enumerate(result.n_bands):
        table = _layer_bands(result, l)
        H = result.abs_share.shape[1]
        theta = np.tile(result.theta[l, :nb], H)
        table["theta"] = theta
        table["wavelength"] = np.tile(result.wavelength[l, :nb], H)
        table["rotated"] = theta > 0
        for name in ("abs_share", "positional_share", "q_norm", "k_norm"):
            table[name] = getattr(result, name)[l, :, :nb].reshape(-1)
        frames.append(table)
    return pd.concat(frames, ignore_index=True)


def band_ranking(bands: pd.DataFrame) -> pd.DataFrame:
    """`attention window rope_theta band theta wavelength n_layers n_rows positional_share
    abs_share rank`: the bands ranked by their mean positional share within each layer kind
    (`core.layer_kinds`: global or sliding with its window, and the rotary base), never across
    kinds, where band b of one base turns at another rate than band b of another (Gemma-3's
    local 1e4 and global 1e6). `bands`: a `band_table` with the kind columns; the means are
    over the kind's layers and heads (NaN shares of constant bands left out); rank 1 is the
    most positional band of its kind, NaN shares rank last."""
    by_band = ("band", "theta", "wavelength")
    table = kind_summary(bands, ["positional_share", "abs_share"], by_band)
    groups = table.groupby(list(KIND_COLUMNS), dropna=False, sort=False)["positional_share"]
    ranks = groups.rank(ascending=False, method="min", na_option="bottom")
    return table.assign(rank=ranks.astype(int))


def offset_table(result: RotaryResult) -> pd.DataFrame:
    """`layer head band t mean count`: the offset profiles, t = i - j = 0..t_max, count the
    visible pairs at t (the same for every head of a layer)."""
    frames = []
    T = result.t_max + 1
    for l, nb in enumerate(result.n_bands):
        H = result.abs_share.shape[1]
        table = index_grid(head=H, band=np.arange(nb), t=np.arange(T))
        table.insert(0, "layer", l + 1)
        table["mean"] = result.offset_mean[l, :, :nb].reshape(-1)
        table["count"] = np.tile(result.offset_count[l], H * nb)
        frames.append(table)
    return pd.concat(frames, ignore_index=True)


def positional_heads_by_band(
    offset_profiles: pd.DataFrame, heads: list[tuple[int, int]]
) -> pd.DataFrame:
    """How much each band of the given heads (1-based layer, head) favours the previous
    token: the mean score at t = 1 minus the plain mean of the per-offset means at t = 0 and
    t = 2..t_max. `offset_profiles`: an `offset_table`. Returns `layer head band previous other
    margin` (margin = previous - other)."""
    frames = []
    for layer, head in heads:
        rows = offset_profiles[
            (offset_profiles["layer"] == layer) & (offset_profiles["head"] == head)
        ]
        wide = rows.pivot(index="band", columns="t", values="mean")
        previous, other = wide[1], wide.drop(columns=1).mean(axis=1)
        frames.append(
            pd.DataFrame(
                {
                    "layer": layer,
                    "head": head,
                    "band": wide.index.to_numpy(),
                    "previous": previous.to_numpy(),
                    "other": other.to_numpy(),
                    "margin": (previous - other).to_numpy(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


POSITIONAL_MASS = 0.5  # a head is "prev" / "self" when more than half its attention goes there


def positional_heads(trt: pd.DataFrame, lengths: np.ndarray) -> pd.DataFrame:
    """Heads whose attention goes mostly to the previous token (prev) or to the query itself
    (self), as Clark et al.'s behaviours: the mean over sequences of tr_t(A) / (n - |t|), the
    mean attention per query row at offset t (t = -1: previous, 0: self), above
    POSITIONAL_MASS. `trt`: position_corpus's `sequence layer head t value` table; lengths [N]
    real pieces per sequence. Returns `layer head behaviour mass`."""
    rows = trt[trt["t"].isin((-1, 0))].copy()
    n = lengths[rows["sequence"].to_numpy()]
    rows["mass"] = rows["value"] / np.maximum(n - rows["t"].abs().to_numpy(), 1)
    mean = rows.groupby(["layer", "head", "t"], as_index=False)["mass"].mean()
    mean["behaviour"] = mean["t"].map({-1: "prev", 0: "self"})
    chosen = mean[mean["mass"] > POSITIONAL_MASS]
    return chosen[["layer", "head", "behaviour", "mass"]].reset_index(drop=True)


def band_singular_value_table(weights: CanonicalModel) -> pd.DataFrame:
    """`layer head band index singular_value`: the singular values of W_Q^b (W_K^b)^T [d, d],
    the bilinear form band b rotates (query head h, its key/value head; rank <= the band's
    dims; biases left out), per layer, head and band, float64, descending (index 1-based).
    Where the model normalises q and k first (QK-norm) the form acts on the normed
    projections' directions, not on x itself."""
    rows = []
    for l, layer in enumerate(weights.layers):
        dims = _band_dims(layer.rotary, layer.d_head, "cpu")
        for h in range(layer.n_heads):
            W_Q, W_K = layer.W_Q[h].double().cpu(), layer.W_K[layer.kv_head(h)].double().cpu()
            for b, band_dims in enumerate(dims):
                R_Q = torch.linalg.qr(W_Q[:, band_dims], mode="r").R
                R_K = torch.linalg.qr(W_K[:, band_dims], mode="r").R
                values = torch.linalg.svdvals(R_Q @ R_K.T).numpy()
                for index, value in enumerate(values, start=1):
                    rows.append((l + 1, h + 1, b, index, float(value)))
    columns = ["layer", "head", "band", "index", "singular_value"]
    return pd.DataFrame(rows, columns=columns)
