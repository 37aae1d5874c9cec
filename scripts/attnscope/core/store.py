"""HDF5 files of encoded corpora and hidden states, written atomically, read in batches.

`encoded.h5` (one corpus encoded for one model's tokenizer), datasets, N sequences padded to L:
    input_ids       [N, L] int32
    attention_mask  [N, L] int8   1 = real token
    token_type_ids  [N, L] int8   segment ids (0/1, or all 0 with `segment_ids: zeros`)
    category        [N, L] int8   see attnscope.core.tokens (OTHER, CLS, SEP, PUNCT; PAD = -1)
    word_ids        [N, L] int32  index of the word a piece belongs to, -1 for specials/pads
    meta            [N]    str    one JSON object per sequence (words, gold annotations)
attributes: kind, settings (JSON, defaults filled in), sha256_inputs (JSON {file: SHA-256}),
tokenizer (name_or_path), dropped (sequences left out for length). `write_encoded` writes it,
`read_meta` reads the meta back; `attnscope.data.corpora` builds the `EncodedCorpus`.

`hidden_states.h5` holds the same first five datasets plus
    hidden/{l}      [N, L, d]     float32, float16 or bfloat16 bits, l = 0..n_layers
hidden/0 is the embedding output (the input of the first layer), hidden/{l} the output of
layer l, i.e. the input of layer l + 1, for every architecture. For GPT-2, hidden/{n_layers} is the
last block's output before the final LayerNorm ln_f (transformers returns it after ln_f).
attributes: n_layers (the model's), layers (the 1-based layers analysed, `layers:` setting).
With a subset of layers the store keeps only the states they read (`stored_states`): each
selected layer's input, and the last output when the last layer is selected.

HDF5 has no bfloat16 type: a bfloat16 store holds each value's 16 bits as uint16 (the upper
half of its float32 bits), with the attribute `encoding = bfloat16` on every dataset and
`dtype = bfloat16` on the file. Reading shifts the bits back into a float32, which is exact.
Other HDF5 readers see uint16 and the attribute; `np.uint32(bits) << 16` viewed as float32
decodes them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import torch

from attnscope.core.checks import NonFiniteError
from attnscope.core.files import atomic_path, sha256_of

TOKEN_ARRAYS = ("input_ids", "attention_mask", "token_type_ids", "category", "word_ids")
STORE_TYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}
"""The HDF5 type of each store dtype (bfloat16: its bits, see the module docstring)."""


class StateNotStoredError(KeyError):
    """A hidden state that the store's `layers:` selection left out."""

    def __str__(self) -> str:
        return str(self.args[0])


STORED_AS = {np.float32: torch.float32, np.float16: torch.float16, np.uint16: torch.bfloat16}
"""The torch type of the values a dataset of each HDF5 type holds (uint16: bfloat16 bits)."""


def as_stored(state: torch.Tensor, storage: np.dtype) -> torch.Tensor:
    """`state` rounded to the values a dataset of numpy type `storage` holds, on its device:
    float32, float16, or bfloat16 for a bfloat16 store (uint16; `.view(torch.uint16)` gives
    the bits it keeps)."""
    return state.to(STORED_AS[np.dtype(storage).type])


def decoded(values: np.ndarray) -> np.ndarray:
    """Stored states as float32: bfloat16 bits (uint16) shifted into place, floats cast."""
    if values.dtype == np.uint16:
        return (values.astype(np.uint32) << 16).view(np.float32)
    return values.astype(np.float32)


class DamagedStoreError(RuntimeError):
    """A stored HDF5 file cannot be read (truncated, overwritten, or not HDF5)."""


def open_store(path: str | Path, rule: str = "extract_hidden_states") -> h5py.File:
    """Open an HDF5 store for reading; a damaged file raises DamagedStoreError naming the file
    and the rule to rerun (Snakemake only reruns what is downstream of a changed file)."""
    try:
        return h5py.File(path, "r")
    except OSError as error:
        raise DamagedStoreError(
            f"{path} is damaged and cannot be read ({error}). Rebuild it with "
            f"`snakemake --forcerun {rule}` (or delete the file and rerun)"
        ) from error


@contextmanager
def atomic_h5(path: str | Path, chunk_cache: bool = True) -> Iterator[h5py.File]:
    """Open `path`.partial for writing and rename it to `path` only on success.

    A failed or killed writer leaves no file under the final name. `chunk_cache` False: the
    file's datasets get no HDF5 chunk cache, for writers that write each chunk once and hold
    many datasets open (the hidden states, one per state; the propagated maps, one per
    layer). HDF5 2.0 gives every open chunked dataset a cache of up to 8 MiB, which it fills
    with chunks already written: extraction's memory grew by that much per layer.
    """
    options = {} if chunk_cache else {"rdcc_nbytes": 0}
    with atomic_path(path) as partial, h5py.File(partial, "w", **options) as f:
        yield f


@dataclass
class EncodedCorpus:
    """N sequences padded to L = the longest real length; arrays [N, L] as in encoded.h5."""

    input_ids: np.ndarray  # int32, padding = the tokenizer's pad id (GPT-2: its eos)
    attention_mask: np.ndarray  # int8
    token_type_ids: np.ndarray  # int8
    category: np.ndarray  # int8, PAD = -1
    word_ids: np.ndarray  # int32, -1 for specials and padding
    meta: list[dict]
    kind: str = ""
    settings: dict | None = None  # the corpus settings with defaults filled in
    inputs: tuple[str, ...] = ()  # the files it was built from
    tokenizer: str = ""  # name_or_path
    dropped: int = 0


def write_encoded(path: str | Path, corpus: EncodedCorpus) -> None:
    """Write encoded.h5 (datasets and attributes as in the module docstring), atomically."""
    with atomic_h5(path) as f:
        for name in TOKEN_ARRAYS:
            f.create_dataset(name, data=getattr(corpus, name))
        f.create_dataset(
            "meta",
            data=[json.dumps(m, ensure_ascii=False) for m in corpus.meta],
            dtype=h5py.string_dtype("utf-8"),
        )
        f.attrs["kind"] = corpus.kind
        f.attrs["settings"] = json.dumps(corpus.settings)
        f.attrs["sha256_inputs"] = json.dumps({p: sha256_of(p) for p in corpus.inputs})
        f.attrs["tokenizer"] = corpus.tokenizer
        f.attrs["dropped"] = corpus.dropped


def read_meta(path: str | Path) -> list[dict]:
    """The per-sequence meta objects of an encoded.h5, in sequence order."""
    with h5py.File(path, "r") as f:
        return [json.loads(s) for s in f["meta"].asstr()[()]]


def batch_spans(lengths: np.ndarray, batch_size: int, limit: int | None = None):
    """(start, stop, n) of consecutive batches over the first `limit` sequences (all if None);
    n = the longest real length in the batch, so batches are trimmed to [:, :n]."""
    total = len(lengths) if limit is None else min(limit, len(lengths))
    for start in range(0, total, batch_size):
        stop = min(start + batch_size, total)
        yield start, stop, int(lengths[start:stop].max())


@dataclass
class Batch:
    """Sequences [start, stop) of a store, trimmed to the longest real length in the batch.

    X [B, n, d] float32 on the requested device; mask, ids, category, word_ids [B, n].
    """

    start: int
    stop: int
    X: torch.Tensor
    mask: torch.Tensor
    input_ids: np.ndarray
    category: np.ndarray
    word_ids: np.ndarray


def layer_numbers(store: h5py.File) -> list[int]:
    """The 1-based layers an open hidden_states.h5 was made for: the `layers:` setting's, or
    every layer (a store written before the setting has no `layers` attribute)."""
    n_layers = int(store.attrs.get("n_layers", len(store["hidden"]) - 1))
    return [int(l) for l in store.attrs.get("layers", [])] or list(range(1, n_layers + 1))


def analysed_layers(path: str | Path) -> list[int]:
    """The 1-based layers the hidden_states.h5 at `path` was made for (`layer_numbers`): the
    rows a per-layer family's tables keep."""
    with open_store(path) as store:
        return layer_numbers(store)


class HiddenStates:
    """Read access to `hidden_states.h5`. Token arrays are small and kept in memory;
    hidden states are read one layer and one batch at a time."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._file = open_store(self.path)
        for name in TOKEN_ARRAYS:
            setattr(self, name, self._file[name][()])
        self.n_sequences, self.length = self.input_ids.shape
        self.states = sorted(int(name) for name in self._file["hidden"])
        self.n_layers = int(self._file.attrs.get("n_layers", len(self.states) - 1))
        self.layers = [l - 1 for l in layer_numbers(self._file)]  # 0-based, those analysed
        self.d_model = self._file[f"hidden/{self.states[0]}"].shape[-1]
        self.storage_dtype = str(self._file.attrs.get("dtype", "float32"))  # or (b)float16
        # float32 states of a float32 forward: X_{l+1} is layer l's float32 output, so checks
        # may compare with it (otherwise they recompute it from X_l)
        compute_dtype = str(self._file.attrs.get("compute_dtype", "float32"))
        self.exact = self.storage_dtype == compute_dtype == "float32"
        self.attrs = dict(self._file.attrs)
        self.lengths = self.attention_mask.sum(axis=1).astype(int)

    def close(self) -> None:
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def stores(self, state: int) -> bool:
        """Whether hidden/{state} is stored (every state unless `layers:` chose a subset)."""
        return state in self.states

    def hidden(self, layer: int, start: int = 0, stop: int | None = None) -> np.ndarray:
        """hidden/{layer}[start:stop] as float32.  [B, L, d]

        An inf or NaN raises NonFiniteError naming the file (a store that an extraction
        without the finiteness check left, e.g. float16 past 65,504): no analysis reads it."""
        if not self.stores(layer):
            raise StateNotStoredError(
                f"{self.path} stores the states of layers "
                f"{', '.join(str(l + 1) for l in self.layers)} only (config layers:), not "
                f"hidden/{layer}; an analysis of other layers needs layers: all"
            )
        values = decoded(self._file[f"hidden/{layer}"][start:stop])
        if not np.isfinite(values).all():
            where = f"sequences {start}..{(stop or self.n_sequences) - 1}"
            raise NonFiniteError(
                f"{self.path}: hidden/{layer} holds {int((~np.isfinite(values)).sum())} inf or "
                f"NaN values ({where}; `dtype: {self.storage_dtype}`). Extract it again "
                "(`snakemake --forcerun extract_hidden_states`), which stops naming the "
                "setting to change (a float16 store holds no |x| above 65,504)"
            )
        return values

    def batches(
        self, layer: int, batch_size: int, device: str = "cpu", limit: int | None = None
    ) -> Iterator[Batch]:
        """Batches of layer `layer`'s input X_l over the first `limit` sequences (all if None)."""
        for start, stop, n in batch_spans(self.lengths, batch_size, limit):
            yield self.batch(layer, start, stop, n, device)

    def batch(self, layer: int, start: int, stop: int, n: int, device: str = "cpu") -> Batch:
        """Sequences [start, stop) of layer `layer`'s input X_l, trimmed to n pieces."""
        X = torch.from_numpy(self.hidden(layer, start, stop)[:, :n]).to(device)
        mask = torch.from_numpy(self.attention_mask[start:stop, :n].astype(np.int64))
        return Batch(
            start=start,
            stop=stop,
            X=X,
            mask=mask.to(device),
            input_ids=self.input_ids[start:stop, :n],
            category=self.category[start:stop, :n],
            word_ids=self.word_ids[start:stop, :n],
        )
