"""The attention-sink card: what the sink papers measured, computed the way their code does.

Gu et al. 2024 (arXiv 2410.10781; sail-sg/Attention-Sink, eval_sink_open_source.py,
`compute_attention_sink`), Sink^eps. Each sequence is cut to its first T = `positions`
pieces (a sequence with fewer is left out, as their code refuses it) and run through the
model again, so that no piece past T is seen. Per sequence s, layer l and head h, the
importance of key k is the sum over every query row i of alpha(i, k) / (T - k) (row 0
included; `key_importance`); the head is a sink in that sequence when the importance of key
0 exceeds eps. Sink^eps is the mean of that indicator over sequences, layers and heads:
thresholded per sequence, then averaged (`sink_heads` `sink_rate`, `sink_epsilon`
`sink_share`). The pooled variant, which averages the importance over sequences first and
thresholds once, is another number and is named so (`sink_pooled`, `sink_share_pooled`).

The inputs (`sink_inputs`), each the same sequences, T pieces each:

    corpus    the corpus's first T pieces (specials as the tokenizer put them)
    control   Gu et al.'s repeated-token input (3.3, App. C.1): one piece at every position,
              no BOS nor any special piece: the sequence's first non-special piece
    anchored  another experiment, not Gu's: the corpus's T pieces with every non-special
              piece replaced by that first non-special piece, the specials (BOS, [CLS],
              [SEP]) kept in place

Xiao et al. 2023 (StreamingLLM) along the stream: alpha(i, 0) averaged over heads and over the
counted rows (`sinks.sink_rows`) whose query position i falls in a log-spaced bin [2^k,
2^(k+1)) (`stream_bins`), per layer, over the corpus's stored (whole) sequences.

Kobayashi's view, summarised (`kobayashi_summary`): per layer, the means over heads of the
first position's share of alpha and of sum_j ||alpha_ij f(x_j)|| (`attention_sinks.tsv`, the
norms pass over every sequence of the corpus), and over every layer and head (layer "all").
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from attnscope.analyses.norms.sinks import sink_rows
from attnscope.core.attention import attention_probs
from attnscope.core.canonical import CanonicalModel
from attnscope.core.store import TOKEN_ARRAYS, HiddenStates
from attnscope.core.streaming import Moments
from attnscope.core.tables import indexed_table
from attnscope.core.tokens import CLS, PAD, SEP

ALL = "all"  # the `layer` of a row over every layer
INPUTS = ("corpus", "control", "anchored")  # `sink_inputs`' order


def key_importance(alpha: torch.Tensor) -> torch.Tensor:
    """Gu et al.'s importance of every key k of T-piece sequences: the sum over every query
    row i of alpha(i, k) / (T - k).  alpha [B, H, T, T] -> [B, H, T]"""
    T = alpha.shape[-1]
    return alpha.sum(-2) / torch.arange(T, 0, -1, dtype=alpha.dtype, device=alpha.device)


def plain_pieces(category: np.ndarray) -> np.ndarray:
    """Real pieces that are not special (category neither CLS, SEP nor PAD).  [N, n] bool"""
    return (category != CLS) & (category != SEP) & (category != PAD)


def sink_inputs(tokens: dict[str, np.ndarray], positions: int) -> dict[str, np.ndarray]:
    """The token arrays (`store.TOKEN_ARRAYS`) of the three inputs, stacked in `INPUTS`
    order, and `kept` [N] bool: the sequences used, those with at least `positions` real
    pieces and a non-special piece among them.  Each array [3 M, positions]"""
    T = positions
    if tokens["input_ids"].shape[1] < T:  # no sequence so long
        empty = {name: np.zeros((0, T), tokens[name].dtype) for name in TOKEN_ARRAYS}
        return {**empty, "kept": np.zeros(len(tokens["input_ids"]), dtype=bool)}
    real = tokens["attention_mask"][:, :T].astype(bool)
    plain = plain_pieces(tokens["category"][:, :T])
    kept = real.all(1) & plain.any(1)
    corpus = {name: tokens[name][kept, :T] for name in TOKEN_ARRAYS}
    plain = plain[kept]
    first = plain.argmax(1)  # the first non-special piece of each sequence
    rows = np.arange(len(first))
    piece = corpus["input_ids"][rows, first][:, None]
    kind = corpus["category"][rows, first][:, None]
    control = {
        "input_ids": np.broadcast_to(piece, plain.shape),
        "attention_mask": np.ones(plain.shape),
        "token_type_ids": np.zeros(plain.shape),
        "category": np.broadcast_to(kind, plain.shape),
        "word_ids": np.broadcast_to(np.arange(T), plain.shape),
    }
    anchored = corpus | {
        "input_ids": np.where(plain, piece, corpus["input_ids"]),
        "category": np.where(plain, kind, corpus["category"]),
    }
    stacked = {
        name: np.concatenate([s[name] for s in (corpus, control, anchored)]).astype(
            tokens[name].dtype
        )
        for name in TOKEN_ARRAYS
    }
    return {**stacked, "kept": kept}


def first_key_importance(
    store: HiddenStates, weights: CanonicalModel, batch_size: int, device: str = "cpu"
) -> np.ndarray:
    """Gu et al.'s importance of key 0 (`key_importance`) in every sequence of a store of
    T-piece sequences, all real (`sink_inputs`), every layer's alpha recomputed from its
    stored input, one layer at a time.  -> [N, L, H] float64"""
    if not store.attention_mask.all():
        raise ValueError(f"{store.path}: Sink^eps reads sequences without padding")
    found = np.zeros((store.n_sequences, weights.n_layers, weights.n_heads))
    for l in range(weights.n_layers):
        for batch in store.batches(l, batch_size, device):
            with torch.no_grad():
                alpha = attention_probs(batch.X, batch.mask, weights.layers[l])
            found[batch.start : batch.stop, l] = key_importance(alpha)[..., 0].double().cpu()
    return found


def sink_heads(importance: dict[str, np.ndarray], epsilon: float) -> pd.DataFrame:
    """`layer head n_sequences importance sink_rate sink_pooled` and, per other input,
    `importance_<input> sink_rate_<input>`: per (layer, head) the mean over sequences of the
    importance of key 0, the share of sequences in which it exceeds `epsilon` (Gu et al.'s
    indicator), and whether the mean exceeds it (the pooled variant).  `importance`:
    {input: [N, L, H]} (`INPUTS`, the same N sequences)."""
    corpus = importance["corpus"]
    N, L, H = corpus.shape
    columns = {
        "n_sequences": np.full((L, H), N),
        "importance": corpus.mean(0),
        "sink_rate": (corpus > epsilon).mean(0),
        "sink_pooled": corpus.mean(0) > epsilon,
    }
    for name, values in importance.items():
        if name != "corpus":
            columns[f"importance_{name}"] = values.mean(0)
            columns[f"sink_rate_{name}"] = (values > epsilon).mean(0)
    return indexed_table(columns, layer=L, head=H)


def sink_epsilon(heads: pd.DataFrame, epsilon: float, positions: int) -> pd.DataFrame:
    """`layer sink_share sink_share_pooled sink_share_control sink_share_anchored n_heads
    n_sequences epsilon positions`: per layer the mean over its heads and the sequences of
    Gu et al.'s indicator, and over every (layer, head) pair (layer "all"): Sink^eps; the
    pooled variant's share of heads; the same indicator on the two repeated-token inputs."""
    rates = {
        "sink_share": "sink_rate",
        "sink_share_pooled": "sink_pooled",
        "sink_share_control": "sink_rate_control",
        "sink_share_anchored": "sink_rate_anchored",
    }
    means = heads[list(rates.values())].astype(float).set_axis(list(rates), axis=1)
    per_layer = means.groupby(heads["layer"].astype(str), sort=False).mean()
    total = means.mean().to_frame(ALL).T
    table = pd.concat([per_layer, total]).rename_axis("layer").reset_index()
    sizes = heads.groupby("layer").size().tolist()
    n_sequences = int(heads["n_sequences"].iloc[0]) if len(heads) else 0
    return table.assign(
        n_heads=[*sizes, len(heads)],
        n_sequences=n_sequences,
        epsilon=epsilon,
        positions=positions,
    )


def stream_bins(length: int) -> np.ndarray:
    """Left edges 0, 1, 2, 4, ... of the query-position bins: [0, 1), then [2^k, 2^(k+1))
    below `length` (the first bin counts no row of a causal layer)."""
    return np.concatenate([[0], 2 ** np.arange(max(int(np.ceil(np.log2(max(length, 2)))), 1))])


class StreamAttention:
    """Per layer and query-position bin, alpha(i, 0) averaged over heads and the counted
    rows (the stream), fed one batch of one layer at a time."""

    def __init__(self, n_layers: int, length: int):
        self.edges = stream_bins(length)
        self.stream = Moments((n_layers, len(self.edges)))

    def add_batch(self, layer: int, alpha: torch.Tensor, rows: torch.Tensor) -> None:
        """alpha [B, H, n, n], rows [B, n] (`sink_rows`)."""
        mean_heads = alpha[..., 0].mean(1)  # [B, n]
        position = torch.arange(rows.shape[1]).expand(rows.shape).numpy()
        which = np.searchsorted(self.edges, position, side="right") - 1
        for b in range(len(self.edges)):
            chosen = rows & torch.from_numpy(which == b).to(rows.device)
            self.stream.add((layer, b), mean_heads[chosen])


def stream_attention(
    store: HiddenStates,
    weights: CanonicalModel,
    batch_size: int,
    device: str = "cpu",
    limit: int | None = None,
) -> StreamAttention:
    """`StreamAttention` of a store's first `limit` sequences (all if None): every layer's
    alpha recomputed from its stored input, one layer at a time (one layer's weights read
    at a time on the layer-streamed route)."""
    found = StreamAttention(weights.n_layers, store.length)
    for l in range(weights.n_layers):
        layer = weights.layers[l]
        for batch in store.batches(l, batch_size, device, limit):
            with torch.no_grad():
                alpha = attention_probs(batch.X, batch.mask, layer)
            found.add_batch(l, alpha, sink_rows(batch.mask, layer))
    return found


def sink_stream(found: StreamAttention, length: int) -> pd.DataFrame:
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
