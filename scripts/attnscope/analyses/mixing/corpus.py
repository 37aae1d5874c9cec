"""One streaming pass of the mixing analysis over a store (Kobayashi et al. 2021, 2024).

Per layer and batch: the layer's stages decomposed (`layer_decomposition.layer_stages`), each
stage checked against the real module output, its norm map ||z_ij|| written to
`maps.h5` `{scope}/{layer}`, and the statistics fed with the batch's maps. At most one batch of
one layer's decomposition is in memory.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import h5py
import pandas as pd
import torch

from attnscope.analyses.mixing.layer_decomposition import (
    SCOPES,
    WEIGHT_SCOPES,
    Stage,
    closing_layer_norm,
    layer_stages,
    reference_outputs,
    weight_maps,
)
from attnscope.analyses.mixing.statistics import (
    MixingRatios,
    ScopeRSA,
    vector_mixing_ratio,
    weight_mixing_ratio,
)
from attnscope.architectures import architecture
from attnscope.core import checks
from attnscope.core.attention import attention_probs, layer_visible_pairs
from attnscope.core.canonical import CanonicalModel
from attnscope.core.store import HiddenStates

COMPLETENESS = "FfCompleteness"


@dataclass
class MixingResult:
    ratios: MixingRatios
    rsa: ScopeRSA
    check: pd.DataFrame


class ResidualLog:
    """The largest absolute and relative residual per (layer, stage) over every batch."""

    def __init__(self, bound: float, log: logging.Logger | None):
        self.bound, self.log = bound, log
        self.worst: dict[tuple[int, str], tuple[float, float]] = {}

    def add(self, layer: int, stage: str, got, want, mask) -> None:
        """got, want [B, n, d] over real tokens (mask [B, n])."""
        self.record(layer, stage, *checks.residual(got, want, mask))

    def record(self, layer: int, stage: str, max_abs: float, max_rel: float) -> None:
        old = self.worst.get((layer, stage), (0.0, 0.0))
        self.worst[(layer, stage)] = (max(old[0], max_abs), max(old[1], max_rel))
        checks.require(f"layer {layer}: mixing stage {stage} vs real output", max_rel, self.bound)

    def table(self) -> pd.DataFrame:
        rows = [(layer, stage, a, r) for (layer, stage), (a, r) in self.worst.items()]
        table = pd.DataFrame(rows, columns=["layer", "stage", "max_abs", "max_rel"])
        if self.log:
            for stage, group in table.groupby("stage", sort=False):
                self.log.info("%s: largest relative residual %.3g", stage, group["max_rel"].max())
        return table


def layer_scope_maps(
    model,
    weights: CanonicalModel,
    l: int,
    X: torch.Tensor,
    mask: torch.Tensor,
    X_next: torch.Tensor | None,
    ig_steps: int,
    residuals: ResidualLog,
    on_stage: Callable[[Stage], None] | None = None,
) -> dict[str, torch.Tensor]:
    """Every scope's map of layer `l` (0-based) for one batch.  {scope: [B, n, n]}

    X [B, n, d] the layer input, mask [B, n]; X_next [B, n, d] the stored next hidden state
    (None: recomputed). Each stage is checked against the real module output (`residuals`
    raises above its bound) and handed to `on_stage` before the next one overwrites it.
    Invisible pairs and padding rows are 0.
    """
    layer = weights.layers[l]
    closing = closing_layer_norm(weights.outline, weights.final_ln, l)
    y = architecture(model.config.model_type).attention_output(model, l, X, mask)
    reference = reference_outputs(X, y, layer, closing, X_next)
    maps = weight_maps(attention_probs(X, mask, layer))
    extra: dict = {}
    for stage in layer_stages(X, mask, layer, closing, ig_steps, extra):
        residuals.add(l + 1, stage.scope, stage.total(), reference[stage.scope], mask)
        if stage.scope == "AttnResLnFf":
            residuals.add(l + 1, COMPLETENESS, stage.total(), extra["ff_real"], mask)
        maps[stage.scope] = stage.parts.norm(dim=-1)
        if on_stage is not None:
            on_stage(stage)
    keep = layer_visible_pairs(mask, layer)  # padding rows and keys are invisible too
    return {scope: maps[scope] * keep for scope in SCOPES}


def analyse_corpus(
    store: HiddenStates,
    weights: CanonicalModel,
    model,
    maps: h5py.File,
    *,
    batch_size: int,
    device: str,
    ig_steps: int,
    max_rel_residual: float,
    maps_dtype: str,
    log: logging.Logger | None = None,
    layers: list[int] | None = None,
) -> MixingResult:
    """Stream the store layer by layer; write `{scope}/{layer}` [N, L, L] into `maps`.
    `layers` (0-based; None: all): a layer shard's layers, whose result is `merged` with the
    other shards'.

    Every stage of every batch is checked against the real module output (attention from the
    module itself, the last residual state from the stored next hidden state when the store is
    float32) and the FF split's completeness against g(U) W_out + b_out; a relative residual
    above `max_rel_residual` raises `checks.CheckError`.
    """
    N, L = store.n_sequences, store.length
    maps.attrs["scopes"] = list(SCOPES)
    maps.attrs["layers"] = "1-based"
    maps.attrs["description"] = "{scope}/{layer} [seq, query i, key j]: ||z_ij|| or weights"
    maps.attrs["ig_steps"] = ig_steps
    maps.attrs["causal"] = bool(weights.causal)
    maps.attrs["sliding_window"] = [layer.sliding_window or 0 for layer in weights.outline]
    stored_exact = store.exact
    ratios = MixingRatios(SCOPES, weights.n_layers)
    rsa = ScopeRSA(SCOPES, weights.n_layers)
    residuals = ResidualLog(max_rel_residual, log)
    for l in range(weights.n_layers) if layers is None else layers:
        layer = weights.layers[l]
        datasets = {
            scope: maps.create_dataset(
                f"{scope}/{l + 1}", (N, L, L), dtype=maps_dtype, chunks=(1, L, L)
            )
            for scope in SCOPES
        }
        for batch in store.batches(l, batch_size, device):
            X, mask = batch.X, batch.mask
            n = X.shape[1]
            pairs = layer_visible_pairs(mask, layer)
            with torch.no_grad():
                X_next = None
                if stored_exact:
                    X_next = torch.from_numpy(store.hidden(l + 1, batch.start, batch.stop)[:, :n])
                    X_next = X_next.to(device)

                def add_ratio(stage, l=l, mask=mask):
                    ratios.add(stage.scope, l, vector_mixing_ratio(stage.parts), mask)

                batch_maps = layer_scope_maps(
                    model, weights, l, X, mask, X_next, ig_steps, residuals, add_ratio
                )
                for scope in WEIGHT_SCOPES:
                    ratios.add(scope, l, weight_mixing_ratio(batch_maps[scope]), mask)
                rsa.add(l, batch_maps, pairs)
            for scope in SCOPES:
                datasets[scope][batch.start : batch.stop, :n, :n] = batch_maps[scope].cpu().numpy()
        if log:
            log.info("layer %d done", l + 1)
    return MixingResult(ratios, rsa, residuals.table())
