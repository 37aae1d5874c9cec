"""Presentation tables of the mixing family, read back from `maps.h5` (no model, no
decomposition): the FF block's amplified and suppressed piece pairs and one sequence's maps.
Their settings (ff_pairs_top_k, example_sequence, example_tokens) rerun only this cheap step.
"""

from __future__ import annotations

from collections.abc import Callable

import h5py
import numpy as np
import pandas as pd
import torch

from attnscope.analyses.mixing.statistics import FfPairs
from attnscope.core.attention import visible_pairs
from attnscope.core.store import batch_spans
from attnscope.maps.scopes import SCOPES


def map_layers(maps: h5py.File) -> list[int]:
    """The layers (1-based, in order) whose maps `maps.h5` holds: every layer, or the
    `layers:` setting's."""
    return sorted(int(name) for name in maps[SCOPES[0]])


def ff_pairs_table(
    maps: h5py.File,
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    batch_size: int,
    top_k: int,
    token_of: Callable[[int], str],
) -> pd.DataFrame:
    """ff_pairs.tsv from the stored AttnResLn and AttnResLnFf maps [N, L, L] of every layer
    (over the pairs each layer sees: causal, sliding window); input_ids, attention_mask [N, L]
    of the corpus. Batches as in mixing_compute, so the sums
    (and the table) are the same as computed there."""
    layers = map_layers(maps)
    lengths = attention_mask.sum(axis=1)
    pairs = FfPairs(layers[-1])
    windows = maps.attrs.get("sliding_window", [0] * layers[-1])  # 0: the layer has none
    for l in (layer - 1 for layer in layers):
        before, after = maps[f"AttnResLn/{l + 1}"], maps[f"AttnResLnFf/{l + 1}"]
        for start, stop, n in batch_spans(lengths, batch_size):
            mask = torch.from_numpy(attention_mask[start:stop, :n].astype(np.int64))
            pairs.add(
                l,
                torch.from_numpy(before[start:stop, :n, :n].astype(np.float32)),
                torch.from_numpy(after[start:stop, :n, :n].astype(np.float32)),
                visible_pairs(mask, bool(maps.attrs["causal"]), int(windows[l]) or None),
                input_ids[start:stop, :n],
            )
    return pairs.table(top_k, token_of)


def example_maps_table(
    maps: h5py.File,
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    sequence: int,
    tokens: int,
    token_of: Callable[[int], str],
) -> pd.DataFrame:
    """example_maps.tsv: every scope's map of `sequence` (0-based) over its first `tokens`
    pieces, one row per (scope, layer, query, key); positions 1-based."""
    N = len(input_ids)
    if not 0 <= sequence < N:
        raise ValueError(f"analyses.mixing.example_sequence {sequence} is not in 0..{N - 1}")
    length = min(int(attention_mask[sequence].sum()), tokens)
    pieces = [token_of(int(t)) for t in input_ids[sequence, :length]]
    query, key = np.meshgrid(np.arange(length), np.arange(length), indexing="ij")
    frames = []
    for layer in map_layers(maps):
        for scope in SCOPES:
            values = maps[f"{scope}/{layer}"][sequence, :length, :length].astype(np.float32)
            frames.append(
                pd.DataFrame(
                    {
                        "scope": scope,
                        "layer": layer,
                        "query": query.ravel() + 1,
                        "key": key.ravel() + 1,
                        "query_token": [pieces[i] for i in query.ravel()],
                        "key_token": [pieces[j] for j in key.ravel()],
                        "value": values.ravel().astype(np.float64),
                    }
                )
            )
    return pd.concat(frames, ignore_index=True)
