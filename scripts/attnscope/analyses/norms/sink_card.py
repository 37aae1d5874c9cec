"""The attention-sink card: what the sink papers measured, computed the way they did.

Gu et al. 2024 (arXiv 2410.10781), Sink^eps. For every layer l and head h, the mean weight on
the first position over the query rows within the first `positions` pieces (64 in the paper):

    a^l_h = mean of alpha^l_h(i, 0) over every counted row i < positions (0-based) of every
            sequence (each row weighs the same; rows as in `sinks.sink_rows`: real rows that
            see position 0, without i = 0 of a causal layer, whose alpha_00 = 1 whatever the
            head does: the paper's average includes that row, which adds (1 - a) / 64 at most)

    Sink^eps = share of the (layer, head) pairs with a^l_h > eps   (eps = 0.3 in the paper)

The control (their "repeated token" input): every sequence with each piece that is not a
special one (category CLS or SEP: BOS, [CLS], [SEP], the separators) replaced by the
sequence's first non-special piece, same length, specials kept in place (`repeated_token_ids`);
the model runs again on it and the same a^l_h are read from its states.

Xiao et al. 2023 (StreamingLLM) along the stream: alpha(i, 0) averaged over heads and over the
counted rows whose query position i falls in a log-spaced bin [2^k, 2^(k+1)) (`stream_bins`),
per layer.

Kobayashi's view, summarised (`kobayashi_summary`): per layer, the means over heads of the
first position's share of alpha and of sum_j ||alpha_ij f(x_j)|| (`attention_sinks.tsv`), and
over every layer and head (layer "all").
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from attnscope.analyses.norms.sinks import sink_rows
from attnscope.core.attention import attention_probs
from attnscope.core.canonical import CanonicalModel
from attnscope.core.store import HiddenStates
from attnscope.core.streaming import Moments
from attnscope.core.tables import indexed_table
from attnscope.core.tokens import CLS, PAD, SEP

ALL = "all"  # the `layer` of a row over every layer


def repeated_token_ids(input_ids: np.ndarray, category: np.ndarray) -> np.ndarray:
    """Gu et al.'s control input: in each sequence every real piece that is not special
    (category CLS or SEP) becomes the sequence's first non-special piece; special pieces and
    padding stay. A sequence of specials alone is kept as it is.  [N, n] -> [N, n]"""
    ids = input_ids.copy()
    plain = (category != CLS) & (category != SEP) & (category != PAD)
    for s in range(len(ids)):
        found = np.flatnonzero(plain[s])
        if found.size:
            ids[s, plain[s]] = input_ids[s, found[0]]
    return ids


def stream_bins(length: int) -> np.ndarray:
    """Left edges 0, 1, 2, 4, ... of the query-position bins: [0, 1), then [2^k, 2^(k+1))
    below `length` (the first bin counts no row of a causal layer)."""
    return np.concatenate([[0], 2 ** np.arange(max(int(np.ceil(np.log2(max(length, 2)))), 1))])


class SinkAttention:
    """Per layer and head, alpha(i, 0) over the counted rows i < `positions` (Sink^eps), and
    per layer and query-position bin, its mean over heads and rows (the stream), fed one
    batch of one layer at a time."""

    def __init__(self, n_layers: int, n_heads: int, length: int, positions: int):
        self.positions = positions
        self.edges = stream_bins(length)
        self.first = Moments((n_layers, n_heads))
        self.stream = Moments((n_layers, len(self.edges)))

    def add_batch(self, layer: int, alpha: torch.Tensor, rows: torch.Tensor) -> None:
        """alpha [B, H, n, n], rows [B, n] (`sink_rows`)."""
        first = alpha[..., 0].transpose(0, 1)  # [H, B, n]
        n = rows.shape[1]
        early = rows & (torch.arange(n, device=rows.device) < self.positions)
        self.first.add(layer, first[:, early])
        position = torch.arange(n, device=rows.device).expand_as(rows)
        which = np.searchsorted(self.edges, position.cpu().numpy(), side="right") - 1
        mean_heads = first.mean(0)  # [B, n]
        for b in range(len(self.edges)):
            chosen = rows & torch.from_numpy(which == b).to(rows.device)
            self.stream.add((layer, b), mean_heads[chosen])

    def head_means(self) -> np.ndarray:
        """a^l_h [L, H] (NaN where no row counted)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return self.first.total / self.first.count


def sink_attention(
    store: HiddenStates,
    weights: CanonicalModel,
    positions: int,
    batch_size: int,
    device: str = "cpu",
    limit: int | None = None,
) -> SinkAttention:
    """`SinkAttention` of a store's first `limit` sequences (all if None): every layer's alpha
    recomputed from its stored input, one layer at a time (one layer's weights read at a time
    on the layer-streamed route)."""
    found = SinkAttention(weights.n_layers, weights.n_heads, store.length, positions)
    for l in range(weights.n_layers):
        layer = weights.layers[l]
        for batch in store.batches(l, batch_size, device, limit):
            with torch.no_grad():
                alpha = attention_probs(batch.X, batch.mask, layer)
            found.add_batch(l, alpha, sink_rows(batch.mask, layer))
    return found


def sink_heads(found: SinkAttention, control: SinkAttention, epsilon: float) -> pd.DataFrame:
    """`layer head n_rows alpha_first sink alpha_first_control sink_control`: a^l_h of the
    corpus and of its repeated-token control, and whether each exceeds `epsilon`."""
    a, c = found.head_means(), control.head_means()
    L, H = a.shape
    columns = {
        "n_rows": found.first.count.astype(int),
        "alpha_first": a,
        "sink": a > epsilon,
        "alpha_first_control": c,
        "sink_control": c > epsilon,
    }
    return indexed_table(columns, layer=L, head=H)


def sink_epsilon(heads: pd.DataFrame, epsilon: float, positions: int) -> pd.DataFrame:
    """`layer sink_share sink_share_control n_heads epsilon positions`: per layer the share of
    its heads that are sinks, and Sink^eps over every (layer, head) pair (layer "all")."""
    per_layer = heads.groupby("layer").agg(
        sink_share=("sink", "mean"),
        sink_share_control=("sink_control", "mean"),
        n_heads=("head", "size"),
    )
    total = pd.DataFrame(
        {
            "sink_share": [heads["sink"].mean()],
            "sink_share_control": [heads["sink_control"].mean()],
            "n_heads": [len(heads)],
        },
        index=pd.Index([ALL], name="layer"),
    )
    table = pd.concat([per_layer.set_axis(per_layer.index.astype(str)), total]).reset_index()
    return table.assign(epsilon=epsilon, positions=positions)


def sink_stream(found: SinkAttention, length: int) -> pd.DataFrame:
    """`layer bin position_from position_to n_rows alpha_first`: per layer, the first
    position's weight averaged over heads and the counted query rows with position_from <= i
    <= position_to (0-based, log-spaced bins)."""
    L, n_bins = found.stream.count.shape
    edges = found.edges
    upper = np.minimum(np.append(edges[1:], length) - 1, length - 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = found.stream.total / found.stream.count
    table = indexed_table(
        {"n_rows": found.stream.count.astype(int), "alpha_first": mean}, layer=L, bin=n_bins
    )
    table.insert(2, "position_from", np.tile(edges, L))
    table.insert(3, "position_to", np.tile(upper, L))
    return table[table["n_rows"] > 0].reset_index(drop=True)


def kobayashi_summary(attention_sinks: pd.DataFrame) -> pd.DataFrame:
    """`layer alpha_first norm_share norm_over_alpha`: per layer (and over every layer and
    head, layer "all") the mean over heads of the first position's share of alpha and of the
    norms sum_j ||alpha_ij f(x_j)||, from `attention_sinks.tsv`; norm_over_alpha = their ratio
    (< 1: the first position moves less than its weight says)."""
    columns = ["alpha_first", "norm_share"]
    per_layer = attention_sinks.groupby("layer")[columns].mean()
    per_layer.index = per_layer.index.astype(str)
    total = attention_sinks[columns].mean().to_frame(ALL).T
    table = pd.concat([per_layer, total]).rename_axis("layer").reset_index()
    with np.errstate(invalid="ignore", divide="ignore"):
        table["norm_over_alpha"] = table["norm_share"] / table["alpha_first"]
    return table
