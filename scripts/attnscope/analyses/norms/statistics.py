"""Statistics of the norm-based analysis (Kobayashi et al. 2020, "Attention is Not Only a Weight").

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
- the head-summed map ||sum_h alpha^h_ij f^h(x_j)|| [n, n] per sequence (`head_summed_norms`);
- attention sinks per head (`sinks`: weight and norm share of the first position) and
  massive activations per hidden state (`massive_activations`: the first position's largest
  feature against the other positions'), the same pass's decoder view of [CLS]/[SEP].

Which pairs (i, j) count: query i and key j both real tokens, and j <= i for causal models
(keys a query cannot see have alpha = 0 and are left out, not counted as zeros). Averages
"per sequence" (sep_heads, token_class_layer) take the mean over the real query tokens of a
sequence and over heads, then the mean over sequences, each sequence weighing the same.

Layers and heads are 1-based in every table; `layer` arguments of functions are 0-based
(the store's `hidden/{l}` and `weights.layers[l]`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from scipy.stats import spearmanr

from attnscope.analyses.norms.massive_activations import MassiveActivations
from attnscope.analyses.norms.sinks import SinkStatistics
from attnscope.core.attention import visible_pairs
from attnscope.core.streaming import BottomKSample, Moments
from attnscope.core.tables import indexed_table
from attnscope.core.tokens import CATEGORY_NAMES, CLS, OTHER, PUNCT, SEP

CATEGORIES = (CLS, SEP, PUNCT, OTHER)  # table order, as in Table 3 of the paper
SAMPLE_FIELDS = ("layer", "head", "alpha", "fx_norm")


class NormsAccumulator:
    """Every statistic of the analysis, fed one batch of one layer at a time.

    Spearman sample: per category, a `BottomKSample` of `sample_size` (layer, head, alpha,
    ||f(x_j)||) rows over all visible pairs of all layers and heads; the keys of the k-th batch
    of layer l come from a CPU generator seeded with (`seed`, l, k), so the sample depends on
    neither the device nor the order the layers are run in (layer shards give the same one).
    Keys are float64, so ties at the cut, which a merge of shards could break another way,
    practically never occur. The default size, 10^6 pairs per category, puts the sampling error
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
        self.seed = seed
        self.batches = np.zeros(L, dtype=np.int64)  # batches seen per layer: their keys' seeds
        self.sinks = SinkStatistics(L, H)  # fed by the caller: it needs the layer's window
        self.massive = MassiveActivations(L + 1)  # hidden/0 .. hidden/L

    def add_batch(
        self,
        layer: int,
        x: torch.Tensor,
        alpha: torch.Tensor,
        fx_norm: torch.Tensor,
        mask: torch.Tensor,
        category: np.ndarray,
        causal: bool,
    ) -> None:
        """x [B, n, d] (attention input), alpha [B, H, n, n], fx_norm [B, H, n] (||f^h(x_j)||),
        mask [B, n], category [B, n] (codes of attnscope.core.tokens)."""
        real = mask.bool()
        cat = torch.from_numpy(np.asarray(category)).to(alpha.device)
        x_norm = x.norm(dim=-1)  # [B, n]
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

    def _generator(self, layer: int) -> torch.Generator:
        """The key generator of this layer's next batch, seeded with (seed, layer, batch)."""
        entropy = np.random.SeedSequence([self.seed, layer, int(self.batches[layer])])
        self.batches[layer] += 1
        return torch.Generator().manual_seed(int(entropy.generate_state(1, np.uint64)[0] >> 1))

    def _sample(self, layer, alpha, fx_norm, pairs, cat) -> None:
        """Offer every visible pair to the sample of its key's category, in one pass: a pair
        is a candidate when its key is below that sample's threshold (0 for pairs that do
        not count)."""
        B, H, n, _ = alpha.shape
        alpha, fx_norm, pairs, cat = alpha.cpu(), fx_norm.cpu(), pairs.cpu(), cat.cpu()
        keys = torch.rand((B, H, n, n), generator=self._generator(layer), dtype=torch.float64)
        threshold = torch.zeros(max(CATEGORIES) + 2, dtype=torch.float64)  # by code + 1 (PAD: 0)
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
            "sep_heads": indexed_table(
                {
                    "alpha_sep": self.sep_alpha / per_seq,
                    "fx_sep": sep_fx["mean"].to_numpy(),
                    "n_sep": self.sep_fx.count.astype(int),
                },
                layer=L,
                head=H,
            ),
            "token_class_layer": indexed_table(
                {
                    "alpha": self.category_alpha / per_seq,
                    "alpha_fx": self.category_alpha_fx / per_seq,
                },
                layer=L,
                category=names,
            ),
            "attention_sinks": self.sinks.table(),
            "massive_activations": self.massive.table(),
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
