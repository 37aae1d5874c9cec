"""Every whole-layer scope's map of one layer for one batch, each stage checked: what the
mixing family writes to maps.h5, and what the views and the API show."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from attnscope.architectures import ModelLayer
from attnscope.core.attention import layer_visible_pairs
from attnscope.core.canonical import CanonicalModel
from attnscope.core.checks import ResidualLog
from attnscope.maps.layer_decomposition import (
    MEMORY_BUDGET_MB,
    SCOPES,
    VECTOR_SCOPES,
    LayerInput,
    Stage,
    closing_layer_norm,
    factored_stages,
    query_chunk,
    reference_outputs,
    weight_maps,
)

COMPLETENESS = "FfCompleteness"


@dataclass(frozen=True)
class LayerBatch:
    """One batch at layer `index` (0-based): its input X [B, n, d], mask [B, n] and the stored
    next hidden state X_next [B, n, d] (None: recomputed from X)."""

    index: int
    X: torch.Tensor
    mask: torch.Tensor
    X_next: torch.Tensor | None = None


def layer_scope_maps(
    model,
    weights: CanonicalModel,
    at: LayerBatch,
    ig_steps: int,
    residuals: ResidualLog,
    on_stage: Callable[[Stage], None] | None = None,
    memory_budget_mb: float = MEMORY_BUDGET_MB,
) -> dict[str, torch.Tensor]:
    """Every scope's map of layer `at.index` for one batch.  {scope: [B, n, n]}

    The layer is decomposed in query chunks whose stages fit in `memory_budget_mb` MiB
    (`layer_decomposition.query_chunk`): only the maps are [B, n, n]. Each stage of each chunk
    is handed to `on_stage` before the next one overwrites it (`Stage.queries()` says which
    rows it holds); once every chunk is done, each stage's rebuilt output is checked against
    the real module output (`residuals` raises above its bound). Invisible pairs and padding
    rows are 0.
    """
    X, mask, l = at.X, at.mask, at.index
    handle = ModelLayer(model, weights, l)
    layer = handle.weights
    closing = closing_layer_norm(weights.outline, weights.final_ln, l)
    y = handle.attention_output(X, mask)
    reference = reference_outputs(X, y, layer, closing, at.X_next)
    layer_input = LayerInput(X, mask, layer, closing, ig_steps)
    maps = weight_maps(layer_input.alpha)
    B, n, d = X.shape
    totals = {scope: torch.empty_like(X) for scope in (*VECTOR_SCOPES, COMPLETENESS)}
    for scope in VECTOR_SCOPES:
        maps[scope] = X.new_empty(B, n, n)
    chunk = query_chunk(B, n, d, X.element_size(), memory_budget_mb)
    for q0 in range(0, n, chunk):
        for stage in factored_stages(layer_input, (q0, min(n, q0 + chunk))):
            rows = stage.queries()
            totals[stage.scope][:, rows] = stage.total()
            if stage.ff_real is not None:
                totals[COMPLETENESS][:, rows] = stage.ff_real
            maps[stage.scope][:, rows] = stage.parts.norm(dim=-1)
            if on_stage is not None:
                on_stage(stage)
    for scope in VECTOR_SCOPES:
        residuals.add(l + 1, scope, totals[scope], reference[scope], mask)
        if scope == "AttnResLnFf":
            residuals.add(l + 1, COMPLETENESS, totals[scope], totals[COMPLETENESS], mask)
    keep = layer_visible_pairs(mask, layer)  # padding rows and keys are invisible too
    return {scope: maps[scope].mul_(keep) for scope in SCOPES}  # in place: no second set
