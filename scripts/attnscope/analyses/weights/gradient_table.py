"""The gradient importance table of a loaded model (`analyses.weights.gradients`), composed
from the model's primitives: on the whole-model route a forward and backward of the module per
batch (`gradients.gradient_importance`); on the layer-streamed route dL/dX carried back layer
by layer from the stored states (`streamed_backward`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from attnscope.analyses.weights.gradients import gradient_importance
from attnscope.analyses.weights.settings import GradientSettings
from attnscope.analyses.weights.streamed_backward import streamed_gradient_importance
from attnscope.core.store import HiddenStates
from attnscope.model.loaded import LoadedModel


def model_gradient_importance(
    loaded: LoadedModel,
    store: HiddenStates,
    scratch_folder: str | Path,
    settings: GradientSettings,
    log=None,
) -> pd.DataFrame:
    """The gradient importance table of attention on the stored corpus by the model's LM
    head (`loaded` with its head; a masked LM's loss reads its tokenizer's mask token), its
    scratch files under `scratch_folder` on the layer-streamed route. `settings`: a
    `GradientSettings`, run on the model's device."""
    from dataclasses import replace

    kind = loaded.manifest["lm_head"]
    if loaded.head is None:
        raise ValueError(f"model {loaded.manifest['name']!r} was loaded without an LM head")
    mask_token_id = loaded.tokenizer.mask_token_id if kind == "masked" else None  # causal: none
    settings = replace(settings, device=loaded.device)
    if log is not None:
        log.info(
            "model %s with its %s LM head on %s, route %s",
            *(loaded.manifest["name"], kind, loaded.device, loaded.route),
        )
    if loaded.route == "layer-streamed":
        return streamed_gradient_importance(
            loaded.path, loaded.weights, loaded.head, store, mask_token_id, settings,
            scratch_folder, log,
        )  # fmt: skip
    return gradient_importance(loaded.module, loaded.head, store, mask_token_id, settings, log)
