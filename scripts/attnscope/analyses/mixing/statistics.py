"""Corpus statistics of the mixing maps: mixing ratio, RSA between scopes, FF effect on pairs.

Every accumulator takes one batch at a time (torch tensors [B, n, ...]) and keeps float64
state on the CPU; `table()` returns the tidy table (layers 1-based, `all` = over layers).
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import torch
from scipy.stats import rankdata

from attnscope.core.checks import require_finite
from attnscope.core.streaming import Moments


def vector_mixing_ratio(parts: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """||sum_{j != i} z_ij|| / (||sum_{j != i} z_ij|| + ||z_ii||) (Kobayashi 2021), bias left out.

    parts [B, c, n, d] of the c queries from position `offset` on -> [B, c] (0/0 -> 0 for a
    token with no parts at all).
    """
    own = parts.diagonal(offset=offset, dim1=1, dim2=2).transpose(1, 2)  # [B, c, d]
    return mixing_ratio_of((parts.sum(2) - own).norm(dim=-1), own.norm(dim=-1))


def mixing_ratio_of(others: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """others / (others + own) from the norms ||sum_{j != i} z_ij|| and ||z_ii|| [B, c]
    (0/0 -> 0)."""
    total = others + own
    return torch.where(total > 0, others / total.clamp_min(1e-30), torch.zeros_like(total))


def weight_mixing_ratio(weights: torch.Tensor) -> torch.Tensor:
    """The same ratio for a scalar map: sum_{j != i} w_ij / sum_j w_ij.  [B, n, n] -> [B, n]"""
    own = weights.diagonal(dim1=1, dim2=2)
    total = weights.sum(-1)
    return torch.where(total > 0, (total - own) / total.clamp_min(1e-30), torch.zeros_like(total))


class MixingRatios:
    """Mean and sd of the mixing ratio over real query tokens per (scope, layer): the
    `Moments` of one slot per (scope, layer)."""

    def __init__(self, scopes: tuple[str, ...], n_layers: int):
        self.scopes, self.n_layers = scopes, n_layers
        self.moments = Moments((len(scopes), n_layers))

    def add(self, scope: str, layer: int, ratio: torch.Tensor, mask: torch.Tensor) -> None:
        """ratio [B, n] of 0-based `layer`; only real tokens (mask 1) count."""
        self.moments.add((self.scopes.index(scope), layer), ratio[mask.bool()])

    def table(self) -> pd.DataFrame:
        """`scope layer mean sd` per layer, then `layer` = all (every token of every layer)."""
        m, rows = self.moments, []
        for s, scope in enumerate(self.scopes):
            slots = [(str(layer + 1), np.s_[s, layer]) for layer in range(self.n_layers)]
            slots.append(("all", np.s_[s, :]))
            for label, at in slots:
                n, t, t2 = m.count[at].sum(), m.total[at].sum(), m.total_sq[at].sum()
                mean = t / n if n else np.nan
                sd = np.sqrt(max(t2 / n - mean**2, 0.0)) if n else np.nan
                rows.append((scope, label, mean, sd))
        return pd.DataFrame(rows, columns=["scope", "layer", "mean", "sd"])


def map_ranks(maps: dict[str, torch.Tensor], pairs: torch.Tensor) -> dict[str, list[np.ndarray]]:
    """Per scope and sequence, the average ranks of the map entries over visible pairs.

    maps {scope: [B, n, n]}, pairs [B, n, n] bool -> {scope: [ranks of sequence b, ...]}
    An inf or NaN entry raises NonFiniteError (its ranks would be NaN, and `ScopeRSA` leaves
    NaN correlations out: those of constant maps).
    """
    for scope, values in maps.items():
        require_finite(values[pairs.to(values.device)], f"{scope} maps ranked for the RSA")
    keep = pairs.cpu().numpy()
    return {
        scope: [rankdata(m[k]) for m, k in zip(values.double().cpu().numpy(), keep, strict=True)]
        for scope, values in maps.items()
    }


def spearman_of_ranks(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson correlation of two rank vectors (Spearman's rho; NaN if either is constant)."""
    a, b = a - a.mean(), b - b.mean()
    denominator = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / denominator) if denominator > 0 else np.nan


class ScopeRSA:
    """Spearman between two scopes' flattened n x n maps per sequence, averaged over sequences
    (NaN sequences, e.g. one-token ones, skipped); `all` averages the layers' means."""

    def __init__(self, scopes: tuple[str, ...], n_layers: int):
        self.scopes, self.n_layers = scopes, n_layers
        self.pairs = list(itertools.combinations(scopes, 2))
        self.total = np.zeros((n_layers, len(self.pairs)))
        self.count = np.zeros((n_layers, len(self.pairs)))

    def add(self, layer: int, maps: dict[str, torch.Tensor], pairs: torch.Tensor) -> None:
        ranks = map_ranks(maps, pairs)
        for p, (a, b) in enumerate(self.pairs):
            for ra, rb in zip(ranks[a], ranks[b], strict=True):
                rho = spearman_of_ranks(ra, rb) if len(ra) > 1 else np.nan
                if np.isfinite(rho):
                    self.total[layer, p] += rho
                    self.count[layer, p] += 1

    def table(self) -> pd.DataFrame:
        """`layer scope_a scope_b spearman`, then `layer` = all (mean over layers)."""
        with np.errstate(invalid="ignore"):
            mean = self.total / self.count
        rows = [
            (str(layer + 1), a, b, mean[layer, p])
            for layer in range(self.n_layers)
            for p, (a, b) in enumerate(self.pairs)
        ]
        rows += [("all", a, b, np.nanmean(mean[:, p])) for p, (a, b) in enumerate(self.pairs)]
        return pd.DataFrame(rows, columns=["layer", "scope_a", "scope_b", "spearman"])


def row_normalised(maps: torch.Tensor) -> torch.Tensor:
    """Each query row divided by its sum (rows summing to 0 stay 0).  [B, n, n]"""
    total = maps.sum(-1, keepdim=True)
    return torch.where(total > 0, maps / total.clamp_min(1e-30), torch.zeros_like(maps))


class FfPairs:
    """How the FF block changes the contribution of piece j to piece i (Kobayashi 2024, Tabs 1-2).

    Per layer: change_ij = row-normalised AttnResLnFf - row-normalised AttnResLn for visible
    pairs i != j, summed per (key piece id, query piece id) over the corpus with a count.
    """

    def __init__(self, n_layers: int):
        self.sums: list[pd.DataFrame | None] = [None] * n_layers

    def add(
        self,
        layer: int,
        before: torch.Tensor,
        after: torch.Tensor,
        pairs: torch.Tensor,
        input_ids: np.ndarray,
    ) -> None:
        """before, after [B, n, n] (AttnResLn, AttnResLnFf maps), pairs [B, n, n] bool,
        input_ids [B, n]."""
        change = (row_normalised(after) - row_normalised(before)).double()
        off_diagonal = pairs & ~torch.eye(pairs.shape[-1], dtype=torch.bool, device=pairs.device)
        b, i, j = (t.cpu().numpy() for t in torch.nonzero(off_diagonal, as_tuple=True))
        frame = pd.DataFrame(
            {
                "key": input_ids[b, j].astype(np.int64),
                "query": input_ids[b, i].astype(np.int64),
                "total": change[off_diagonal].cpu().numpy(),
                "count": 1,
            }
        )
        grouped = frame.groupby(["key", "query"]).sum()
        current = self.sums[layer]
        self.sums[layer] = grouped if current is None else current.add(grouped, fill_value=0)

    def table(self, top_k: int, token_of) -> pd.DataFrame:
        """`layer change rank key_token query_token mean_change count`: per layer the top_k
        amplified (largest mean change) and suppressed (smallest) pairs seen at least twice.
        `token_of`: piece id -> string."""
        rows = []
        for layer, sums in enumerate(self.sums):
            if sums is None:
                continue
            seen = sums[sums["count"] >= 2]
            mean = (seen["total"] / seen["count"]).rename("mean_change")
            ranked = {
                "amplified": mean.sort_values(ascending=False, kind="stable").head(top_k),
                "suppressed": mean.sort_values(ascending=True, kind="stable").head(top_k),
            }
            for change, top in ranked.items():
                for rank, ((key, query), value) in enumerate(top.items(), start=1):
                    count = int(seen.loc[(key, query), "count"])
                    rows.append(
                        (layer + 1, change, rank, token_of(key), token_of(query), value, count)
                    )
        columns = ["layer", "change", "rank", "key_token", "query_token", "mean_change", "count"]
        return pd.DataFrame(rows, columns=columns)
