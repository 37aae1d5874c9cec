"""What massive activations do (Sun et al. 2024, Sec. 3): set them to zero, or to their mean,
and run the rest of the model.

The state l* where massive entries first appear (`massive_dimensions`' smallest `state`) is
read from the store whole (one state in memory, [N, n, d] float32). The entries massive at l*
(those (sequence, position, dim) triples, nothing else) are set

    zeroed  to 0
    mean    to the mean of that dim's massive values at l* over the corpus

and layers l* .. L - 1 run from the edited state (`core.forward_from_layer`), then the final
norm and the LM head. The table gives the next-token loss (mean cross-entropy in nats over
every real position with a real successor; `forward_from_layer.next_token_loss`) for the
unmodified state (the same forward from the stored state, so that the differences are the
edit's alone), zeroed and mean, with each one's difference from the unmodified loss.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from attnscope.core.canonical import CanonicalModel, PredictionHead
from attnscope.core.forward_from_layer import forward_from_layer, next_token_loss
from attnscope.core.store import HiddenStates
from attnscope.core.tables import not_applicable

VARIANTS = ("unmodified", "zeroed", "mean")


def edited_states(X: torch.Tensor, entries: pd.DataFrame) -> dict[str, torch.Tensor]:
    """The state X [N, n, d] unmodified, with the `entries` (columns sequence, position, dim)
    zeroed, and set to each dim's mean over its entries."""
    s, p, k = (
        torch.tensor(entries[c].to_numpy(dtype=np.int64)) for c in ("sequence", "position", "dim")
    )
    zeroed, mean = X.clone(), X.clone()
    zeroed[s, p, k] = 0.0
    means = entries.groupby("dim")["value"].transform("mean").to_numpy()
    mean[s, p, k] = torch.tensor(means, dtype=X.dtype)
    return {"unmodified": X, "zeroed": zeroed, "mean": mean}


def intervention_losses(
    states: dict[str, torch.Tensor],
    start: int,
    weights: CanonicalModel,
    head: PredictionHead,
    input_ids: np.ndarray,
    mask: torch.Tensor,
    batch_size: int,
    device: str = "cpu",
) -> dict[str, tuple[float, int]]:
    """{variant: (next-token loss, predictions)} of each edited state X_start run to the head."""
    losses = {}
    for name, X in states.items():
        last = forward_from_layer(weights, X, mask, start, batch_size, device)
        losses[name] = next_token_loss(head, weights, last, input_ids, mask, batch_size, device)
    return losses


def massive_intervention(
    store: HiddenStates,
    massive: pd.DataFrame,
    weights: CanonicalModel,
    head: PredictionHead,
    batch_size: int,
    device: str = "cpu",
) -> pd.DataFrame:
    """`variant state n_entries dims n_predictions loss loss_difference` (see the module
    docstring), or a not-applicable table when no entry is massive."""
    if massive.empty:
        return not_applicable("no massive activation (|x| > 100 and >= 1000 x the median)")
    start = int(massive["state"].min())
    entries = massive[massive["state"] == start]
    X = torch.from_numpy(store.hidden(start))
    mask = torch.from_numpy(store.attention_mask.astype(np.int64))
    losses = intervention_losses(
        edited_states(X, entries), start, weights, head, store.input_ids, mask, batch_size, device
    )
    base = losses["unmodified"][0]
    return pd.DataFrame(
        {
            "variant": list(losses),
            "state": start,
            "n_entries": len(entries),
            "dims": " ".join(str(k) for k in sorted(entries["dim"].unique())),
            "n_predictions": [count for _, count in losses.values()],
            "loss": [loss for loss, _ in losses.values()],
            "loss_difference": [loss - base for loss, _ in losses.values()],
        }
    )
