"""Run the rest of a model from a hidden state: the workflow's interventions.

An intervention edits the residual stream X_l entering layer l (0-based; l = 0 the embedding
output, l = L the last layer's output before the final norm) and runs layers l .. L - 1 from
it with the canonical layers (`core.attention.layer_forward`), one layer at a time over every
batch, so that on the layer-streamed route one layer's weights are in memory at a time. The
language-model head then gives the next-token loss (`core.lm_head.cross_entropy`: the
logits built a chunk of positions at a time, never a batch's [B, n, V]).

Shapes: X [N, n, d] float32 (the whole corpus, as `hidden/{l}` of the store holds it),
mask [N, n] (1 = real piece), input_ids [N, n].
"""

from __future__ import annotations

import numpy as np
import torch

from attnscope.core.attention import layer_forward
from attnscope.core.canonical import CanonicalModel, PredictionHead
from attnscope.core.lm_head import cross_entropy, head_input
from attnscope.core.store import batch_spans


def forward_from_layer(
    weights: CanonicalModel,
    X: torch.Tensor,
    mask: torch.Tensor,
    start: int,
    batch_size: int,
    device: str = "cpu",
) -> torch.Tensor:
    """X_L from X_start through layers start .. L - 1.  X [N, n, d] -> [N, n, d] (on the CPU)

    Padding positions of every layer's input are set to 0 (real positions never read them;
    a padded query that sees no key would give NaN that 0 x NaN spreads)."""
    lengths = mask.sum(1).cpu().numpy()
    real = mask.bool()[..., None]
    X = torch.where(real, X.float(), 0.0).cpu()
    for l in range(start, weights.n_layers):
        layer = weights.layers[l]  # read once per layer on the layer-streamed route
        out = torch.zeros_like(X)
        for first, stop, n in batch_spans(lengths, batch_size):
            x = X[first:stop, :n].to(device)
            m = mask[first:stop, :n].to(device)
            with torch.no_grad():
                y = layer_forward(x, m, layer)
            out[first:stop, :n] = torch.where(m.bool()[..., None], y, 0.0).cpu()
        X = out
    return X


def next_token_loss(
    head: PredictionHead,
    weights: CanonicalModel,
    X_last: torch.Tensor,
    input_ids: np.ndarray,
    mask: torch.Tensor,
    batch_size: int,
    device: str = "cpu",
) -> tuple[float, int]:
    """(mean cross-entropy in nats, number of predictions) of the next piece at every real
    position i whose successor i + 1 is real, over the corpus (each prediction weighs the
    same), from the last state X_L [N, n, d] through the final norm and the head."""
    lengths = mask.sum(1).cpu().numpy()
    total, count = 0.0, 0
    for first, stop, n in batch_spans(lengths, batch_size):
        ids = torch.from_numpy(input_ids[first:stop, :n].astype(np.int64)).to(device)
        m = mask[first:stop, :n].bool().to(device)
        predicted = m[:, :-1] & m[:, 1:]
        with torch.no_grad():
            h = head_input(head, weights.final_ln, X_last[first:stop, : n - 1].to(device))
            nll = cross_entropy(head, h[predicted], ids[:, 1:][predicted])
        total += float(nll.double().sum())
        count += int(predicted.sum())
    if count == 0:
        raise ValueError("next-token loss: no real position has a real successor")
    return total / count, count
