"""One streaming pass of the propagated decomposition over a store.

Per batch: the token split carried through every layer (`propagation.propagate`), every
stage checked against the real module output; per layer the map ||p_{l, i<-j}|| written to
`propagated.h5` `{layer}`, the mixing ratio and bias share accumulated, and each rollout of
the per-layer maps (read back from the mixing family's `maps.h5`) compared with it; at the
end, the split pushed through the LM head where the model has one. At most one batch of one
layer's decomposition is in memory.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import h5py
import numpy as np
import pandas as pd
import torch

from attnscope.analyses.mixing.corpus import ResidualLog
from attnscope.analyses.mixing.prediction import (
    contrast_ids,
    logit_attribution,
    prediction_positions,
    prediction_rows,
)
from attnscope.analyses.mixing.propagation import (
    Carried,
    bias_share,
    contribution_norms,
    propagate,
)
from attnscope.analyses.mixing.rollout import RolloutRSA, rollout_step
from attnscope.analyses.mixing.statistics import MixingRatios, vector_mixing_ratio
from attnscope.architectures import architecture, prediction_head
from attnscope.core.attention import visible_pairs
from attnscope.core.canonical import CanonicalModel, PredictionHead
from attnscope.core.store import HiddenStates
from attnscope.core.tables import not_applicable

MEASURES = ("mixing_ratio", "bias_share")
LOGIT = "Logit"
CONTRAST = "LogitDifference"


@dataclass
class Prediction:
    """What the prediction attribution needs: the model's head (None: no LM head), the mask
    token of a masked LM (None for a causal LM), and an optional (target, foil) pair of
    token ids; `token_of` turns ids into token strings."""

    head: PredictionHead | None
    mask_token_id: int | None
    contrast: tuple[int, int] | None
    token_of: Callable[[int], str]

    @classmethod
    def of(cls, model, manifest: dict, tokenizer, contrast: list[str]) -> Prediction:
        """What a model loaded with its head (`open_model(with_head=True)`) predicts, with
        the `contrast` setting [target, foil] (empty: none)."""
        return cls(
            head=prediction_head(model),
            mask_token_id=tokenizer.mask_token_id if manifest["lm_head"] == "masked" else None,
            contrast=contrast_ids(tokenizer, contrast),
            token_of=tokenizer.convert_ids_to_tokens,
        )


@dataclass
class PropagationResult:
    mixing: pd.DataFrame
    rollout: pd.DataFrame
    prediction: pd.DataFrame
    check: pd.DataFrame


def model_logits(model, store: HiddenStates, batch) -> torch.Tensor:
    """The model's own logits for one batch (a forward pass with its head).  [B, n, V]"""
    arch = architecture(model.config.model_type)
    n, device = batch.X.shape[1], batch.X.device
    types = store.token_type_ids[batch.start : batch.stop, :n].astype(np.int64)
    inputs = arch.model_inputs(
        model,
        torch.from_numpy(batch.input_ids.astype(np.int64)).to(device),
        batch.mask,
        torch.from_numpy(types).to(device),
    )
    with torch.no_grad():
        return model(**inputs).logits.float()


@dataclass
class Attribution:
    """The logits of P positions split by input token: `rows` and `positions` in the batch,
    `columns` [P, k] the token ids (predicted, then target and foil when a contrast is set),
    `contributions` [P, k, n] per input token, `bias` [P, k] the bias part, `logits` [P, k]
    the model's own (parts + bias = logits, checked)."""

    rows: list[int]
    positions: list[int]
    columns: np.ndarray
    contributions: np.ndarray
    bias: np.ndarray
    logits: np.ndarray


def attribute(
    model,
    weights: CanonicalModel,
    store: HiddenStates,
    batch,
    carried: Carried,
    prediction: Prediction,
    ig_steps: int,
    residuals: ResidualLog,
) -> Attribution | None:
    """Split the model's top token at each predicted position of a batch (and target and
    foil) by input token (None when the batch has no position to attribute), checked against
    the model's logits: relative to |logit|, at least the spread of the position's logits."""
    mask = batch.mask.cpu().numpy()
    where = prediction_positions(batch.input_ids, mask, prediction.mask_token_id)
    if not where:
        return None
    rows = torch.tensor([r for r, _ in where], device=batch.X.device)
    positions = torch.tensor([p for _, p in where], device=batch.X.device)
    logits = model_logits(model, store, batch)[rows, positions]  # [P, V]
    columns = logits.argmax(-1, keepdim=True)
    if prediction.contrast is not None:
        pair = torch.tensor(prediction.contrast, device=logits.device)
        columns = torch.cat([columns, pair.expand(len(where), 2)], dim=1)
    real = logits.gather(1, columns)
    spread = logits.std(-1)
    contributions, bias_part = logit_attribution(
        carried.parts[rows, positions],
        carried.bias[rows, positions],
        weights.final_ln,
        prediction.head,
        columns,
        ig_steps,
    )
    got = contributions.sum(-1) + bias_part
    checked = [(LOGIT, got[:, 0], real[:, 0])]
    if prediction.contrast is not None:
        checked.append((CONTRAST, got[:, 1] - got[:, 2], real[:, 1] - real[:, 2]))
    for stage, value, want in checked:
        error = (value - want).abs()
        scale = torch.maximum(want.abs(), spread)
        residuals.record(weights.n_layers, stage, float(error.max()), float((error / scale).max()))
    return Attribution(
        rows=[r for r, _ in where],
        positions=[p for _, p in where],
        columns=columns.cpu().numpy(),
        contributions=contributions.cpu().numpy(),
        bias=bias_part.cpu().numpy(),
        logits=real.cpu().numpy(),
    )


def prediction_frame(batch, found: Attribution, token_of) -> pd.DataFrame:
    """prediction.tsv rows of one batch's `attribute` result."""
    lengths = batch.mask.sum(1).cpu().numpy()
    return prediction_rows(
        [batch.start + r for r in found.rows],
        found.positions,
        [batch.input_ids[r, : lengths[r]] for r in found.rows],
        found.columns,
        found.contributions,
        found.bias,
        found.logits,
        token_of,
    )


def analyse_depth(
    store: HiddenStates,
    weights: CanonicalModel,
    model,
    propagated: h5py.File,
    layer_maps: h5py.File,
    prediction: Prediction,
    *,
    batch_size: int,
    device: str,
    ig_steps: int,
    max_rel_residual: float,
    maps_dtype: str,
    rollout_scopes: tuple[str, ...],
    log: logging.Logger | None = None,
) -> PropagationResult:
    """Stream the store batch by batch; write `{layer}` [N, L, L] (||p_{l, i<-j}||, 1-based
    layers) into `propagated`, reading the per-layer maps for the rollouts from `layer_maps`
    (the mixing family's maps.h5). A stage or logit missing its reference by more than
    `max_rel_residual` raises `checks.CheckError`."""
    N, L, n_layers = store.n_sequences, store.length, weights.n_layers
    propagated.attrs["layers"] = "1-based"
    propagated.attrs["description"] = (
        "{layer} [seq, token i, input token j]: ||p_{l, i<-j}||, the part of input token j in "
        "the residual stream state after layer l; bias_norm [seq, layer, token]: ||bias_{l, i}||"
    )
    propagated.attrs["ig_steps"] = ig_steps
    propagated.attrs["causal"] = bool(weights.causal)
    datasets = [
        propagated.create_dataset(f"{l}", (N, L, L), dtype=maps_dtype, chunks=(1, L, L))
        for l in range(1, n_layers + 1)
    ]
    bias_norm = propagated.create_dataset("bias_norm", (N, n_layers, L), dtype="float32")
    stored_exact = store.exact
    measures = MixingRatios(MEASURES, n_layers)
    rsa = RolloutRSA(tuple(rollout_scopes), n_layers)
    residuals = ResidualLog(max_rel_residual, log)
    predictions = []
    for batch in store.batches(0, batch_size, device):
        mask, n = batch.mask, batch.X.shape[1]
        pairs = visible_pairs(mask, weights.causal)  # through the depth: no window
        rollouts: dict[str, torch.Tensor | None] = dict.fromkeys(rollout_scopes)

        def state(l, batch=batch, n=n):
            if l == 0:
                return batch.X
            if not stored_exact:
                return None
            return torch.from_numpy(store.hidden(l, batch.start, batch.stop)[:, :n]).to(device)

        def on_layer(l, carried, batch=batch, n=n, mask=mask, pairs=pairs, rollouts=rollouts):
            norms = contribution_norms(carried, pairs)
            datasets[l - 1][batch.start : batch.stop, :n, :n] = norms.cpu().numpy()
            bias_norm[batch.start : batch.stop, l - 1, :n] = (
                (carried.bias.norm(dim=-1) * mask).cpu().numpy()
            )
            measures.add("mixing_ratio", l - 1, vector_mixing_ratio(carried.parts), mask)
            measures.add("bias_share", l - 1, bias_share(carried), mask)
            for scope in rollout_scopes:
                layer_map = layer_maps[f"{scope}/{l}"][batch.start : batch.stop, :n, :n]
                rollouts[scope] = rollout_step(rollouts[scope], torch.from_numpy(layer_map))
            rsa.add(l - 1, norms.cpu(), rollouts, pairs.cpu())

        with torch.no_grad():
            last = propagate(
                model,
                weights,
                state,
                mask,
                ig_steps,
                lambda l, stage, got, want, mask=mask: residuals.add(l, stage, got, want, mask),
                on_layer,
            )
            if prediction.head is not None:
                found = attribute(
                    model, weights, store, batch, last, prediction, ig_steps, residuals
                )
                if found is not None:
                    predictions.append(prediction_frame(batch, found, prediction.token_of))
        if log:
            log.info("sequences %d-%d done", batch.start + 1, batch.stop)
    return PropagationResult(
        measures.table().rename(columns={"scope": "measure"}),
        rsa.table(),
        prediction_table(prediction, predictions),
        residuals.table(),
    )


def prediction_table(prediction: Prediction, frames: list[pd.DataFrame]) -> pd.DataFrame:
    """prediction.tsv, or a one-row not-applicable table saying why there is none."""
    if prediction.head is None:
        return not_applicable("no LM head")
    if not frames:
        return not_applicable("no [MASK] in the corpus to predict")
    return pd.concat(frames, ignore_index=True)
