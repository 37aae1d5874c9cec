"""Norm-based analysis of attention (Kobayashi et al. 2020, "Attention is Not Only a Weight").

The attention block's output is a sum of transformed vectors (seed 000, Eq. 7-8):

    y_i = sum_h sum_j alpha^h_ij f^h(x_j) + b_O,    f^h(x) = (x W_V^h + b_V^h) W_O^h,

where x is what the block reads (X_l for post-LN models, LN(X_l) for pre-LN GPT-2). Per layer
this module streams the stored hidden states one batch at a time and accumulates:

- ||x|| and ||f^h(x)|| dispersion (Tables 1-2): count, sum, sum of squares, max, min in
  float64 over every real token (each token once per layer, and once per head for f(x));
  sd is the population sd (ddof 0), cv = sd / mean;
- alpha vs ||f(x)|| Spearman per key category over all layers and heads (Table 3), from a
  seeded uniform sample of the (alpha^h_ij, ||f^h(x_j)||) pairs (`BottomKSample`; size and
  reasons in `NormsAccumulator`). Exact ranks over all pairs would need them all in memory
  (~L H N n^2, 10^9 for MiniLM on wiki); per-layer ranks would change the statistic, which
  the paper pools over all heads. A uniform sample estimates the same pooled rho;
- [SEP] per head (Fig. 4) and category sums per layer (Fig. 5);
- the head-summed map ||sum_h alpha^h_ij f^h(x_j)|| [n, n] per sequence (`head_summed_norms`).

Which pairs (i, j) count: query i and key j both real tokens, and j <= i for causal models
(keys a query cannot see have alpha = 0 and are left out, not counted as zeros). Averages
"per sequence" (sep_heads, token_class_layer) take the mean over the real query tokens of a
sequence and over heads, then the mean over sequences, each sequence weighing the same.

Layers and heads are 1-based in every table; `layer` arguments of functions are 0-based
(the store's `hidden/{l}` and `weights.layers[l]`).
"""

from __future__ import annotations

import logging

import h5py
import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr

from attnscope.architectures import architecture
from attnscope.core.attention import (
    attention_input,
    attention_output,
    attention_probs,
    value_vectors,
    visible_pairs,
)
from attnscope.core.canonical import CanonicalModel
from attnscope.core.store import HiddenStates
from attnscope.core.tokens import CATEGORY_NAMES, CLS, OTHER, PUNCT, SEP

CATEGORIES = (CLS, SEP, PUNCT, OTHER)  # table order, as in Table 3 of the paper
SAMPLE_FIELDS = ("layer", "head", "alpha", "fx_norm")


class DecompositionError(RuntimeError):
    """The decomposed attention output does not rebuild the module's real output."""


def head_summed_norms(alpha: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
    """||sum_h alpha^h_ij f^h(x_j)|| for every query i and key j.  -> [B, n, n]

    alpha [B, H, n, n], fx [B, H, n, d].

    With a = alpha[:, i, j] over heads and the Gram matrix G_j = F_j F_j^T [H, H] of the
    f^h(x_j), ||sum_h a_h f^h(x_j)||^2 = a^T G_j a. Memory O(B H n^2 + B n H^2): no
    [B, H, n, n, d] tensor. The quadratic form runs in float64 (heads may cancel).
    """
    gram = torch.einsum("bhjd,bgjd->bjhg", fx, fx).double()
    a = alpha.double()
    squared = (torch.einsum("bhij,bjhg->bgij", a, gram) * a).sum(1)
    return squared.clamp_min(0).sqrt().to(alpha.dtype)


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
        shape = np.shape(self.count)
        columns = {
            name: idx.ravel() + 1 for name, idx in zip(names, np.indices(shape), strict=True)
        }
        stats = dict(mean=mean, sd=sd, cv=cv, max=self.maximum, min=self.minimum)
        columns.update({k: np.ravel(v) for k, v in stats.items()})
        return pd.DataFrame(columns)


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
    `size` rows (amortised O(1) per row); `compact()` cuts it now.
    """

    def __init__(self, size: int, n_fields: int):
        self.size = size
        self.seen = 0
        self.keys = torch.empty(0)
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
            self._buffer.append((keys, rows.to(torch.float64)))
            self._buffered += len(keys)
        if self._buffered >= self.size:
            self.compact()

    def compact(self) -> None:
        """Merge the buffer and keep the `size` rows with the smallest keys in `keys`, `rows`."""
        if not self._buffer:
            return
        keys = torch.cat([self.keys, *(k for k, _ in self._buffer)])
        rows = torch.cat([self.rows, *(r for _, r in self._buffer)])
        self._buffer, self._buffered = [], 0
        if len(keys) > self.size:
            keep = torch.topk(keys, self.size, largest=False).indices
            keys, rows = keys[keep], rows[keep]
        if len(keys) >= self.size:
            self._bound = float(keys.max())
        self.keys, self.rows = keys, rows

    def below(self, p: float, limit: int) -> torch.Tensor:
        """The rows with key < p (a Bernoulli(p) sample), at most `limit` of them (those with
        the smallest keys: a uniform subsample).  [m, fields]"""
        if limit > self.size:
            raise ValueError(f"limit {limit} exceeds the sample size {self.size}")
        self.compact()
        order = torch.argsort(self.keys)
        order = order[self.keys[order] < p][:limit]
        return self.rows[order]


class NormsAccumulator:
    """Every statistic of the analysis, fed one batch of one layer at a time.

    Spearman sample: per category, a `BottomKSample` of `sample_size` (layer, head, alpha,
    ||f(x_j)||) rows over all visible pairs of all layers and heads; keys come from a CPU
    generator seeded with `seed`, so the sample does not depend on the device. Keys are
    float32 (resolution 2^-24): ties at the cut are broken without regard to the data, so the
    sample stays uniform. The default size, 10^6 pairs per category, puts the sampling error
    of rho near 1/sqrt(10^6) = 0.001, below the two decimals of Table 3, while an exact rho
    over the ~10^9 pairs of a corpus would mean ranking them all in memory.
    """

    def __init__(self, n_layers: int, n_heads: int, sample_size: int, seed: int):
        L, H, C = n_layers, n_heads, len(CATEGORIES)
        self.x = Moments((L,))
        self.fx = Moments((L, H))
        self.n_sequences = np.zeros(L)
        self.category_alpha = np.zeros((L, C))
        self.category_alpha_fx = np.zeros((L, C))
        self.sep_alpha = np.zeros((L, H))
        self.sep_fx = Moments((L, H))
        self.samples = {c: BottomKSample(sample_size, len(SAMPLE_FIELDS)) for c in CATEGORIES}
        self.generator = torch.Generator().manual_seed(seed)

    def add_batch(
        self,
        layer: int,
        x: torch.Tensor,
        alpha: torch.Tensor,
        fx: torch.Tensor,
        mask: torch.Tensor,
        category: np.ndarray,
        causal: bool,
    ) -> None:
        """x [B, n, d] (attention input), alpha [B, H, n, n], fx [B, H, n, d], mask [B, n],
        category [B, n] (codes of attnscope.core.tokens)."""
        real = mask.bool()
        cat = torch.from_numpy(np.asarray(category)).to(alpha.device)
        x_norm = x.norm(dim=-1)  # [B, n]
        fx_norm = fx.norm(dim=-1)  # [B, H, n]
        self.x.add(layer, x_norm[real])
        self.fx.add(layer, fx_norm.permute(1, 0, 2)[:, real])
        is_sep = (cat == SEP) & real
        self.sep_fx.add(layer, fx_norm.permute(1, 0, 2)[:, is_sep])

        # Per query i: summed alpha and alpha * ||f(x_j)|| over the keys j of each category.
        onehot = torch.stack([cat == c for c in CATEGORIES], -1).to(alpha.dtype)  # [B, n, C]
        alpha_c = torch.einsum("bhij,bjc->bhic", alpha, onehot)
        alpha_fx_c = torch.einsum("bhij,bhj,bjc->bhic", alpha, fx_norm, onehot)
        query_weight = real.double() / real.sum(1, keepdim=True)  # mean over real queries
        seq_alpha = torch.einsum("bhic,bi->bhc", alpha_c.double(), query_weight)
        seq_alpha_fx = torch.einsum("bhic,bi->bhc", alpha_fx_c.double(), query_weight)
        self.category_alpha[layer] += seq_alpha.mean(1).sum(0).cpu().numpy()
        self.category_alpha_fx[layer] += seq_alpha_fx.mean(1).sum(0).cpu().numpy()
        self.sep_alpha[layer] += seq_alpha[..., CATEGORIES.index(SEP)].sum(0).cpu().numpy()
        self.n_sequences[layer] += len(mask)

        self._sample(layer, alpha, fx_norm, visible_pairs(mask, causal), cat)

    def _sample(self, layer, alpha, fx_norm, pairs, cat) -> None:
        """Offer every visible pair to the sample of its key's category, in one pass: a pair
        is a candidate when its key is below that sample's threshold (0 for pairs that do
        not count)."""
        B, H, n, _ = alpha.shape
        alpha, fx_norm, pairs, cat = alpha.cpu(), fx_norm.cpu(), pairs.cpu(), cat.cpu()
        keys = torch.rand((B, H, n, n), generator=self.generator)
        threshold = torch.zeros(max(CATEGORIES) + 2)  # by category code + 1 (PAD -1 -> 0)
        for c, sample in self.samples.items():
            threshold[c + 1] = sample.threshold()
        bound = pairs * threshold[cat.long() + 1][:, None, :]  # [B, n, n]
        b, h, i, j = (keys < bound[:, None]).nonzero(as_tuple=True)
        a = alpha[b, h, i, j]
        rows = torch.stack(
            [torch.full_like(a, layer + 1), (h + 1).to(a.dtype), a, fx_norm[b, h, j]], -1
        )
        chosen_keys, key_category = keys[b, h, i, j], cat[b, j]
        queries_per_key = pairs.sum(1)  # [B, n]
        for c, sample in self.samples.items():
            of_category = key_category == c
            seen = int(queries_per_key[cat == c].sum()) * H
            sample.offer(chosen_keys[of_category], rows[of_category], seen)

    def tables(self, sample_rate: float, scatter_points: int) -> dict[str, pd.DataFrame]:
        """Every table of the analysis, by output name (see the module docstring)."""
        names = [CATEGORY_NAMES[c] for c in CATEGORIES]
        for sample in self.samples.values():
            sample.compact()
        L, H = self.fx.count.shape
        per_seq = self.n_sequences[:, None]
        fx = self.fx.frame(("layer", "head"))
        x = self.x.frame(("layer",))
        sep_fx = self.sep_fx.frame(("layer", "head"))
        return {
            "x_dispersion": x,
            "fx_dispersion": fx,
            "x_summary": summary(x, self.x.pooled()),
            "fx_summary": summary(fx, self.fx.pooled()),
            "alpha_fx_spearman": pd.DataFrame(
                {
                    "category": names,
                    "n_vectors": [self.samples[c].seen for c in CATEGORIES],
                    "n_sampled": [len(self.samples[c].keys) for c in CATEGORIES],
                    "spearman": [spearman(self.samples[c].rows) for c in CATEGORIES],
                }
            ),
            "alpha_fx_sample": pd.concat(
                [
                    pd.DataFrame(
                        self.samples[c].below(sample_rate, scatter_points).numpy(),
                        columns=list(SAMPLE_FIELDS),
                    ).assign(category=CATEGORY_NAMES[c])
                    for c in CATEGORIES
                ]
            ).astype({"layer": int, "head": int})[["category", *SAMPLE_FIELDS]],
            "sep_heads": pd.DataFrame(
                {
                    "layer": np.repeat(np.arange(1, L + 1), H),
                    "head": np.tile(np.arange(1, H + 1), L),
                    "alpha_sep": (self.sep_alpha / per_seq).ravel(),
                    "fx_sep": sep_fx["mean"].to_numpy(),
                    "n_sep": self.sep_fx.count.ravel().astype(int),
                }
            ),
            "token_class_layer": pd.DataFrame(
                {
                    "layer": np.repeat(np.arange(1, L + 1), len(CATEGORIES)),
                    "category": names * L,
                    "alpha": (self.category_alpha / per_seq).ravel(),
                    "alpha_fx": (self.category_alpha_fx / per_seq).ravel(),
                }
            ),
        }


def spearman(rows: torch.Tensor) -> float:
    """Spearman's rho between the alpha and fx_norm columns of sample rows (NaN if undefined)."""
    alpha = rows[:, SAMPLE_FIELDS.index("alpha")].numpy()
    fx = rows[:, SAMPLE_FIELDS.index("fx_norm")].numpy()
    if len(alpha) < 2 or np.ptp(alpha) == 0 or np.ptp(fx) == 0:
        return float("nan")
    return float(spearmanr(alpha, fx).statistic)


def summary(table: pd.DataFrame, pooled: Moments) -> pd.DataFrame:
    """The paper's summary rows: the slots of largest and smallest cv (`row` max_cv, min_cv)
    and all slots pooled (`row` all, no layer/head)."""
    pick = table.loc[[table["cv"].idxmax(), table["cv"].idxmin()]].copy()
    pick.insert(0, "row", ["max_cv", "min_cv"])
    everything = pooled.frame().assign(row="all")
    out = pd.concat([pick, everything], ignore_index=True)
    indices = [c for c in ("layer", "head") if c in out]
    return out.astype({c: "Int64" for c in indices})


def decomposition_residual(y: torch.Tensor, y_real: torch.Tensor, mask: torch.Tensor):
    """(max |y - y_real|, max_i ||y_i - y_real_i|| / ||y_real_i||) over real tokens i."""
    real = mask.bool()
    diff = (y - y_real)[real].double()
    ref = y_real[real].double()
    max_abs = float(diff.abs().max())
    max_rel = float((diff.norm(dim=-1) / ref.norm(dim=-1)).max())
    return max_abs, max_rel


def analyse_corpus(
    store: HiddenStates,
    weights: CanonicalModel,
    model,
    maps: h5py.File,
    *,
    batch_size: int,
    device: str,
    sample_size: int,
    seed: int,
    max_rel_residual: float,
    maps_dtype: str = "float32",
    log: logging.Logger | None = None,
) -> tuple[NormsAccumulator, pd.DataFrame]:
    """Stream the store layer by layer; return the accumulator and the residual table.

    Writes `maps/{l}` [N, L, L] (l 1-based; rows query i, columns key j; 0 where the pair
    does not count) into the open HDF5 file `maps`, batch by batch. The first batch of every
    layer is checked against the module's own output (`Architecture.attention_output`); a
    relative residual above `max_rel_residual` raises DecompositionError.
    """
    acc = NormsAccumulator(weights.n_layers, weights.n_heads, sample_size, seed)
    maps.attrs["description"] = "||sum_h alpha^h_ij f^h(x_j)||; maps/{layer} [seq, query i, key j]"
    maps.attrs["layers"] = "1-based"
    N, L = store.n_sequences, store.length
    module_output = architecture(model.config.model_type).attention_output
    residuals = []
    for l, layer in enumerate(weights.layers):
        dataset = maps.create_dataset(
            f"maps/{l + 1}", (N, L, L), dtype=maps_dtype, chunks=(1, L, L)
        )
        for k, batch in enumerate(store.batches(l, batch_size, device)):
            with torch.no_grad():
                alpha = attention_probs(batch.X, batch.mask, layer)
                fx = value_vectors(batch.X, layer)
                if k == 0:
                    y = attention_output(alpha, fx, layer)
                    y_real = module_output(model, l, batch.X, batch.mask)
                    max_abs, max_rel = decomposition_residual(y, y_real, batch.mask)
                    residuals.append((l + 1, int(batch.mask.sum()), max_abs, max_rel))
                    if log:
                        log.info("layer %d: residual abs %.3g rel %.3g", l + 1, max_abs, max_rel)
                    if not max_rel <= max_rel_residual:
                        raise DecompositionError(
                            f"layer {l + 1}: the decomposition misses the module output by "
                            f"{max_rel:.3g} (relative) > {max_rel_residual:g}"
                        )
                x = attention_input(batch.X, layer)
                acc.add_batch(l, x, alpha, fx, batch.mask, batch.category, layer.causal)
                pairs = visible_pairs(batch.mask, layer.causal)
                norm_map = head_summed_norms(alpha, fx) * pairs
            n = batch.X.shape[1]
            dataset[batch.start : batch.stop, :n, :n] = norm_map.cpu().numpy()
    residual = pd.DataFrame(
        residuals, columns=["layer", "n_tokens", "max_abs_residual", "max_rel_residual"]
    )
    return acc, residual
