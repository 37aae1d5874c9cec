"""How an [N, L, L] map (sequence, query i, key j) is stored in an HDF5 output: whole, or the
top k entries of each query row.

whole (top_k 0)  `{name}` [N, L, L] in the given dtype, one chunk per sequence
top k (k > 0)    `{name}/key` [N, L, k] the keys j of each row's k largest entries, largest
                 first (uint16 while L <= 65,536, else int32), `{name}/value` [N, L, k] their
                 values in the given dtype; a row with fewer than k keys (a short sequence)
                 and padding rows hold zeros after their entries

At n = 4,096 a whole map is 16.7 M values per sequence and layer; the top 32 of each row keep
131 k. `read_map` gives a block back as whole maps, zeros off the top k.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import h5py
import numpy as np

if TYPE_CHECKING:  # torch is imported where a map is written: the disk estimate loads none
    import torch


def key_dtype(length: int) -> str:
    """The smallest index type that holds the keys of a map of `length` pieces."""
    return "uint16" if length <= 2**16 else "int32"


def map_bytes(n_sequences: int, length: int, dtype: str, top_k: int = 0) -> int:
    """Bytes of one stored map (`MapDataset`): N L^2 values, or N L k keys and values."""
    itemsize = 2 if dtype == "float16" else 4
    if not top_k:
        return n_sequences * length**2 * itemsize
    key_size = 2 if key_dtype(length) == "uint16" else 4
    return n_sequences * length * min(top_k, length) * (itemsize + key_size)


def top_k_rows(values: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest entries of each row, largest first: (keys, values), each [..., min(k, n)]
    for values [..., n]."""
    top = values.topk(min(k, values.shape[-1]), dim=-1)
    return top.indices, top.values


class MapDataset:
    """One map of an open HDF5 file, written batch by batch (`write`)."""

    def __init__(self, f: h5py.File, name: str, N: int, L: int, dtype: str, top_k: int = 0):
        self.top_k = top_k
        if top_k:
            k = min(top_k, L)
            group = f.create_group(name)
            group.attrs["top_k"] = k
            group.attrs["description"] = "the top k keys j of each query row, largest first"
            self.keys = group.create_dataset("key", (N, L, k), key_dtype(L), chunks=(1, L, k))
            self.values = group.create_dataset("value", (N, L, k), dtype, chunks=(1, L, k))
        else:
            self.whole = f.create_dataset(name, (N, L, L), dtype=dtype, chunks=(1, L, L))

    def write(self, start: int, maps: torch.Tensor) -> None:
        """Sequences start .. start + B of the map: maps [B, n, n] (n <= L)."""
        B, n = maps.shape[:2]
        if not self.top_k:
            self.whole[start : start + B, :n, :n] = maps.cpu().numpy()
            return
        keys, values = top_k_rows(maps, self.top_k)
        k = keys.shape[-1]
        self.keys[start : start + B, :n, :k] = keys.cpu().numpy().astype(self.keys.dtype)
        self.values[start : start + B, :n, :k] = values.cpu().numpy()


def read_map(f: h5py.File, name: str, start: int, stop: int, n: int) -> np.ndarray:
    """Sequences start .. stop of map `name` as whole maps [B, n, n] (float32; zeros off the
    top k where it is stored as the top k)."""
    item = f[name]
    if isinstance(item, h5py.Dataset):
        return item[start:stop, :n, :n].astype(np.float32)
    keys = item["key"][start:stop, :n].astype(np.int64)
    values = item["value"][start:stop, :n].astype(np.float32)
    inside = keys < n  # the zeros after a short row's entries point at key 0; added, they
    keys, values = np.where(inside, keys, 0), np.where(inside, values, 0)  # change nothing
    out = np.zeros((stop - start, n, n), np.float32)
    rows = np.indices(keys.shape)
    np.add.at(out, (rows[0], rows[1], keys), values)
    return out
