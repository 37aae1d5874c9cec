"""One streaming pass of the probing family over a store: every source, layer by layer.

Per layer l (1-based) and batch: the maps of every source (weights and norms recomputed from
hidden/{l-1}, the input of layer l; mixing scopes read from maps.h5), turned into word-level maps
and handed to the consumers (syntax counts and probe features on EWT, coreference on GAP). Only
one batch of one layer is in memory at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import h5py
import numpy as np
import torch

from attnscope.analyses.probing.settings import ProbingSettings
from attnscope.analyses.probing.sources import (
    MODEL_SOURCES,
    head_labels,
    mixing_maps,
    model_maps,
)
from attnscope.analyses.probing.word_maps import aggregation, word_level
from attnscope.core.attention import attention_probs
from attnscope.core.canonical import CanonicalModel
from attnscope.core.store import HiddenStates

# consumer(source, layer, labels, word maps [B, H', W + 1, W + 1], batch, metas, n_words)
Consumer = Callable[..., None]


def stream_word_maps(
    store: HiddenStates,
    weights: CanonicalModel,
    metas: list[dict],
    consumer: Consumer,
    settings: ProbingSettings,
    mixing: h5py.File | None = None,
    on_batch: Callable | None = None,
    log: logging.Logger | None = None,
) -> None:
    """Call `consumer` for every source, layer and batch; `on_batch(batch, metas, n_words,
    source_matrix)` once per batch of the first layer (gold counts, embeddings); every source of
    `settings.sources`, over every sequence; `mixing`:
    the mixing family's open maps.h5, which its scopes' sources read."""
    sources, batch_size, device = settings.sources, settings.batch_size, settings.device
    if len(metas) != store.n_sequences:
        raise ValueError(f"{len(metas)} meta objects for {store.n_sequences} sequences")
    scopes = [s for s in sources if s not in MODEL_SOURCES]
    if scopes and mixing is None:
        raise ValueError(f"sources {scopes} need the mixing family's maps.h5")
    n_words_all = np.array([len(m["words"]) for m in metas])
    for l, layer in enumerate(weights.layers):
        for batch in store.batches(l, batch_size, device):
            alpha = None  # shared by the weights and norms sources of this batch
            batch_metas = metas[batch.start : batch.stop]
            n_words = n_words_all[batch.start : batch.stop]
            W = int(n_words.max())
            word_ids = torch.from_numpy(batch.word_ids).to(device)
            if l == 0 and on_batch is not None:
                source_matrix, _ = aggregation(word_ids, batch.mask, W, "mean")
                on_batch(batch, batch_metas, n_words, source_matrix.cpu())
            for source in sources:
                with torch.no_grad():
                    if source in MODEL_SOURCES:
                        if alpha is None:
                            alpha = attention_probs(batch.X, batch.mask, layer)
                        maps = model_maps(source, batch.X, batch.mask, layer, alpha)
                    else:
                        n = batch.X.shape[1]
                        maps = mixing_maps(mixing, source, l + 1, batch.start, batch.stop, n)
                        maps = maps.to(device)
                    words = word_level(maps, word_ids, batch.mask, W, settings.word_mode).cpu()
                labels = head_labels(source, weights.n_heads)
                consumer(source, l + 1, labels, words, batch, batch_metas, n_words)
        if log:
            log.info("layer %d done", l + 1)


def syntax_pass(store, weights, metas, settings, features: h5py.File | None, mixing=None, log=None):
    """Dependency-head counts (and probe features into the open file `features`) of an EWT
    store (`stream_word_maps`). -> (syntax_heads table, syntax_best table)"""
    from attnscope.analyses.probing.features import FeatureWriter
    from attnscope.analyses.probing.syntax import (
        SyntaxCounts,
        best_table,
        gold_arrays,
        relation_names,
    )

    if any("heads" not in m or "relations" not in m for m in metas):
        raise ValueError("the syntax corpus has no gold heads: use a corpus of kind ewt")
    causal = weights.causal
    counts = SyntaxCounts(relation_names(metas))
    n_words = np.array([len(m["words"]) for m in metas])
    writer = None
    if features is not None:
        writer = FeatureWriter(features, n_words, weights.n_layers, store.d_model)

    def on_batch(batch, batch_metas, batch_n_words, source_matrix):
        heads, rels = gold_arrays(batch_metas, int(batch_n_words.max()), counts.relations)
        counts.add_baseline(heads, rels, causal)
        if writer is not None:
            writer.add_embeddings(batch.X.cpu(), source_matrix, batch.start, batch.stop)

    def consumer(source, layer, labels, words, batch, batch_metas, batch_n_words):
        W = words.shape[-1] - 1
        heads, rels = gold_arrays(batch_metas, W, counts.relations)
        n = torch.from_numpy(batch_n_words)
        counts.add(source, layer, labels, words[..., :W, :W], heads, rels, n, causal)
        if writer is not None:
            writer.add_maps(source, layer, labels, words, batch.start, batch.stop)

    stream_word_maps(store, weights, metas, consumer, settings, mixing, on_batch, log)
    heads_table = counts.heads_table()
    return heads_table, best_table(heads_table, counts.baseline_table())


def coref_pass(store, weights, metas, settings, mixing=None, log=None):
    """Coreference counts of a GAP store (`stream_word_maps`). -> (coref_heads table,
    coref_best table)"""
    from attnscope.analyses.probing.coreference import CorefCounts

    if any("pronoun" not in m for m in metas):
        raise ValueError("the coreference corpus has no pronoun annotations: use kind gap")
    causal = weights.causal
    counts = CorefCounts()

    def on_batch(batch, batch_metas, batch_n_words, source_matrix):
        counts.add_examples(batch_metas, int(batch_n_words.max()), causal)

    def consumer(source, layer, labels, words, batch, batch_metas, batch_n_words):
        W = words.shape[-1] - 1
        counts.add(source, layer, labels, words[..., :W, :W], batch_metas, causal)

    stream_word_maps(store, weights, metas, consumer, settings, mixing, on_batch, log)
    heads_table = counts.heads_table()
    return heads_table, counts.best_table(heads_table)
