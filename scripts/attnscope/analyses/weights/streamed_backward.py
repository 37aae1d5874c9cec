"""The gradient analysis with one layer's weights in memory (`loading: layer-streamed`).

The loss's forward is the stored one for a causal LM whose store is a float32 forward's;
otherwise (a masked LM reads [MASK] where the store holds the original pieces, or a 16-bit
store) the states of the inputs the loss sees are first extracted layer by layer into a
scratch store. Then `layerwise_gradient_importance` carries dL/dX back from the head, layer
by layer. Scratch files live in a scratch folder beside the output and are removed (after
kill -9, by the start-up sweep: `core.files.scratch_folder`).
"""

from __future__ import annotations

from pathlib import Path

import h5py
import pandas as pd

from attnscope.analyses.weights.gradients import layerwise_gradient_importance, loss_targets
from attnscope.analyses.weights.settings import GradientSettings
from attnscope.core import files
from attnscope.core.canonical import CanonicalModel, PredictionHead
from attnscope.core.store import TOKEN_ARRAYS, HiddenStates
from attnscope.model.extract import ExtractSettings, extract_streamed


def streamed_gradient_importance(
    folder: str | Path,
    weights: CanonicalModel,
    head: PredictionHead,
    store: HiddenStates,
    mask_token_id: int | None,
    settings: GradientSettings,
    scratch_folder: str | Path,
    log=None,
) -> pd.DataFrame:
    """`gradient_importance`'s table for the checkpoint in `folder`, its layer-streamed
    `weights` (`streamed_weights.streamed_model`) and LM `head` (`streamed_head`: masked, or
    causal with `mask_token_id` None), over the first `settings.limit` sequences of `store`
    (all if None)."""
    batch_size, device = settings.batch_size, settings.device
    total = min(settings.limit or store.n_sequences, store.n_sequences)
    targets = loss_targets(store, mask_token_id, settings.mask_rate, settings.seed, total)
    with files.scratch_folder(scratch_folder, "gradients-") as scratch:
        states_path = store.path
        if mask_token_id is not None or not store.exact:
            encoded, states_path = scratch / "encoded.h5", scratch / "states.h5"
            with h5py.File(encoded, "w") as f:
                for name in TOKEN_ARRAYS:
                    f[name] = getattr(store, name)[:total]
                f["input_ids"][...] = targets.inputs
            extract_streamed(
                folder, encoded, states_path, ExtractSettings(batch_size, device=device)
            )
        with HiddenStates(states_path) as states, h5py.File(scratch / "grad.h5", "w") as grad:
            return layerwise_gradient_importance(
                states, weights, head, targets, grad, batch_size, device, log
            )
