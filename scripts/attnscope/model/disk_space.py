"""The room a model's files need on disk: the hidden states' size (`hidden_state_bytes`) and
the check, before a job writes, that its disk has it (`require_space`). The estimate of a
whole run is the workflow's (`pipeline.disk_estimate`)."""

from __future__ import annotations

import shutil
from pathlib import Path

ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
GB = 1e9


class DiskSpaceError(OSError):
    """The results folder's disk lacks the space the run's stores need."""


def hidden_state_bytes(
    n_states: int, n_sequences: int, length: int, d_model: int, dtype: str, chunk: int = 0
) -> int:
    """Bytes of hidden_states.h5's states at most: n_states x [N, length, d] (n_layers + 1
    states, fewer with a subset of `layers:`), each
    sequence's positions rounded up to whole chunks of `chunk` positions when given (HDF5
    stores whole chunks; the chunk is known once the corpus is encoded)."""
    positions = -(-length // chunk) * chunk if chunk else length
    return n_states * n_sequences * positions * d_model * ITEMSIZE[dtype]


def readable(size: float) -> str:
    """Bytes as GB, or MB below 1 GB."""
    return f"{size / GB:.2f} GB" if size >= GB else f"{size / 1e6:.1f} MB"


def free_bytes(results: Path) -> int:
    """Free bytes on the disk that holds `results` (or would, once created)."""
    path = results.resolve()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free


def require_space(path: str | Path, size: int) -> None:
    """Before a job writes `size` bytes at `path`: raise DiskSpaceError if its disk lacks them."""
    free = free_bytes(Path(path).parent)
    if size > free:
        raise DiskSpaceError(
            f"{path} needs up to {readable(size)}, but its disk has {readable(free)} free; "
            "free space, or store less: fewer n_sequences, dtype: float16 or bfloat16"
        )
