"""Canonical weights read one layer at a time, for models larger than memory.

`streamed_model(folder, device)` gives the model's own modules on the meta device (a
`LayerStream`, its frame loaded) and a `CanonicalModel` whose layers load on first use:
`weights.layers[l]` reads layer l's matrices from the checkpoint, keeps its module loaded (so
that `Architecture.attention_output` runs the real module) and returns its canonical form,
until another layer is read; then its matrices go back to the meta device.
`weights.word_embeddings[ids]` reads the rows of those ids only.

`weights.outline` gives every layer's shapes and settings without reading a matrix: its
matrices are on the meta device, its norms real (the stream holds every layer's vectors).
The norm that closes layer l in a pre-LN model, layer l + 1's, is read from it. The analyses
walk the layers in order, so each layer is read once and one layer's matrices are held,
whatever the depth.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from attnscope.architectures import canonical_layer, canonical_weights, prediction_head
from attnscope.core.canonical import CanonicalLayer, CanonicalModel, PredictionHead
from attnscope.model.layer_stream import LayerStream

KEEP = 1  # layers whose matrices are held: the one analysed


class StreamedLayers(Sequence):
    """The canonical layers of a `LayerStream`'s model, each read when first indexed."""

    def __init__(self, stream: LayerStream, outline: list[CanonicalLayer]):
        self.stream = stream
        self.outline = outline  # shapes, settings and norms; matrices on the meta device
        self.held: OrderedDict[int, CanonicalLayer] = OrderedDict()
        self.reads = 0  # how many times a layer was read from the checkpoint

    def __len__(self) -> int:
        return len(self.outline)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self.load(range(len(self))[index])  # IndexError past the end ends iteration

    def load(self, layer: int) -> CanonicalLayer:
        """Layer `layer`'s canonical form, its module loaded: read from the checkpoint unless
        held, the layer held longest unloaded first (KEEP are held)."""
        if layer not in self.held:
            while len(self.held) >= KEEP:
                oldest, _ = self.held.popitem(last=False)
                self.stream.unload(oldest)
            self.stream.load(layer)
            self.reads += 1
            self.held[layer] = canonical_layer(self.stream.model, layer)
        self.held.move_to_end(layer)
        return self.held[layer]


class EmbeddingRows:
    """The word-embedding matrix [V, d] of a checkpoint, read by the rows it is indexed by."""

    def __init__(self, stream: LayerStream):
        self.stream = stream
        self.shape = torch.Size(stream.embedding_shape())

    def __getitem__(self, ids) -> torch.Tensor:
        """Rows `ids` (an integer tensor or array of any shape).  [*ids.shape, d]"""
        ids = np.asarray(torch.as_tensor(ids).cpu())
        return self.stream.embedding_rows(ids.reshape(-1)).reshape(*ids.shape, -1)


def streamed_model(
    folder: str | Path, device: str = "cpu"
) -> tuple[torch.nn.Module, CanonicalModel]:
    """(the model's module on the meta device with its frame loaded, its canonical weights
    with layers and word embeddings read on use) of a safetensors checkpoint."""
    stream = LayerStream(folder, device, attention="eager")  # as `load_model` runs it
    outline = canonical_weights(stream.model)
    weights = dataclasses.replace(
        outline,
        layers=StreamedLayers(stream, outline.layers),
        word_embeddings=EmbeddingRows(stream),
    )
    return stream.model, weights


def streamed_head(folder: str | Path, kind: str, device: str = "cpu") -> PredictionHead:
    """The language-model head (`kind` masked or causal) of a safetensors checkpoint, with
    only its tensors read (`LayerStream.head_model`)."""
    stream = LayerStream(folder, device, attention="eager")
    model = stream.head_model(kind)
    head = prediction_head(model)
    if head is None:
        raise ValueError(f"{folder}: no {kind} language-model head")
    return head
