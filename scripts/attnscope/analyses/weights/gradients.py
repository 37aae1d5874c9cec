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
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import pandas as pd
import torch

from attnscope.analyses.weights.statistics import counted_rows
from attnscope.architectures import architecture
from attnscope.core.store import HiddenStates, batch_spans
from attnscope.core.tables import index_grid, indexed_table
from attnscope.core.tokens import CATEGORY_NAMES, CLS, OTHER, PUNCT, SEP

CATEGORIES = {CATEGORY_NAMES[c]: c for c in (CLS, SEP, PUNCT, OTHER)}  # table order
STATUS_OK = "ok"
NOT_APPLICABLE = "not applicable: no LM head"


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


def sequence_losses(logits: torch.Tensor, labels: torch.Tensor, chosen: torch.Tensor):
    """Mean cross-entropy over each sequence's chosen pieces (masked, or predicting the next
    one).  logits [B, n, V] -> [B]"""
    ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels, reduction="none")
    chosen = chosen.to(ce.dtype)
    return (ce * chosen).sum(-1) / chosen.sum(-1).clamp_min(1)


def attention_gradients(
    model, input_ids, attention_mask, token_type_ids, labels, chosen
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Attention weights of every layer and dL/dalpha, L = sum of `sequence_losses`.

    input_ids (masked), labels (original ids), chosen (masked pieces): [B, n].
    Returns two lists of n_layers tensors [B, H, n, n] (detached).
    """
    family = architecture(model.config.model_type)
    inputs = family.model_inputs(model, input_ids, attention_mask, token_type_ids)
    with _embedding_leaf(model), torch.enable_grad():
        out = model(**inputs, output_attentions=True)
        attentions = list(out.attentions)
        for alpha in attentions:
            alpha.retain_grad()
        sequence_losses(out.logits, labels, chosen).sum().backward()
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


def gradient_importance(
    model,
    store: HiddenStates,
    mask_token_id: int | None,
    rate: float,
    seed: int,
    batch_size: int,
    device: str = "cpu",
    limit: int | None = None,
    log=None,
) -> pd.DataFrame:
    """layer category importance attention n_sequences status, one row per layer and category.
    `mask_token_id` None: a causal LM, the next-token loss (`rate` and `seed` unused)."""
    n_layers = model.config.num_hidden_layers
    total = min(limit or store.n_sequences, store.n_sequences)
    causal = mask_token_id is None
    chosen_all = np.zeros(store.input_ids[:total].shape, dtype=bool)
    if not causal:
        chosen_all = choose_masked(
            store.input_ids[:total],
            store.category[:total],
            rate,
            mask_token_id,
            np.random.default_rng(seed),
        )
    sums = {
        (kind, name): np.zeros(n_layers)
        for kind in ("importance", "attention")
        for name in CATEGORIES
    }
    for start, stop, n in batch_spans(store.lengths, batch_size, total):
        part = slice(start, stop), slice(0, n)
        labels, mask, types, category, chosen = (
            torch.from_numpy(np.asarray(array[part], dtype=np.int64)).to(device)
            for array in (
                store.input_ids,
                store.attention_mask,
                store.token_type_ids,
                store.category,
                chosen_all,
            )
        )
        if causal:
            inputs = labels
            labels, chosen = next_token_targets(inputs, mask)
        else:
            chosen = chosen.bool()
            inputs = labels.masked_fill(chosen, mask_token_id)
        alphas, grads = attention_gradients(model, inputs, mask, types, labels, chosen)
        for l, (alpha, grad) in enumerate(zip(alphas, grads, strict=True)):
            for kind, values in (("importance", (alpha * grad).abs()), ("attention", alpha)):
                for name, per_seq in category_sums(values, mask, category, causal).items():
                    sums[kind, name][l] += float(per_seq.sum())
        if log is not None:
            log.info("gradients: %d of %d sequences done", stop, total)
    values = {
        kind: np.stack([sums[kind, name] for name in CATEGORIES], axis=1) / total
        for kind in ("importance", "attention")
    }
    table = indexed_table(values, layer=n_layers, category=list(CATEGORIES))
    return table.assign(n_sequences=total, status=STATUS_OK)


def not_applicable(n_layers: int, reason: str = NOT_APPLICABLE) -> pd.DataFrame:
    """The gradient table of a model where the analysis does not apply: empty values, status."""
    table = index_grid(layer=n_layers, category=list(CATEGORIES))
    return table.assign(importance=np.nan, attention=np.nan, n_sequences=0, status=reason)
