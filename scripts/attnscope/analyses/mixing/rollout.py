"""Rollout: per-layer contribution maps composed through the depth (Abnar & Zuidema 2020).

Each layer's map is normalised to rows summing to 1 and multiplied onto the product so far,
R_l = M_l R_{l-1} with R_0 = I. Attention rollout is the rollout of the AttnRes-w map,
(mean over heads of alpha + I) / 2; GlobEnc (Modarressi et al. 2022) rolls out the norm map
of attention + residual + LayerNorm (AttnResLn), and the whole-layer maps roll out the
same way. Rollout assumes each layer mixes contributions linearly by its own map; the
propagated decomposition (`propagation`) needs no such assumption, and `RolloutRSA` measures
where the two disagree.
"""

from __future__ import annotations

import torch

from attnscope.analyses.mixing.statistics import ScopeRSA, row_normalised
from attnscope.maps.scopes import PROPAGATED


def rollout_step(previous: torch.Tensor | None, layer_map: torch.Tensor) -> torch.Tensor:
    """R_l = rownorm(M_l) @ R_{l-1}; R_0 = I (previous None).  [B, n, n] -> [B, n, n]"""
    step = row_normalised(layer_map.double())
    return step if previous is None else step @ previous


def rollout_name(scope: str) -> str:
    """The baseline's name in the tables: `rollout <scope>`."""
    return f"rollout {scope}"


class RolloutRSA:
    """Spearman between each rollout and the propagated map per sequence over visible pairs,
    both normalised to rows summing to 1 (so every query row weighs alike), averaged over
    sequences per layer (`ScopeRSA`; baseline against baseline too)."""

    def __init__(self, scopes: tuple[str, ...], n_layers: int):
        self.scopes = scopes
        self.rsa = ScopeRSA((PROPAGATED, *map(rollout_name, scopes)), n_layers)

    def add(self, layer: int, propagated, rollouts: dict[str, torch.Tensor], pairs) -> None:
        """0-based layer; propagated [B, n, n] norms; rollouts {scope: [B, n, n]}."""
        maps = {PROPAGATED: row_normalised(propagated.double())}
        maps |= {rollout_name(scope): rollouts[scope] for scope in self.scopes}
        self.rsa.add(layer, maps, pairs)

    def table(self):
        """`layer baseline spearman`: each rollout against the propagated map, then every
        pair of rollouts (`baseline` "A ~ B"); layer `all` = mean over layers."""
        table = self.rsa.table()
        against = table["scope_a"] == PROPAGATED
        name = table["scope_b"].where(against, table["scope_a"] + " ~ " + table["scope_b"])
        out = table.assign(baseline=name)[["layer", "baseline", "spearman"]]
        return out.sort_values("baseline", key=lambda c: c.str.contains("~"), kind="stable")
