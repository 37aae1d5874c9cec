"""What one page shows: a sequence's tokens and, per layer, the arrays the views draw from.

For a sequence of n real pieces, per layer l (1-based, as in every table) and head h:

    q/{l}, k/{l}        [H, n, d'] float16  queries and keys, biases included; the page forms
                                            alpha = softmax_j(q_i k_j^T * scale) over visible
                                            keys (neuron view, head view of the weights)
    fnorm/{l}           [H, n]     float32  ||f^h(x_j)||: ||alpha f(x)|| = alpha ||f(x)||
    {scope}/{l}/key     [n, k]     uint16   the top-k keys j of each query row of a vector
    {scope}/{l}/value   [n, k]     float16  scope's map ||z_ij|| (Attn = ||sum_h alpha f(x)||,
                                            then AttnRes ... AttnResLnFfResLn of the mixing
                                            family when `scopes` is on, and Propagated:
                                            ||p_{l, i<-j}||, input token j's part of the
                                            state after layer l, carried through the depth)

and, when `scopes` is on and the model has an LM head, the prediction at P positions (every
[MASK] of a masked LM, the text's last piece of a causal LM (before the closing separator);
`header["prediction"]` names them):

    prediction/logit    [P, n]     float32  input token j's part of the predicted logit
    prediction/contrast [P, n]     float32  its part of logit(target) - logit(foil), when the
                                            mixing family's `contrast` is set

and, when `scopes` is on, why each head attends (the attend family's split of the logit,
`maps.attend`) for each query row's WHY_KEYS keys of largest weight:

    why/{l}/key         [H, n, e]       uint16   the keys j, by weight alpha_ij
    why/{l}/pair        [H, n, e, p, 2] uint16   the WHY_PAIRS component pairs (query side,
                                                 key side; indices into header["components"])
                                                 with the largest |term| of s_ij
    why/{l}/value       [H, n, e, p]    float16  their terms scale q_i(c) . k_j(c') (logit)

The weights are exact in the page up to the float16 rounding of q and k; `alpha_max_error` in
the header is the largest |alpha_page - alpha| of the sequence, measured here. Every vector
scope is checked against the real module output, as in the mixing family.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import torch

from attnscope.analyses.views.settings import ViewsSettings
from attnscope.architectures import architecture
from attnscope.core.attention import (
    additive_mask,
    attention_probs,
    queries_keys,
    value_vectors,
    visible_pairs,
)
from attnscope.core.checks import ResidualLog
from attnscope.core.store import HiddenStates
from attnscope.core.tokens import CATEGORY_NAMES, SEP, VISIBLE_WHITESPACE, piece_labels
from attnscope.maps import storage
from attnscope.maps.attend import BIAS, embedding_split, layer_split, qk_split
from attnscope.maps.head_norms import head_summed_norms
from attnscope.maps.layer_decomposition import VECTOR_SCOPES
from attnscope.maps.layer_maps import LayerBatch, layer_scope_maps
from attnscope.maps.prediction import LogitSplit, Prediction
from attnscope.maps.propagation import LayerSplit, StageCheck, propagate
from attnscope.maps.scopes import PROPAGATED
from attnscope.model.loaded import LoadedModel

WHY_KEYS, WHY_PAIRS = 1, 3  # keys per query row, component pairs per (query, key)


@dataclass
class Page:
    """A page's JSON header (tokens, shapes, sources) and its named arrays."""

    header: dict
    arrays: dict[str, np.ndarray] = field(default_factory=dict)


def segments(category: np.ndarray) -> np.ndarray:
    """Sentence A (0) up to and including the first separator, B (1) after.  [n] -> [n] int8"""
    seps = np.flatnonzero(category == SEP)
    out = np.zeros(len(category), dtype=np.int8)
    if len(seps):
        out[seps[0] + 1 :] = 1
    return out


def word_units(word_ids: np.ndarray) -> np.ndarray:
    """Unit of every piece for the word-level view: the pieces of one word share a unit, every
    other piece (special tokens, pieces of a cut word) is a unit of its own.  [n] -> [n] int32"""
    units = np.empty(len(word_ids), dtype=np.int32)
    unit, previous = -1, None
    for i, word in enumerate(word_ids):
        if word < 0 or word != previous:
            unit += 1
        units[i] = unit
        previous = word if word >= 0 else None
    return units


def top_k_rows(values: torch.Tensor, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest entries of each row: (keys uint16, values float16), each [n, k]."""
    keys, top = storage.top_k_rows(values, k)
    return keys.cpu().numpy().astype(np.uint16), top.cpu().numpy().astype("f2")


def sequence_page(
    store: HiddenStates,
    index: int,
    loaded: LoadedModel,
    tokenizer,
    settings: ViewsSettings,
    log: logging.Logger | None = None,
    prediction: Prediction | None = None,
) -> Page:
    """The page of sequence `index` of `store` (0-based) by `settings` (scopes, ig_steps,
    top_k, max_rel_residual, device); the prediction row needs `settings.scopes` and a
    `prediction` with an LM head. `loaded`'s module is on the meta device but for the
    layer in use on the layer-streamed route."""
    weights, model = loaded.weights, loaded.module
    scopes, ig_steps, top_k = settings.scopes, settings.ig_steps, settings.top_k
    device = settings.device
    n = int(store.lengths[index])
    ids = store.input_ids[index, :n]
    category = store.category[index, :n]
    units = word_units(store.word_ids[index, :n])
    pieces = tokenizer.convert_ids_to_tokens(ids.tolist())
    unit_pieces = [[] for _ in range(int(units.max()) + 1)]
    for piece, unit in zip(pieces, units, strict=True):
        unit_pieces[unit].append(piece)
    unit_labels = [
        tokenizer.convert_tokens_to_string(p).strip()
        or tokenizer.convert_tokens_to_string(p).translate(VISIBLE_WHITESPACE)
        for p in unit_pieces
    ]
    page = Page(
        header={
            "sequence": index,
            "n": n,
            "layers": weights.n_layers,
            "heads": weights.n_heads,
            "d_head": weights.d_head,
            "causal": weights.causal,
            "scale": [layer.scale for layer in weights.outline],
            "softcap": [layer.softcap for layer in weights.outline],
            "sliding_window": [layer.sliding_window for layer in weights.outline],
            "kv_heads": weights.outline[0].n_kv_heads,
            "rotary": weights.any_rotary,  # q and k rotated by position (the viewer says so)
            "architecture": weights.architecture,
            "model_type": weights.model_type,
            "tokens": piece_labels(tokenizer, ids),
            "category": [CATEGORY_NAMES[int(c)] for c in category],
            "segment": segments(category).tolist(),
            "unit": units.tolist(),
            "unit_labels": [label or "?" for label in unit_labels],
            "scopes": [*VECTOR_SCOPES, PROPAGATED] if scopes else list(VECTOR_SCOPES[:1]),
            "top_k": min(top_k, n),
        }
    )
    residuals = ResidualLog(settings.max_rel_residual, log, "views")
    mask = torch.ones(1, n, dtype=torch.long, device=device)
    exact = store.exact
    alpha_error = 0.0
    if scopes:  # why each head attends: the logits split by component, layer by layer
        with torch.no_grad():
            split, why = why_start(store, index, n, loaded, device), []
    for l, layer in enumerate(weights.layers):
        X = torch.from_numpy(store.hidden(l, index, index + 1)[:, :n]).to(device)
        with torch.no_grad():
            if scopes:
                why.append((len(split.names), *why_layer(split, X[0], mask, layer, l, residuals)))
                if l + 1 < weights.n_layers:
                    split = layer_split(split, X[0], mask, layer, l)
            q, k = queries_keys(X, layer)
            fx = value_vectors(X, layer)
            alpha = attention_probs(X, mask, layer)
            approx = page_alpha(q, k, mask, layer)
            alpha_error = max(alpha_error, float((approx - alpha).abs().max()))
            if scopes:
                X_next = None
                if exact:
                    X_next = torch.from_numpy(store.hidden(l + 1, index, index + 1)[:, :n])
                    X_next = X_next.to(device)
                at = LayerBatch(l, X, mask, X_next)
                maps = layer_scope_maps(model, weights, at, ig_steps, residuals)
            else:
                maps = {"Attn": head_summed_norms(alpha, fx)}
        page.arrays[f"q/{l + 1}"] = q[0].cpu().numpy().astype(np.float16)
        page.arrays[f"k/{l + 1}"] = k[0].cpu().numpy().astype(np.float16)
        page.arrays[f"fnorm/{l + 1}"] = fx[0].norm(dim=-1).cpu().numpy().astype("f4")
        for scope in page.header["scopes"]:
            if scope == PROPAGATED:  # the whole depth at once, below
                continue
            keys, values = top_k_rows(maps[scope][0], top_k)
            page.arrays[f"{scope}/{l + 1}/key"] = keys
            page.arrays[f"{scope}/{l + 1}/value"] = values
    page.header["prediction"] = {"reason": "the views' `scopes` setting is off"}
    if scopes:  # the decomposition carried from the input tokens through every layer
        write_why(page, split.names, why)
        logits = None
        if prediction is not None and prediction.head is not None:
            batch = store.batch(0, index, index + 1, n, device)
            logits = LogitSplit(weights, store, batch, prediction, ig_steps)
        # through the whole depth: the float32 forward's rounding drift grows with it
        depth = ResidualLog(settings.depth_rel_residual, log, "views through the depth")
        add_propagated(page, store, index, loaded, settings, depth, logits)
        add_prediction(page, logits, depth, tokenizer)
    page.header["alpha_max_error"] = alpha_error
    page.header["max_rel_residual"] = None
    if scopes:
        worst = [float(checks.table()["max_rel"].max()) for checks in (residuals, depth)]
        page.header["max_rel_residual"] = max(worst)
    return page


def why_start(store, index: int, n: int, loaded: LoadedModel, device):
    """The embedding output of sequence `index` split by component (`maps.attend`)."""
    arrays = {
        name: torch.from_numpy(getattr(store, name)[index : index + 1, :n].astype("int64"))
        for name in ("input_ids", "attention_mask", "token_type_ids")
    }
    weights = loaded.weights
    inputs = architecture(weights.model_type).model_inputs(loaded.module, **arrays)
    return embedding_split(weights, {k: v.to(device) for k, v in inputs.items()}, True)


def write_why(page: Page, names: list[str], found: list) -> None:
    """`why/{l}/key|pair|value` and `header["components"]` (module docstring) from each
    layer's (own component count, `why_layer`'s result); `names` the last layer's split."""
    names = [*names[: found[-1][0]], BIAS]  # every layer's names are a prefix of these
    page.header["components"] = names
    for l, (own, keys, pairs, values) in enumerate(found):
        pairs[pairs == own] = len(names) - 1  # the layer's own bias index -> the last
        page.arrays[f"why/{l + 1}/key"] = keys.cpu().numpy().astype(np.uint16)
        page.arrays[f"why/{l + 1}/pair"] = pairs.cpu().numpy().astype(np.uint16)
        page.arrays[f"why/{l + 1}/value"] = values.cpu().numpy().astype(np.float16)


def why_layer(split, X: torch.Tensor, mask, layer, l: int, residuals):
    """Layer l's (0-based) top keys [H, n, e], their top component pairs [H, n, e, p, 2] and
    terms [H, n, e, p], from the split of its input X [n, d]; checked: the terms of every
    stored (query, key) pair summed over all component pairs against the logit from the real
    layer input (relative to the layer's largest |logit|)."""
    read = split.normed(layer.plan.attn_in_norm, X)
    q_parts, q_bias = qk_split(read, X, layer, "q")
    k_parts, k_bias = qk_split(read, X, layer, "k")
    kv = [layer.kv_head(h) for h in range(layer.n_heads)]
    Q = torch.cat([q_parts, q_bias[None]]).transpose(0, 1)  # [H, C, n, d']
    K = torch.cat([k_parts, k_bias[None]])[:, kv].transpose(0, 1)
    alpha = attention_probs(X[None], mask, layer)[0]  # [H, n, n]
    keys = alpha.topk(min(WHY_KEYS, X.shape[0]), dim=-1).indices  # [H, n, e]
    q, k = (t[0] for t in queries_keys(X[None], layer))
    logits = (q @ k.transpose(-1, -2) * layer.scale).gather(-1, keys)  # [H, n, e]
    C = Q.shape[1]
    pairs, values, worst = [], [], 0.0
    for h in range(layer.n_heads):
        at_keys = K[h][:, keys[h]]  # [C, n, e, d']
        terms = torch.einsum("cid,kiad->iack", Q[h], at_keys) * layer.scale  # [n, e, C, C]
        worst = max(worst, float((terms.sum((-1, -2)) - logits[h]).abs().max()))
        flat = terms.flatten(-2)
        top = flat.abs().topk(min(WHY_PAIRS, C * C), dim=-1).indices  # [n, e, p]
        pairs.append(torch.stack([top // C, top % C], -1))
        values.append(flat.gather(-1, top))
    size = float(logits.abs().max())
    residuals.record(l + 1, "why (logit split)", worst, worst / size if size > 0 else worst)
    return keys, torch.stack(pairs), torch.stack(values)


def add_propagated(page, store, index, loaded: LoadedModel, settings, residuals, logits):
    """`Propagated/{l}/key|value`: the `settings.top_k` input tokens j of ||p_{l, i<-j}|| per
    token i, the split carried from the embeddings (`propagation.propagate`, checked like the
    mixing family's, by `settings.ig_steps`). The last state's chunks go to `logits` (a
    `LogitSplit`, or None)."""
    weights, model = loaded.weights, loaded.module
    ig_steps, top_k, device = settings.ig_steps, settings.top_k, settings.device
    n = page.header["n"]
    mask = torch.ones(1, n, dtype=torch.long, device=device)
    exact = store.exact

    def state(l):
        if l > 0 and not exact:
            return None
        return torch.from_numpy(store.hidden(l, index, index + 1)[:, :n]).to(device)

    pairs = visible_pairs(mask, weights.causal).cpu()
    with torch.no_grad():
        for event in propagate(model, weights, state, mask, ig_steps):
            if isinstance(event, StageCheck):
                event.record(residuals, mask, f"{PROPAGATED} ")
            elif isinstance(event, LayerSplit):
                keys, values = top_k_rows((event.norms * pairs)[0], top_k)
                page.arrays[f"{PROPAGATED}/{event.layer}/key"] = keys
                page.arrays[f"{PROPAGATED}/{event.layer}/value"] = values
            elif logits is not None:
                logits.add(event)


def add_prediction(
    page: Page, logits: LogitSplit | None, residuals: ResidualLog, tokenizer
) -> None:
    """`prediction/logit` (and `prediction/contrast`) [P, n] and `header["prediction"]`: the
    last state's split pushed through the LM head (`maps.prediction.LogitSplit`, checked
    against the model's logits), or the reason there is none (`logits` None: no LM head);
    tokens shown as `piece_labels`."""
    if logits is None:
        page.header["prediction"] = {"reason": "the model has no LM head"}
        return
    n = page.header["n"]
    prediction = logits.prediction
    with torch.no_grad():
        found = logits.result(residuals)
    if found is None:
        what = "[MASK]" if prediction.mask_token_id is not None else "text piece"
        page.header["prediction"] = {"reason": f"no {what} in this sequence to predict"}
        return

    def token_of(token_id: int) -> str:
        return piece_labels(tokenizer, [token_id])[0]

    page.arrays["prediction/logit"] = found.contributions[:, 0, :n].astype("f4")
    page.header["prediction"] = {
        "kind": found.kind,
        "positions": found.positions,
        "token": [page.header["tokens"][p] for p in found.positions],
        "predicted": [token_of(int(c)) for c in found.columns[:, 0]],
        "logit": found.logits[:, 0].tolist(),
        "bias": found.bias[:, 0].tolist(),
        "contrast": None,
    }
    if prediction.contrast is not None:
        difference = found.contributions[:, 1, :n] - found.contributions[:, 2, :n]
        page.arrays["prediction/contrast"] = difference.astype("f4")
        page.header["prediction"]["contrast"] = {
            "target": token_of(prediction.contrast[0]),
            "foil": token_of(prediction.contrast[1]),
            "logit": (found.logits[:, 1] - found.logits[:, 2]).tolist(),
            "bias": (found.bias[:, 1] - found.bias[:, 2]).tolist(),
        }


def page_alpha(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor, layer) -> torch.Tensor:
    """alpha as the page computes it: from float16-rounded q and k, in float32.  [B, H, n, n]"""
    q16, k16 = q.half().float(), k.half().float()
    scores = torch.einsum("bhie,bhje->bhij", q16, k16) * layer.scale
    if layer.softcap is not None:
        scores = torch.tanh(scores / layer.softcap) * layer.softcap
    visible = additive_mask(mask, layer.causal, scores.dtype, layer.sliding_window)
    return torch.softmax(scores + visible, dim=-1)
