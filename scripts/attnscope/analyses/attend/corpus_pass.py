"""One pass of the attend family over the first sequences of a store, one sequence at a time.

Per sequence: the embedding output split by component (`maps.attend.embedding_split`) is
carried through every layer (`layer_split`), each norm's scale and the attention weights
taken from the stored layer input X_m (recomputed with `attention.layer_forward` where a
`layers:` subset left it out). At each analysed layer the queries and keys of every head
are split by component (`qk_split`) and their lift summed (`lift`), and for learned
position embeddings the tr_t profiles of the embedding terms (`trt_terms`). Checks, per layer, the
largest over the sequences (`checks.ResidualLog`, relative):
    state             the carried split's sum vs the stored X_m (per token)
    attention output  sum_j alpha_ij f(x_j) + b_O vs the module's output (per token)
    lift              per head and weighting, the lift summed over components and rows vs
                      sum_i sum_j W_ij s_ij from the real logits, relative to the sum over
                      those rows of max_j |s_ij|
    lift pairs        the same for the component pairs of every weighting (the attended keys
                      and each key class)
The layers are walked in order for each sequence up to the last analysed one (on the
layer-streamed route each of them is read once per sequence). Memory: the split of one
sequence, [C, n, d] (C up to 10 L), the queries, keys and one weighting's lifts [H, C, n, d']
at one layer, and the sums of `LiftSums`; none of it grows with the number of sequences.
What grows with depth is C, and the split with it; with a `component_window` w, C is at most
the embedding parts + 2 + w (H + 1) (+ experts) at every depth. The pair sums (K x C x C per
layer and head) are kept on disk between sequences (`statistics.HeadSums`).
"""

from __future__ import annotations

import logging

import pandas as pd
import torch

from attnscope.analyses.attend.lift import TOKEN_CLASSES, key_weights, lift_sums, row_lifts
from attnscope.analyses.attend.settings import AttendSettings
from attnscope.analyses.attend.statistics import LiftSums
from attnscope.analyses.attend.trt_terms import has_learned_positions, term_profiles
from attnscope.architectures import ModelLayer, architecture
from attnscope.core.attention import (
    attention_output,
    attention_probs,
    layer_forward,
    layer_visible_pairs,
    queries_keys,
    value_vectors,
)
from attnscope.core.canonical import rotary_bands
from attnscope.core.checks import ResidualLog, residual
from attnscope.core.store import HiddenStates
from attnscope.maps.attend import (
    BIAS,
    direction_split,
    embedding_split,
    layer_split,
    qk_split,
)
from attnscope.model.loaded import LoadedModel

FIRST_STAGES = ("state", "attention output", "lift", "lift pairs")


def corpus_pass(
    store: HiddenStates,
    loaded: LoadedModel,
    settings: AttendSettings,
    log: logging.Logger | None = None,
    directions: tuple[int, ...] = (),
) -> tuple[LiftSums, object]:
    """The sums over the first `settings.sequences` sequences (all if fewer) and the residual
    table; `checks.CheckError` above `settings.max_rel_residual`. Layers: those the store was
    made for. `directions`: residual dimensions (0-based; the massive ones) along which the
    key side is split too (`direction_lifts`); none: no split."""
    sums = LiftSums(directions)
    residuals = ResidualLog(settings.max_rel_residual, log, "attend")
    for s in range(min(settings.sequences, store.n_sequences)):
        with torch.no_grad():
            sequence_pass(store, s, loaded, settings, sums, residuals)
        if log:
            log.info("sequence %d: %d pieces", s, store.lengths[s])
    table = residuals.table()
    first = table["stage"].isin(FIRST_STAGES)  # the rows of the stages added later after them
    return sums, pd.concat([table[first], table[~first]], ignore_index=True)


def _stored(store: HiddenStates, state: int, s: int, n: int, device: str):
    if not store.stores(state):
        return None
    return torch.from_numpy(store.hidden(state, s, s + 1)[0, :n]).to(device)


def sequence_pass(store, s, loaded: LoadedModel, settings, sums: LiftSums, residuals) -> None:
    """Carry sequence `s` through every layer, adding the analysed layers' lifts to `sums`.
    `settings.component_window` w > 0: at each layer l the components of layers l - w .. l - 1
    are kept head by head and those of every earlier layer merged (`_Split.grouped`)."""
    weights = loaded.weights
    arch, device, window = (
        architecture(weights.model_type),
        settings.device,
        settings.component_window,
    )
    n = int(store.lengths[s])
    arrays = {
        name: torch.from_numpy(getattr(store, name)[s : s + 1, :n].astype("int64")).to(device)
        for name in ("input_ids", "attention_mask", "token_type_ids")
    }
    inputs = arch.model_inputs(loaded.module, **arrays)
    mask = arrays["attention_mask"]
    pieces = {"category": store.category[s, :n], "ids": store.input_ids[s, :n]}
    pieces = {name: torch.from_numpy(v.astype("int64")).to(device) for name, v in pieces.items()}
    split = embedding_split(weights, inputs, embed_parts=True)
    X = _stored(store, 0, s, n, device)
    X = split.total() if X is None else X
    last = max(store.layers)  # no layer after the last analysed one is read
    for m in range(last + 1):
        handle = loaded.layer(m)
        layer = handle.weights
        residuals.record(m + 1, "state", *residual(split.total()[None], X[None], mask))
        if m in store.layers:
            head_lifts(split, X, mask, pieces, handle, sums, residuals)
        if m == last:
            break
        split = layer_split(split, X, mask, layer, m)
        if window and m + 1 - window >= 1:  # layer m + 2 keeps layers m + 2 - window ..
            split = split.grouped(m + 1 - window)
        following = _stored(store, m + 1, s, n, device)
        X = layer_forward(X[None], mask, layer)[0] if following is None else following


def head_queries_keys(split, X, layer):
    """Q, K [H, C, n, d'] of every head by component, the bias last (K with the key heads
    repeated for grouped-query attention); each side's [C, H, n, d'] parts and the normed
    split are freed before the next is made (the peak is a few [C, n, d]-sized tensors)."""
    read = split.normed(layer.plan.attn_in_norm, X)
    kv = [layer.kv_head(h) for h in range(layer.n_heads)]
    parts, bias = qk_split(read, X, layer, "q")
    Q = torch.cat([parts, bias[None]]).transpose(0, 1).contiguous()
    del parts
    parts, bias = qk_split(read, X, layer, "k")
    del read
    K = torch.cat([parts, bias[None]])[:, kv].transpose(0, 1).contiguous()
    return Q, K


def head_lifts(split, X, mask, pieces, handle: ModelLayer, sums, residuals) -> None:
    """Every head's lift at layer `handle.index` (0-based) of one sequence; `pieces`
    {"category", "ids"} [n] (`lift.key_weights`)."""
    layer, m = handle.weights, handle.index
    alpha = attention_probs(X[None], mask, layer)[0]  # [H, n, n]
    y = attention_output(alpha[None], value_vectors(X[None], layer), layer)
    y_real = handle.attention_output(X[None], mask)
    residuals.add(m + 1, "attention output", y, y_real, mask)
    visible = layer_visible_pairs(mask, layer)[0]
    keys, W, rows = key_weights(alpha, visible, pieces, layer.causal)
    sums.count(m + 1, rows)
    Q, K = head_queries_keys(split, X, layer)
    band = rotary_bands(layer.rotary, layer.d_head).to(X.device)
    found = lift_sums(Q, K, W, layer.scale, band)
    q, k = (t[0] for t in queries_keys(X[None], layer))  # [H, n, d'], keys per query head
    logits = q @ k.transpose(-1, -2) * layer.scale
    want = row_lifts(logits, W).sum(-1)  # [H, K]
    size = ((logits.abs() * visible).amax(-1)[:, None] * rows).sum(-1)  # sum_i max_j |s_ij|
    got = {"lift": found["query"].sum(-1), "lift pairs": found["pairs"].sum((-1, -2))}
    if sums.directions:
        found["directions"] = direction_lifts(X, Q.sum(1), W, layer, sums.directions)
        got["lift directions"] = found["directions"].sum(-1)
    tokens = torch.tensor([name in TOKEN_CLASSES for name in keys], device=X.device)
    for stage, value in got.items():
        diff = (value - want).abs()
        relative = diff / size.clamp_min(torch.finfo(size.dtype).tiny)
        # the token classes (induction, duplicate) under stages of their own, so that the
        # rows of "lift" and "lift pairs" stay those of the other weightings
        chosen = {stage: ~tokens, f"{stage} (token classes)": tokens}
        if stage == "lift directions":
            chosen = {stage: tokens | ~tokens}
        for name, which in chosen.items():
            worst = float(diff[:, which].max()), float(relative[:, which].max())
            residuals.record(m + 1, name, *worst)
    found["scale"] = size  # [H, K]: the checks' scale, for groups.tsv's check
    names = [*split.names, BIAS]
    if has_learned_positions(names):
        sums.add_trt(m + 1, term_profiles(Q, K, logits, visible, layer.scale, names))
    for h in range(layer.n_heads):
        sums.add(m + 1, h + 1, names, keys, {name: v[h] for name, v in found.items()})


def direction_lifts(X, q, W, layer, directions) -> torch.Tensor:
    """The key-side lift of every head and weighting split along residual directions: the
    state X [n, d] as X restricted to the dimensions `directions` (0-based) and the rest of
    it, each through the attention's input norm with its scale fixed at X and through the
    key projection (`maps.attend.qk_split`; the key bias and the norm's shift join the
    rest), each key part read by sum_i W_ij q_i (q [H, n, d'] summed over components).
    -> [H, K, 2] (massive, rest); they sum to the key side's total."""
    read = direction_split(X, directions).normed(layer.plan.attn_in_norm, X)
    kv = [layer.kv_head(h) for h in range(layer.n_heads)]
    k_parts, k_bias = qk_split(read, X, layer, "k")  # [2, H, n, d'], [H, n, d']
    k_parts[1] += k_bias
    K = k_parts[:, kv].transpose(0, 1)  # [H, 2, n, d']
    qw = W.transpose(-1, -2) @ q[:, None]  # sum_i W_ij q_i  [H, K, n, d']
    return torch.einsum("hknd,hcnd->hkc", qw, K) * layer.scale
