"""One streaming pass of the norm-based analysis over a store (Kobayashi et al. 2020).

Per layer and batch: alpha and f(x) recomputed from the stored layer input, the statistics
fed to `NormsAccumulator` (the sink statistics with the layer's counted rows, the massive
activations with the stored state itself), the head-summed map written to `maps/{l}`, and
every batch checked against the attention module's real output. The last
state `hidden/{L}`, which no layer reads, is read once more at the end for the massive
activations alone.
"""

from __future__ import annotations

import logging

import h5py
import pandas as pd
import torch

from attnscope.analyses.norms.settings import NormsSettings
from attnscope.analyses.norms.sinks import sink_rows
from attnscope.analyses.norms.statistics import NormsAccumulator
from attnscope.core.attention import (
    attention_input,
    attention_probs,
    head_outputs,
    head_values,
    value_vectors,
    visible_pairs,
)
from attnscope.core.checks import ResidualLog
from attnscope.core.store import HiddenStates
from attnscope.maps.head_norms import head_summed_norms
from attnscope.maps.storage import MapDataset
from attnscope.model.loaded import LoadedModel


def corpus_pass(
    store: HiddenStates,
    loaded: LoadedModel,
    maps: h5py.File,
    settings: NormsSettings,
    log: logging.Logger | None = None,
    layers: list[int] | None = None,
) -> tuple[NormsAccumulator, pd.DataFrame]:
    """Stream the store layer by layer through the `loaded` model's layers (`LoadedModel.layer`);
    return the accumulator and the residual table.

    `layers` (0-based; None: all): a layer shard's layers. Its accumulator holds their rows
    only (and the last state's, if the last layer is among them), to be `merged` with the
    other shards'. `settings.memory_budget_mb`: the working memory of the head-summed map's
    query chunks (`head_summed_norms`); the `maps_*` and `max_rel_residual` below are
    `settings`'s too.

    Writes `maps/{l}` [N, L, L] (l 1-based; rows query i, columns key j; 0 where the pair
    does not count) into the open HDF5 file `maps`, batch by batch; with `maps_top_k` k > 0
    only each row's k largest entries (`maps.storage`). Every batch's
    sum_h sum_j alpha f(x) + b_O is checked against the module's own output
    (`Architecture.attention_output`); a relative residual above `max_rel_residual` raises
    `checks.CheckError`. The residual table has `checks.ResidualLog`'s columns.
    """
    batch_size, device, weights = settings.batch_size, settings.device, loaded.weights
    acc = NormsAccumulator(
        weights.n_layers, weights.n_heads, settings.spearman_sample_size, settings.seed
    )
    maps.attrs["description"] = "||sum_h alpha^h_ij f^h(x_j)||; maps/{layer} [seq, query i, key j]"
    maps.attrs["layers"] = "1-based"
    N, L = store.n_sequences, store.length
    residuals = ResidualLog(settings.max_rel_residual, log, "norms")
    layers = range(weights.n_layers) if layers is None else layers
    for l in layers:
        handle = loaded.layer(l)
        layer = handle.weights
        dataset = MapDataset(maps, f"maps/{l + 1}", N, L, settings.maps_dtype, settings.maps_top_k)
        for batch in store.batches(l, batch_size, device):
            with torch.no_grad():
                alpha = attention_probs(batch.X, batch.mask, layer)
                v = head_values(batch.X, layer)
                fx = value_vectors(batch.X, layer, v)
                fx_norm, z = fx.norm(dim=-1), head_outputs(alpha, v, layer)  # [B, H, n, (d)]
                y = z.sum(1) + layer.b_O  # the attention block's output (`attention_output`)
                y_real = handle.attention_output(batch.X, batch.mask)
                residuals.add(l + 1, "Attn", y, y_real, batch.mask)
                x = attention_input(batch.X, layer)
                acc.add_batch(l, x, alpha, fx_norm, batch.mask, batch.category, layer.causal)
                rows = sink_rows(batch.mask, layer)
                acc.sinks.add_batch(l, alpha, fx_norm, z, batch.mask, rows)
                del z
                acc.massive.add_batch(l, batch.X, batch.mask)
                pairs = visible_pairs(batch.mask, layer.causal)
                norm_map = head_summed_norms(alpha, fx, settings.memory_budget_mb) * pairs
            dataset.write(batch.start, norm_map)
    if weights.n_layers - 1 in layers:
        for batch in store.batches(weights.n_layers, batch_size, device):
            acc.massive.add_batch(weights.n_layers, batch.X, batch.mask)
    return acc, residuals.table()
