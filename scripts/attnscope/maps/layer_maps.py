"""Every whole-layer scope's map of one layer for one batch, each stage checked: what the
mixing family writes to maps.h5, and what the views and the API show."""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnscope.architectures import architecture
from attnscope.core.attention import attention_probs, layer_visible_pairs
from attnscope.core.canonical import CanonicalModel
from attnscope.core.checks import ResidualLog
from attnscope.maps.layer_decomposition import (
    SCOPES,
    Stage,
    closing_layer_norm,
    layer_stages,
    reference_outputs,
    weight_maps,
)

COMPLETENESS = "FfCompleteness"


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
