"""One streaming pass of the propagated decomposition over a store.

Per batch: the token split carried through every layer (`propagation.propagate`), every
stage checked against the real module output; per layer the map ||p_{l, i<-j}|| written to
`propagated.h5` `{layer}`, the mixing ratio and bias share accumulated, and each rollout of
the per-layer maps (read back from the mixing family's `maps.h5`) compared with it; at the
end, the split pushed through the LM head where the model has one. At most one batch is in
memory, carried in chunks of input tokens that fit in `memory_budget_mb`
(`propagation.propagate`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import h5py
import pandas as pd
import torch

from attnscope.analyses.mixing.rollout import RolloutRSA, rollout_step
from attnscope.analyses.mixing.settings import MixingSettings
from attnscope.analyses.mixing.statistics import MixingRatios, mixing_ratio_of
from attnscope.core import applicability
from attnscope.core.attention import visible_pairs
from attnscope.core.checks import ResidualLog
from attnscope.core.store import HiddenStates
from attnscope.core.tables import not_applicable
from attnscope.maps.prediction import LogitSplit, Prediction, prediction_frame
from attnscope.maps.propagation import LayerSplit, StageCheck, propagate
from attnscope.maps.storage import MapDataset
from attnscope.model.loaded import LoadedModel

MEASURES = ("mixing_ratio", "bias_share")


@dataclass
class PropagationResult:
    mixing: pd.DataFrame
    rollout: pd.DataFrame
    prediction: pd.DataFrame
    check: pd.DataFrame


def depth_pass(
    store: HiddenStates,
    loaded: LoadedModel,
    propagated: h5py.File,
    layer_maps: h5py.File,
    prediction: Prediction,
    settings: MixingSettings,
    log: logging.Logger | None = None,
) -> PropagationResult:
    """Stream the store batch by batch; write `{layer}` [N, L, L] (||p_{l, i<-j}||, 1-based
    layers) into `propagated`, reading the per-layer maps for the rollouts from `layer_maps`
    (the mixing family's maps.h5). A stage or logit missing its reference by more than
    `settings.depth_rel_residual` raises `checks.CheckError`. `settings.memory_budget_mb`: the
    working memory of one chunk of input tokens carried through the depth
    (`propagation.propagate`); `settings.propagated_top_k` k > 0: `{layer}` keeps each row's k
    largest entries (`maps.storage`)."""
    weights, model = loaded.weights, loaded.module
    device, ig_steps = settings.device, settings.ig_steps
    outputs = _LayerOutputs(store, weights, propagated, layer_maps, settings)
    residuals = ResidualLog(settings.depth_rel_residual, log, "propagation")
    predictions = []
    for batch in store.batches(0, settings.batch_size, device):
        mask, n = batch.mask, batch.X.shape[1]

        def state(l, batch=batch, n=n):
            if l == 0:
                return batch.X
            if not store.exact:
                return None
            return torch.from_numpy(store.hidden(l, batch.start, batch.stop)[:, :n]).to(device)

        outputs.start(batch)
        logits = LogitSplit(weights, store, batch, prediction, ig_steps)
        events = propagate(model, weights, state, mask, ig_steps, settings.memory_budget_mb)
        with torch.no_grad():
            for event in events:
                if isinstance(event, StageCheck):
                    event.record(residuals, mask)
                elif isinstance(event, LayerSplit):
                    outputs.add(event)
                elif prediction.head is not None:
                    logits.add(event)
            found = logits.result(residuals) if prediction.head is not None else None
            if found is not None:
                predictions.append(prediction_frame(batch, found, prediction.token_of))
        if log:
            log.info("sequences %d-%d done", batch.start + 1, batch.stop)
    return PropagationResult(
        outputs.measures.table().rename(columns={"scope": "measure"}),
        outputs.rsa.table(),
        prediction_table(prediction, predictions),
        residuals.table(),
    )


class _LayerOutputs:
    """What each layer's assembled split of a batch gives: its map `{layer}` and bias norms
    written, its mixing ratio and bias share accumulated, and each rollout of the per-layer
    maps (read from `layer_maps`, the mixing family's maps.h5) compared with it."""

    def __init__(self, store, weights, propagated, layer_maps, settings: MixingSettings):
        N, L, n_layers = store.n_sequences, store.length, weights.n_layers
        propagated.attrs["layers"] = "1-based"
        propagated.attrs["description"] = (
            "{layer} [seq, token i, input token j]: ||p_{l, i<-j}||, the part of input token j "
            "in the residual stream state after layer l; bias_norm [seq, layer, token]: "
            "||bias_{l, i}||"
        )
        propagated.attrs["ig_steps"] = settings.ig_steps
        propagated.attrs["causal"] = bool(weights.causal)
        dtype, top_k = settings.maps_dtype, settings.propagated_top_k
        self.datasets = [
            MapDataset(propagated, f"{l}", N, L, dtype, top_k) for l in range(1, n_layers + 1)
        ]
        self.bias_norm = propagated.create_dataset("bias_norm", (N, n_layers, L), dtype="float32")
        self.layer_maps, self.causal = layer_maps, weights.causal
        self.rollout_scopes = tuple(settings.rollout_scopes)
        self.measures = MixingRatios(MEASURES, n_layers)
        self.rsa = RolloutRSA(self.rollout_scopes, n_layers)

    def start(self, batch) -> None:
        """A new batch: its visible pairs (through the depth: no window), no rollout yet."""
        self.batch = batch
        self.pairs = visible_pairs(batch.mask, self.causal)
        self.rollouts: dict[str, torch.Tensor | None] = dict.fromkeys(self.rollout_scopes)

    def add(self, split: LayerSplit) -> None:
        """One layer's split of the batch (`start`ed)."""
        batch, mask, l = self.batch, self.batch.mask, split.layer
        n = batch.X.shape[1]
        norms = split.norms * self.pairs.cpu()
        self.datasets[l - 1].write(batch.start, norms)
        self.bias_norm[batch.start : batch.stop, l - 1, :n] = (
            (split.bias.norm(dim=-1) * mask).cpu().numpy()
        )
        ratio = mixing_ratio_of(split.others.norm(dim=-1), split.own_norm())
        self.measures.add("mixing_ratio", l - 1, ratio, mask)
        self.measures.add("bias_share", l - 1, split.bias_share(), mask)
        for scope in self.rollout_scopes:
            layer_map = self.layer_maps[f"{scope}/{l}"][batch.start : batch.stop, :n, :n]
            self.rollouts[scope] = rollout_step(self.rollouts[scope], torch.from_numpy(layer_map))
        self.rsa.add(l - 1, norms, self.rollouts, self.pairs.cpu())


def prediction_table(prediction: Prediction, frames: list[pd.DataFrame]) -> pd.DataFrame:
    """prediction.tsv, or a one-row not-applicable table saying why there is none."""
    if prediction.head is None:  # the reason of `core.applicability`, as every table's
        return not_applicable(applicability.REASONS["mixing.prediction"])
    if not frames:
        what = "[MASK]" if prediction.mask_token_id is not None else "text piece"
        return not_applicable(f"no {what} in the corpus to predict")
    return pd.concat(frames, ignore_index=True)
