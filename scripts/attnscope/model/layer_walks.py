"""Every layer's result on one batch at a time, walked the way the loading route allows
(`LoadedModel.layer_blocks` chooses).

A `block(batch, layer)` turns one layer's batch (`core.store.Batch`, that layer's input X_l)
into a float32 block [r, w_k]: r rows per layer, w_k columns for batch k (the same for every
layer). Both walks yield, batch after batch, the blocks of every layer stacked [L * r, w_k]:

- `by_batch`: the layers of one batch together (every layer's weights in memory);
- `by_layer`: each layer over every batch (one layer's weights in memory), the blocks written
  to a float32 scratch file [L * r, sum_k w_k] and read back batch by batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import torch

from attnscope.core.canonical import CanonicalLayer
from attnscope.core.files import scratch_folder
from attnscope.core.store import Batch, HiddenStates

Block = Callable[[Batch, CanonicalLayer], torch.Tensor]


@dataclass(frozen=True)
class Batches:
    """The batches a walk reads: `batch_size` sequences each, on `device`, of the first
    `limit` sequences (all if None)."""

    batch_size: int
    device: str = "cpu"
    limit: int | None = None

    def of(self, store: HiddenStates, l: int) -> Iterator[Batch]:
        """Layer l's (0-based) batches of `store` (`HiddenStates.batches`)."""
        return store.batches(l, self.batch_size, self.device, self.limit)


def by_batch(
    store: HiddenStates, layers: Sequence[CanonicalLayer], batches: Batches, block: Block
) -> Iterator[torch.Tensor]:
    """[L * r, w_k] per batch of `batches`, the layers of a batch computed together."""
    walks = [batches.of(store, l) for l in range(len(layers))]
    for batches in zip(*walks, strict=True):
        with torch.no_grad():
            blocks = [block(b, layer) for b, layer in zip(batches, layers, strict=True)]
        yield torch.cat(blocks)


def by_layer(
    store: HiddenStates,
    layers: Sequence[CanonicalLayer],
    batches: Batches,
    block: Block,
    columns: np.ndarray,
    folder: str | Path,
    log=None,
) -> Iterator[torch.Tensor]:
    """`by_batch`'s blocks, each layer walked over every batch in turn: batch k's block goes
    to columns [columns[k], columns[k + 1]) of a float32 scratch dataset [L * r, columns[-1]]
    in a new scratch folder under `folder` (`core.files.scratch_folder`: removed afterwards,
    and after kill -9 by the start-up sweep; the disk must hold it), which is then read back
    batch by batch."""
    from attnscope.model.disk_space import require_space

    with scratch_folder(folder, "layer-blocks-") as scratch, h5py.File(scratch / "b.h5", "w") as f:
        spool = None
        for l, layer in enumerate(layers):
            for k, batch in enumerate(batches.of(store, l)):
                with torch.no_grad():
                    values = block(batch, layer).cpu().numpy()
                r, width = values.shape
                if width != columns[k + 1] - columns[k]:
                    raise ValueError(
                        f"layer {l + 1}, batch {k + 1}: a block of {width} columns where the "
                        f"columns give {columns[k + 1] - columns[k]}"
                    )
                if spool is None:
                    shape = (len(layers) * r, int(columns[-1]))
                    require_space(scratch / "b.h5", shape[0] * shape[1] * 4)
                    spool = f.create_dataset("blocks", shape, "float32")
                spool[l * r : (l + 1) * r, columns[k] : columns[k + 1]] = values
            if log is not None:
                log.info("layer %d of %d walked over every batch", l + 1, len(layers))
        for k in range(len(columns) - 1):
            yield torch.from_numpy(spool[:, columns[k] : columns[k + 1]]).to(batches.device)
