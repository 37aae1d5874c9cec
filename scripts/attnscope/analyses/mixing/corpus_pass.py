"""One streaming pass of the mixing analysis over a store (Kobayashi et al. 2021, 2024).

Per layer and batch: the layer's stages decomposed (`layer_decomposition.factored_stages`), each
stage checked against the real module output, its norm map ||z_ij|| written to
`maps.h5` `{scope}/{layer}`, and the statistics fed with the batch's maps. At most one batch of
one layer's decomposition is in memory, one query chunk of it at a time (`memory_budget_mb`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import h5py
import pandas as pd
import torch

from attnscope.analyses.mixing.settings import MixingSettings
from attnscope.analyses.mixing.statistics import (
    MixingRatios,
    ScopeRSA,
    vector_mixing_ratio,
    weight_mixing_ratio,
)
from attnscope.core.attention import layer_visible_pairs
from attnscope.core.checks import ResidualLog
from attnscope.core.store import HiddenStates
from attnscope.maps.layer_decomposition import SCOPES, WEIGHT_SCOPES
from attnscope.maps.layer_maps import LayerBatch, layer_scope_maps
from attnscope.model.loaded import LoadedModel


@dataclass
class MixingResult:
    ratios: MixingRatios
    rsa: ScopeRSA
    check: pd.DataFrame


def corpus_pass(
    store: HiddenStates,
    loaded: LoadedModel,
    maps: h5py.File,
    settings: MixingSettings,
    log: logging.Logger | None = None,
    layers: list[int] | None = None,
) -> MixingResult:
    """Stream the store layer by layer; write `{scope}/{layer}` [N, L, L] into `maps`.
    `layers` (0-based; None: all): a layer shard's layers, whose result is `merged` with the
    other shards'. `settings.memory_budget_mb`: the working memory of one query chunk of a
    layer's decomposition (`layer_maps.layer_scope_maps`); `max_rel_residual` below is
    `settings`'s too.

    Every stage of every batch is checked against the real module output (attention from the
    module itself, the last residual state from the stored next hidden state when the store is
    float32 and keeps it) and the FF split's completeness against g(U) W_out + b_out; a
    relative residual above `max_rel_residual` raises `checks.CheckError`.
    """
    weights, model = loaded.weights, loaded.module
    N, L = store.n_sequences, store.length
    batch_size, device, ig_steps = settings.batch_size, settings.device, settings.ig_steps
    maps.attrs["scopes"] = list(SCOPES)
    maps.attrs["layers"] = "1-based"
    maps.attrs["description"] = "{scope}/{layer} [seq, query i, key j]: ||z_ij|| or weights"
    maps.attrs["ig_steps"] = ig_steps
    maps.attrs["causal"] = bool(weights.causal)
    maps.attrs["sliding_window"] = [layer.sliding_window or 0 for layer in weights.outline]
    stored_exact = store.exact
    ratios = MixingRatios(SCOPES, weights.n_layers)
    rsa = ScopeRSA(SCOPES, weights.n_layers)
    residuals = ResidualLog(settings.max_rel_residual, log, "mixing")
    for l in range(weights.n_layers) if layers is None else layers:
        layer = weights.layers[l]
        datasets = {
            scope: maps.create_dataset(
                f"{scope}/{l + 1}", (N, L, L), dtype=settings.maps_dtype, chunks=(1, L, L)
            )
            for scope in SCOPES
        }
        for batch in store.batches(l, batch_size, device):
            X, mask = batch.X, batch.mask
            n = X.shape[1]
            pairs = layer_visible_pairs(mask, layer)
            with torch.no_grad():
                X_next = None
                if stored_exact and store.stores(l + 1):  # else recomputed from X
                    X_next = torch.from_numpy(store.hidden(l + 1, batch.start, batch.stop)[:, :n])
                    X_next = X_next.to(device)

                def add_ratio(stage, l=l, mask=mask):
                    ratio = vector_mixing_ratio(stage.parts, stage.offset)
                    ratios.add(stage.scope, l, ratio, mask[:, stage.queries()])

                batch_maps = layer_scope_maps(
                    model,
                    weights,
                    LayerBatch(l, X, mask, X_next),
                    ig_steps,
                    residuals,
                    add_ratio,
                    settings.memory_budget_mb,
                )
                for scope in WEIGHT_SCOPES:
                    ratios.add(scope, l, weight_mixing_ratio(batch_maps[scope]), mask)
                rsa.add(l, batch_maps, pairs)
            for scope in SCOPES:
                datasets[scope][batch.start : batch.stop, :n, :n] = batch_maps[scope].cpu().numpy()
        if log:
            log.info("layer %d done", l + 1)
    return MixingResult(ratios, rsa, residuals.table())
