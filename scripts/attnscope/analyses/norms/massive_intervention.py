"""What massive activations do (Sun et al. 2024, Sec. 3; locuslab/massive-activations,
lib/hook.py): set them to zero, or to their mean, and run the rest of the model.

The edited entries (`sink_entries`): the dimensions of kind `massive` (`massive_dimensions`:
not recurring on ordinary tokens) that are massive at the first position, at the first state
l* where one is; at l*, their massive entries at the first position and at delimiters (as
Sun et al. edit the starting token and the first delimiter), nothing else. The state l* is
read from the store whole (one state in memory, [N, n, d] float32), the entries set

    zeroed  to 0
    mean    to the mean of that dim's massive values at l* over the positions of the same
            kind (first, delimiter) over the sequences; when every sequence starts with the
            same piece (a BOS), a causal model's first state is the same in all of them and
            its mean is the value itself: the mean variant then leaves position 0 as it was

and layers l* .. L - 1 run from the edited state (`core.forward_from_layer`), then the final
norm and the LM head. The table gives the next-token loss (mean cross-entropy in nats over
every real position with a real successor; `forward_from_layer.next_token_loss`) and the
perplexity exp(loss) that Sun et al. report, for the unmodified state (the same forward from
the stored state, so that the differences are the edit's alone), zeroed and mean.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from attnscope.analyses.norms.massive_activations import FIRST, MASSIVE, ORDINARY
from attnscope.core.canonical import CanonicalModel, PredictionHead
from attnscope.core.forward_from_layer import forward_from_layer, next_token_loss
from attnscope.core.store import HiddenStates
from attnscope.core.tables import not_applicable

VARIANTS = ("unmodified", "zeroed", "mean")
NONE_FOUND = "no massive activation at the first position (see massive_dimensions.tsv)"


def sink_entries(massive: pd.DataFrame) -> pd.DataFrame:
    """The entries to edit (see the module docstring): rows of `massive_dimensions`, all of
    one state; empty when no dim of kind `massive` is massive at the first position."""
    sinks = massive[(massive["kind"] == MASSIVE) & (massive["position_kind"] == FIRST)]
    if sinks.empty:
        return massive.iloc[:0]
    start = sinks["state"].min()
    dims = sinks.loc[sinks["state"] == start, "dim"].unique()
    chosen = (massive["state"] == start) & massive["dim"].isin(dims)
    return massive[chosen & (massive["position_kind"] != ORDINARY)]


def edited_states(X: torch.Tensor, entries: pd.DataFrame) -> dict[str, torch.Tensor]:
    """The state X [N, n, d] unmodified, with the `entries` (columns sequence, position,
    dim, value, position_kind) zeroed, and set to the mean value of their (dim,
    position_kind)."""
    s, p, k = (
        torch.tensor(entries[c].to_numpy(dtype=np.int64)) for c in ("sequence", "position", "dim")
    )
    zeroed, mean = X.clone(), X.clone()
    zeroed[s, p, k] = 0.0
    means = entries.groupby(["dim", "position_kind"])["value"].transform("mean").to_numpy()
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
    """{variant: (next-token loss, predictions)} of each edited state X_start run to the head.
    A state equal to an earlier variant's (the mean of a causal model's first state after a
    BOS is the state itself) takes that variant's loss without running the layers again."""
    losses = {}
    for name, X in states.items():
        same = next((k for k in losses if torch.equal(states[k], X)), None)
        if same is not None:
            losses[name] = losses[same]
            continue
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
    limit: int | None = None,
) -> pd.DataFrame:
    """`variant state dims n_entries n_sequences n_predictions loss perplexity
    loss_difference` over the store's first `limit` sequences (all if None; `massive` found
    on them), or a not-applicable table when no entry is edited (see the module docstring)."""
    entries = sink_entries(massive)
    if entries.empty:
        return not_applicable(NONE_FOUND)
    start = int(entries["state"].iloc[0])
    X = torch.from_numpy(store.hidden(start, 0, limit))
    mask = torch.from_numpy(store.attention_mask[:limit].astype(np.int64))
    ids = store.input_ids[:limit]
    losses = intervention_losses(
        edited_states(X, entries), start, weights, head, ids, mask, batch_size, device
    )
    base = losses["unmodified"][0]
    loss = np.array([value for value, _ in losses.values()])
    return pd.DataFrame(
        {
            "variant": list(losses),
            "state": start,
            "dims": " ".join(str(k) for k in sorted(entries["dim"].unique())),
            "n_entries": len(entries),
            "n_sequences": len(X),
            "n_predictions": [count for _, count in losses.values()],
            "loss": loss,
            "perplexity": np.exp(loss),
            "loss_difference": loss - base,
        }
    )
