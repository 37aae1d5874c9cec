"""Gradient importance of attention per layer and key category (Clark et al. 2019, Fig. 3).

Importance of the keys of category c in layer l: |alpha^h_ij * dL/dalpha^h_ij| summed over
the keys j of category c, averaged over the counted query rows i (see `statistics`), over
heads and over sequences. The `attention` column is the plain mass sum_j alpha^h_ij on the
same keys, averaged the same way, for comparison.

L is the masked-LM loss (the paper does not say how it masked). Here, in every sequence a
seeded share `rate` (at least one; 15% as in BERT pre-training) of the real pieces of category
other or punct that are not [MASK] already is replaced by [MASK], all of them (no 80/10/10
split); the corpus's own [MASK] pieces, if any, stay as input without a target. The loss of a
sequence is the mean cross-entropy over its masked pieces; a batch's loss is the sum over its
sequences, so every sequence's gradient is that of its own loss. dL/dalpha is the total
derivative (through every later layer), as autograd gives it for the attention tensor.

Causal LMs (GPT-2, the rotary decoders, with their LM head stored or tied to the embeddings):
L is the next-token loss instead, nothing masked: per sequence the mean cross-entropy of the
prediction of piece i + 1 at every real position i that has a real successor.

This needs a fresh forward pass on the masked input (the store holds the unmasked states):
the model's own eager attention weights, returned with output_attentions, keep their grad.
A model without a language-model head (the default MiniLM) gets `NOT_APPLICABLE` rows.

`layerwise_gradient_importance` gives the same table with one layer in memory (models larger
than memory): from the stored states of that forward, dL/dX is carried back layer by layer
through the canonical layers, each recomputed from its stored input with gradients.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import h5py
import numpy as np
import pandas as pd
import torch

from attnscope.analyses.weights.settings import GradientSettings
from attnscope.analyses.weights.statistics import counted_rows
from attnscope.architectures import architecture, unembedding_input
from attnscope.core.applicability import GRADIENTS
from attnscope.core.attention import (
    attention_output,
    attention_probs,
    layer_forward,
    through,
    value_vectors,
)
from attnscope.core.canonical import (
    CanonicalLayer,
    CanonicalModel,
    PredictionHead,
)
from attnscope.core.lm_head import head_input, sequence_losses
from attnscope.core.store import HiddenStates, batch_spans
from attnscope.core.tables import index_grid, indexed_table
from attnscope.core.tokens import CATEGORY_NAMES, CLS, OTHER, PUNCT, SEP

CATEGORIES = {CATEGORY_NAMES[c]: c for c in (CLS, SEP, PUNCT, OTHER)}  # table order
STATUS_OK = "ok"
NOT_APPLICABLE = GRADIENTS  # the status of a model without an LM head


def choose_masked(
    input_ids: np.ndarray,
    category: np.ndarray,
    rate: float,
    mask_token_id: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """Pieces to mask: per sequence max(1, round(rate * k)) of its k maskable pieces
    (category other or punct, not [MASK] already), drawn without replacement.  [N, L] bool"""
    maskable = np.isin(category, (OTHER, PUNCT)) & (input_ids != mask_token_id)
    chosen = np.zeros_like(maskable)
    for s, row in enumerate(maskable):
        candidates = np.flatnonzero(row)
        if candidates.size:
            k = max(1, round(rate * candidates.size))
            chosen[s, rng.choice(candidates, size=k, replace=False)] = True
    return chosen


@contextmanager
def _embedding_leaf(model):
    """Freeze the weights and make the word embeddings' output a leaf that requires grad,
    so backward reaches every attention weight without computing any weight gradient."""
    flags = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    handle = model.get_input_embeddings().register_forward_hook(
        lambda module, args, output: output.detach().requires_grad_()
    )
    try:
        yield
    finally:
        handle.remove()
        for p, flag in zip(model.parameters(), flags, strict=True):
            p.requires_grad_(flag)


def next_token_targets(input_ids: torch.Tensor, attention_mask: torch.Tensor):
    """(labels, chosen) of the next-token loss: label i is piece i + 1, chosen where both i and
    i + 1 are real.  input_ids, attention_mask [B, n] -> [B, n] each"""
    labels = input_ids.roll(-1, dims=1)
    chosen = torch.zeros_like(attention_mask, dtype=torch.bool)
    chosen[:, :-1] = attention_mask[:, :-1].bool() & attention_mask[:, 1:].bool()
    return labels, chosen


def attention_gradients(
    model, head: PredictionHead, input_ids, attention_mask, token_type_ids, labels, chosen
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Attention weights of every layer and dL/dalpha, L = sum of `sequence_losses` (the
    loss from what the model's unembedding reads, by its `head`'s W_U in chunks: the model's
    own logits are built for one position of each sequence only, `unembedding_input`).

    input_ids (masked), labels (original ids), chosen (masked pieces): [B, n].
    Returns two lists of n_layers tensors [B, H, n, n] (detached).
    """
    arch = architecture(model.config.model_type)
    inputs = arch.model_inputs(model, input_ids, attention_mask, token_type_ids)
    with _embedding_leaf(model), torch.enable_grad():
        with unembedding_input(model, lambda x: x[:, :1]) as seen:
            out = model(**inputs, output_attentions=True)
        attentions = list(out.attentions)
        for alpha in attentions:
            alpha.retain_grad()
        sequence_losses(head, seen[0], labels, chosen).sum().backward()
    return [a.detach() for a in attentions], [a.grad for a in attentions]


def category_sums(
    values: torch.Tensor, mask: torch.Tensor, category: torch.Tensor, causal: bool = False
) -> dict[str, torch.Tensor]:
    """Per sequence: the sum of values [B, H, n, n] over each category's keys, averaged over
    counted query rows (`statistics.counted_rows`) and heads.  {category name: [B] float64}"""
    rows = counted_rows(mask, causal).double()
    values = values.double()
    out = {}
    for name, code in CATEGORIES.items():
        keys = (category == code)[:, None, None, :]
        per_row = (values * keys).sum(-1)  # [B, H, n]
        per_head = (per_row * rows[:, None]).sum(-1) / rows.sum(-1).clamp_min(1)[:, None]
        out[name] = per_head.mean(-1)
    return out


@dataclass
class LossTargets:
    """What the loss of the first N sequences of a store sees, each [N, L]: `inputs` the ids
    the model reads (with [MASK] where masked), `labels` the ids it must predict at the
    `chosen` positions (the masked pieces, or every piece with a real successor)."""

    inputs: np.ndarray
    labels: np.ndarray
    chosen: np.ndarray


def loss_targets(
    store: HiddenStates, mask_token_id: int | None, rate: float, seed: int, total: int
) -> LossTargets:
    """The masked-LM targets (`choose_masked`), or with `mask_token_id` None the next-token
    targets of a causal LM (`rate` and `seed` unused)."""
    ids = store.input_ids[:total].astype(np.int64)
    if mask_token_id is None:
        labels, chosen = next_token_targets(
            torch.from_numpy(ids), torch.from_numpy(store.attention_mask[:total])
        )
        return LossTargets(ids, labels.numpy(), chosen.numpy())
    rng = np.random.default_rng(seed)
    chosen = choose_masked(ids, store.category[:total], rate, mask_token_id, rng)
    return LossTargets(np.where(chosen, mask_token_id, ids), ids, chosen)


class ImportanceSums:
    """Per layer and key category: the summed importance and attention of every sequence."""

    def __init__(self, n_layers: int, causal: bool):
        self.causal = causal
        self.sums = {
            (kind, name): np.zeros(n_layers)
            for kind in ("importance", "attention")
            for name in CATEGORIES
        }

    def add(self, layer: int, alpha, grad, mask, category) -> None:
        """alpha, grad = dL/dalpha [B, H, n, n] of 0-based `layer`; mask, category [B, n]."""
        for kind, values in (("importance", (alpha * grad).abs()), ("attention", alpha)):
            for name, per_seq in category_sums(values, mask, category, self.causal).items():
                self.sums[kind, name][layer] += float(per_seq.sum())

    def table(self, total: int) -> pd.DataFrame:
        values = {
            kind: np.stack([self.sums[kind, name] for name in CATEGORIES], axis=1) / total
            for kind in ("importance", "attention")
        }
        n_layers = len(values["importance"])
        table = indexed_table(values, layer=n_layers, category=list(CATEGORIES))
        return table.assign(n_sequences=total, status=STATUS_OK)


def batch_tensors(arrays, start: int, stop: int, n: int, device: str) -> list[torch.Tensor]:
    """Sequences [start, stop), first n positions, of each [N, L] array, as int64 tensors."""
    part = slice(start, stop), slice(0, n)
    return [torch.from_numpy(np.asarray(a[part], dtype=np.int64)).to(device) for a in arrays]


def gradient_importance(
    model,
    head: PredictionHead,
    store: HiddenStates,
    mask_token_id: int | None,
    settings: GradientSettings,
    log=None,
) -> pd.DataFrame:
    """layer category importance attention n_sequences status, one row per layer and category,
    by a whole-model forward and backward per batch (`head`: the model's, `prediction_head`).
    `mask_token_id` None: a causal LM, the next-token loss (`settings.mask_rate` and `seed`
    unused)."""
    batch_size, device = settings.batch_size, settings.device
    total = min(settings.limit or store.n_sequences, store.n_sequences)
    targets = loss_targets(store, mask_token_id, settings.mask_rate, settings.seed, total)
    sums = ImportanceSums(model.config.num_hidden_layers, mask_token_id is None)
    for start, stop, n in batch_spans(store.lengths, batch_size, total):
        inputs, labels, chosen, mask, types, category = batch_tensors(
            (targets.inputs, targets.labels, targets.chosen, store.attention_mask,
             store.token_type_ids, store.category),
            start, stop, n, device,
        )  # fmt: skip
        alphas, grads = attention_gradients(model, head, inputs, mask, types, labels, chosen.bool())
        for l, (alpha, grad) in enumerate(zip(alphas, grads, strict=True)):
            sums.add(l, alpha, grad, mask, category)
        if log is not None:
            log.info("gradients: %d of %d sequences done", stop, total)
    return sums.table(total)


def layerwise_gradient_importance(
    states: HiddenStates,
    weights: CanonicalModel,
    head: PredictionHead,
    targets: LossTargets,
    scratch: h5py.File,
    batch_size: int,
    device: str = "cpu",
    log=None,
) -> pd.DataFrame:
    """The same table as `gradient_importance`, with one layer's weights in memory: dL/dX is
        carried back layer by layer over the whole corpus.

        `states` holds X_0..X_L of the forward the loss sees (the inputs `targets.inputs`, e.g.
        with [MASK]), for the first N = len(targets.inputs) sequences. First dL/dX_L of every
        batch, from the loss on the logits of `head` after the final norm (built in chunks:
    `core.lm_head.sequence_losses`); then for l = L-1..0,
        layer l is recomputed from the stored X_l with gradients (`attention_gradient_step`),
        which gives dL/dalpha_l and dL/dX_l, written to `scratch` for layer l - 1 (two datasets
        [N, L, d] float32, used in turn).
    """
    total, n_layers = len(targets.inputs), weights.n_layers
    sums = ImportanceSums(n_layers, weights.causal)
    spans = list(batch_spans(states.lengths, batch_size, total))
    shape = (total, states.length, states.d_model)
    # dL/dX_l lives in grad[l % 2]: layer l reads dL/dX_{l+1} from one and writes the other
    grad = [scratch.create_dataset(f"grad/{k}", shape, dtype="float32") for k in (0, 1)]
    for start, stop, n in spans:
        labels, chosen = batch_tensors((targets.labels, targets.chosen), start, stop, n, device)
        X = states.batch(n_layers, start, stop, n, device).X.requires_grad_()
        with torch.enable_grad():
            h = head_input(head, weights.final_ln, X)
            sequence_losses(head, h, labels, chosen.bool()).sum().backward()
        grad[n_layers % 2][start:stop, :n] = X.grad.cpu().numpy()
    for l in reversed(range(n_layers)):
        layer = weights.layers[l]
        for start, stop, n in spans:
            batch = states.batch(l, start, stop, n, device)
            g_next = torch.from_numpy(grad[(l + 1) % 2][start:stop, :n]).to(device)
            alpha, dalpha, g = attention_gradient_step(batch.X, batch.mask, layer, g_next)
            category = torch.from_numpy(batch.category.astype(np.int64)).to(device)
            sums.add(l, alpha, dalpha, batch.mask, category)
            if l:
                grad[l % 2][start:stop, :n] = g.cpu().numpy()
        if log is not None:
            log.info("gradients: layer %d done", l + 1)
    return sums.table(total)


def attention_gradient_step(
    X: torch.Tensor, mask: torch.Tensor, layer: CanonicalLayer, g_next: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One layer of the backward: X_l [B, n, d] recomputed through `layer` with gradients,
    given dL/dX_{l+1} [B, n, d].  -> (alpha [B, H, n, n], dL/dalpha, dL/dX_l [B, n, d])"""
    X = X.detach().requires_grad_()
    with torch.enable_grad():
        alpha = attention_probs(X, mask, layer)
        alpha.retain_grad()
        a = through(
            layer.plan.attn_out_norm, attention_output(alpha, value_vectors(X, layer), layer)
        )
        layer_forward(X, mask, layer, attention=a).backward(g_next)
    return alpha.detach(), alpha.grad, X.grad


def not_applicable(n_layers: int, reason: str = NOT_APPLICABLE) -> pd.DataFrame:
    """The gradient table of a model where the analysis does not apply: empty values, status."""
    table = index_grid(layer=n_layers, category=list(CATEGORIES))
    return table.assign(importance=np.nan, attention=np.nan, n_sequences=0, status=reason)
