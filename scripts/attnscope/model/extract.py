"""Run a model over an encoded corpus once and store every layer's hidden state.

Streaming: one batch of sequences is in memory at a time; each batch's states go straight
into the HDF5 datasets, so memory does not grow with the corpus size. Every batch's states
must be finite, as computed and as the store's type holds them (`require_storable`), on both
routes: an overflow stops the run naming `dtype` or `compute_dtype`, and the unfinished store
is removed (`atomic_h5`), never left under its final name.
"""

from __future__ import annotations

import importlib.metadata
import json
import queue
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np
import torch
from tqdm import tqdm

from attnscope.architectures import architecture
from attnscope.core.checks import NonFiniteError, all_finite
from attnscope.core.files import scratch_path
from attnscope.core.layer_selection import selected_layers, stored_states
from attnscope.core.settings import top_level
from attnscope.core.store import (
    STORE_TYPES,
    TOKEN_ARRAYS,
    as_stored,
    atomic_h5,
    batch_spans,
    decoded,
    open_store,
)
from attnscope.data.datasets import sha256_of
from attnscope.model.disk_space import hidden_state_bytes, require_space

PACKAGES = ("torch", "transformers", "numpy", "h5py")


@dataclass(frozen=True)
class ExtractSettings:
    """`batch_size` sequences per forward; `dtype`: the stored states' type; `compute_dtype`:
    the forward's; `layers`: the `layers:` setting (the states kept: "all" or 1-based layers);
    `device`: a torch device string. (`Job.settings(ExtractSettings)`.)"""

    batch_size: int = top_level("batch_size")
    dtype: str = top_level("dtype", "float32")
    compute_dtype: str = top_level("compute_dtype", "float32")
    layers: object = top_level("layers", "all")
    device: str = "cpu"


def chunk_positions(lengths: np.ndarray, length: int, multiple: int = 16) -> int:
    """Positions per HDF5 chunk of a hidden state: the median real length, rounded up to a
    multiple of 16. A chunk holds one sequence (chunks spanning a whole batch overflowed HDF5's
    1 MiB chunk cache and made writes several times slower), a typical sequence is one chunk,
    and a corpus of short sentences does not store the padding up to its longest one (chunks
    past a batch's real length are never written). benchmarks/bench_extract.py measures it."""
    typical = int(np.median(lengths)) if len(lengths) else length
    return max(1, min(length, -(-typical // multiple) * multiple))


@contextmanager
def sdpa_attention(model):
    """Run `model` with PyTorch's fused attention (SDPA) inside the block, then restore its
    attention implementation. Hidden states need no attention maps, and SDPA and eager differ
    by float rounding only (tests/test_extract.py compares them); analyses that read attention
    weights keep eager."""
    before = model.config._attn_implementation
    try:
        model.set_attn_implementation("sdpa")
    except (ValueError, ImportError, AttributeError):  # a model without SDPA support
        yield model
        return
    try:
        yield model
    finally:
        model.set_attn_implementation(before)


class BackgroundWriter:
    """Write batches of states to the `hidden/{l}` datasets [N, L, d] in a thread, so HDF5 writes
    overlap the next batch's forward pass.

    Each batch is copied into one of `slots` buffers allocated once (a slot holds one batch of
    every layer) and the thread hands the slot back when it is written: memory is bounded and
    reused, and the model's own tensors are freed as soon as they are copied, as in a bare
    forward (holding them until written made the heap grow and shrink with every batch). An
    error in the thread is raised again in the caller. `states` numbers the hidden state each
    dataset holds (s of `hidden/{s}`), for `require_storable`'s message.
    """

    def __init__(self, datasets: list, states: list[int], batch_size: int, slots: int = 2):
        _, length, d = datasets[0].shape
        self.datasets, self.states = datasets, states
        self.free: queue.Queue = queue.Queue()
        for _ in range(slots):
            self.free.put([np.empty(batch_size * length * d, dtype=s.dtype) for s in datasets])
        self.work: queue.Queue = queue.Queue()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while (item := self.work.get()) is not None:
            start, stop, n, slot = item
            try:
                if self.error is None:  # after a failure, only hand the slots back
                    for dataset, buffer in zip(self.datasets, slot, strict=True):
                        shape = (stop - start, n, dataset.shape[2])
                        dataset[start:stop, :n] = buffer[: np.prod(shape)].reshape(shape)
            except BaseException as error:  # re-raised by put/close in the caller's thread
                self.error = error
            finally:
                self.free.put(slot)

    def put(self, start: int, stop: int, n: int, states: list[torch.Tensor]) -> None:
        """Queue states [B, n, d] per layer, on any device, for sequences [start, stop)."""
        slot = self.free.get()
        if self.error is not None:
            self.free.put(slot)
            raise self.error
        try:
            for buffer, state, s in zip(slot, states, self.states, strict=True):
                stored = as_stored(state, buffer.dtype)
                require_storable(state, stored, s, start, stop)
                bits = stored.view(torch.uint16) if stored.dtype == torch.bfloat16 else stored
                torch.from_numpy(buffer[: state.numel()]).view(state.shape).copy_(bits)
        except BaseException:
            self.free.put(slot)
            raise
        self.work.put((start, stop, n, slot))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, kind, error, trace):
        self.work.put(None)
        self.thread.join()
        if self.error is not None and kind is None:
            raise self.error


def require_storable(state: torch.Tensor, stored: torch.Tensor, s: int, start: int, stop: int):
    """Raise NonFiniteError unless the forward's `state` [B, n, d] of `hidden/{s}`, sequences
    [start, stop), rounded to the store's type (`stored`, `as_stored`) is finite. The message
    names the state, the largest |x|, and the setting to change: `dtype` where the store's
    type cannot hold a finite state (float16 above 65,504), `compute_dtype` where the forward
    itself gave inf or NaN."""
    if all_finite(stored):
        return
    computed = str(state.dtype).removeprefix("torch.")
    kept = str(stored.dtype).removeprefix("torch.")
    where = (
        f"hidden/{s} ({'the embedding output' if s == 0 else f'the output of layer {s}'}) of "
        f"sequences {start}..{stop - 1}"
    )
    finite = torch.isfinite(state)
    if bool(finite.all()):
        largest = float(state.abs().max())
        raise NonFiniteError(
            f"{where} reaches |x| = {largest:.5g}, beyond the largest {kept} value "
            f"({torch.finfo(stored.dtype).max:.5g}): the store's `dtype: {kept}` would hold inf "
            f"there. Set `dtype: bfloat16` (float32's range) or `dtype: float32`"
        )
    largest = float(state[finite].abs().max()) if bool(finite.any()) else float("nan")
    if computed == "float32":
        fix = "the model's weights or inputs give them; check the checkpoint"
    else:
        fix = (
            f"{computed} overflowed. Set `compute_dtype: bfloat16` (float32's range) or "
            f"`compute_dtype: float32`" + (", and `dtype:` likewise" if kept == "float16" else "")
        )
    raise NonFiniteError(
        f"the forward in `compute_dtype: {computed}` gave {int((~finite).sum())} inf or NaN "
        f"values in {where} (largest finite |x| {largest:.5g}; stored as `dtype: {kept}`): {fix}"
    )


@contextmanager
def state_store(encoded_path, out_path, config, dtype: str, attrs: dict | None, layers="all"):
    """Create hidden_states.h5 for a model `config` and an encoded corpus (written in place
    only when the block ends without error): yields (token arrays, {state s: the `hidden/{s}`
    dataset [N, L, d]} of the states the `layers:` setting `layers` reads, the sequence
    lengths)."""
    with (
        open_store(encoded_path, "encode_corpus") as enc,
        atomic_h5(out_path, chunk_cache=False) as out,  # each chunk is written once
    ):
        arrays = {name: enc[name][()] for name in TOKEN_ARRAYS}
        n_seq, length = arrays["input_ids"].shape
        if n_seq == 0:
            raise ValueError(f"{encoded_path}: the encoded corpus has no sequences")
        if not architecture(config.model_type).uses_segment_ids(config):
            arrays["token_type_ids"] = np.zeros_like(arrays["token_type_ids"])
        for name, values in arrays.items():
            out.create_dataset(name, data=values)
        lengths = arrays["attention_mask"].sum(axis=1)
        d, n_layers = config.hidden_size, config.num_hidden_layers
        chosen = selected_layers(layers, n_layers)
        states = stored_states(chosen, n_layers)
        chunk = (1, chunk_positions(lengths, length), d)
        require_space(out_path, hidden_state_bytes(len(states), n_seq, length, d, dtype, chunk[1]))
        hidden = {
            s: out.create_dataset(
                f"hidden/{s}", (n_seq, length, d), STORE_TYPES[dtype], chunks=chunk, fillvalue=0
            )
            for s in states
        }
        for dataset in hidden.values():
            dataset.attrs["encoding"] = dtype
        yield arrays, hidden, lengths
        out.attrs["n_layers"] = n_layers
        out.attrs["layers"] = [l + 1 for l in chosen]
        out.attrs.update(attrs or {})
        out.attrs["corpus_sha256"] = sha256_of(encoded_path)
        out.attrs["dtype"] = dtype
        out.attrs["states"] = (
            "hidden/{l}: the raw residual stream entering layer l + 1 (0: the embeddings); "
            f"hidden/{n_layers}: the last layer's output before any final norm"
        )
        out.attrs["packages"] = json.dumps(
            {p: importlib.metadata.version(p) for p in PACKAGES}, sort_keys=True
        )


def batch_inputs(arch, model, arrays: dict, start: int, stop: int, n: int, device: str):
    """The forward's keyword arguments for sequences [start, stop), first n positions."""
    batch = {
        key: torch.from_numpy(arrays[key][start:stop, :n].astype(np.int64)).to(device)
        for key in ("input_ids", "attention_mask", "token_type_ids")
    }
    return arch.model_inputs(model, **batch)


def extract(
    model,
    encoded_path: str | Path,
    out_path: str | Path,
    settings: ExtractSettings,
    attrs: dict | None = None,
    log=None,
) -> dict:
    """Write hidden_states.h5 for one model and one encoded corpus with a whole-model forward
    per batch in `settings.compute_dtype`, stored in `settings.dtype`, keeping the states the
    `layers:` setting `settings.layers` reads; `attrs`: the store's attributes besides;
    returns summary stats."""
    batch_size, device, dtype = settings.batch_size, settings.device, settings.dtype
    compute_dtype, layers = settings.compute_dtype, settings.layers
    model = model.to(device, getattr(torch, compute_dtype)).eval()
    arch = architecture(model.config.model_type)
    attrs = {**(attrs or {}), "compute_dtype": compute_dtype}
    with state_store(encoded_path, out_path, model.config, dtype, attrs, layers) as store:
        arrays, hidden, lengths = store
        progress = tqdm(total=len(lengths), unit="seq", file=log, mininterval=5, desc="extract")
        kept = list(hidden)
        writing = BackgroundWriter(list(hidden.values()), kept, batch_size)
        with sdpa_attention(model), writing as writer:
            for start, stop, n in batch_spans(lengths, batch_size):
                # Only the first n positions are written: the rest of the batch is padding,
                # which the dataset's fill value (0) already holds.
                inputs = batch_inputs(arch, model, arrays, start, stop, n, device)
                with torch.inference_mode():
                    states = arch.residual_states(model, inputs)
                    writer.put(start, stop, n, [states[s] for s in kept])
                del states
                progress.update(stop - start)
        progress.close()
    return summary(arrays, model.config)


def extract_streamed(
    folder: str | Path,
    encoded_path: str | Path,
    out_path: str | Path,
    settings: ExtractSettings,
    attrs: dict | None = None,
    log=None,
) -> dict:
    """Write the same hidden_states.h5 as `extract`, layer by layer: the embeddings of every
    batch, then layer 1 over every batch from the stored X_0, and so on, with one layer's
    weights in memory at a time (`LayerStream`). Each pass reads the previous state back from
    the store, so a float16 or bfloat16 store carries its rounded states forward. With a
    subset of `layers`, a state the store does not keep passes through a scratch file beside
    it (`scratch_states`), and the pass stops at the last state kept."""
    from attnscope.model.layer_stream import LayerStream

    batch_size, device, dtype = settings.batch_size, settings.device, settings.dtype
    compute_dtype, layers = settings.compute_dtype, settings.layers
    compute = getattr(torch, compute_dtype)
    stream = LayerStream(folder, device, compute)
    config = stream.config
    arch = architecture(config.model_type)
    attrs = {**(attrs or {}), "compute_dtype": compute_dtype}
    with (
        state_store(encoded_path, out_path, config, dtype, attrs, layers) as store,
        scratch_states(out_path, store[1]) as scratch,
    ):
        arrays, hidden, lengths = store
        last = max(hidden)

        def dataset(state: int):
            return hidden[state] if state in hidden else scratch[state % 2]

        spans = list(batch_spans(lengths, batch_size))
        stream.load_embedding_rows(arrays["input_ids"])
        progress = tqdm(
            total=len(lengths) * (last + 1), unit="seq", file=log, mininterval=5, desc="extract"
        )

        def one_pass(state: int, compute) -> None:
            with BackgroundWriter([dataset(state)], [state], batch_size) as writer:
                for start, stop, n in spans:
                    inputs = batch_inputs(arch, stream.model, arrays, start, stop, n, device)
                    state = compute(inputs, start, stop, n)
                    if arch.zero_padding_states:
                        real = inputs["attention_mask"].bool()[..., None]
                        state = torch.where(real, state, torch.zeros((), dtype=state.dtype))
                    writer.put(start, stop, n, [state])
                    progress.update(stop - start)

        one_pass(0, lambda inputs, *span: stream.embedded(inputs))
        for layer in range(last):
            stream.load(layer)
            source = dataset(layer)

            def step(inputs, start, stop, n, source=source, layer=layer):
                X = torch.from_numpy(decoded(source[start:stop, :n])).to(device, compute)
                return stream.layer(layer, inputs, X)

            one_pass(layer + 1, step)
            stream.unload(layer)
        progress.close()
    return summary(arrays, config)


def written_bytes(dataset) -> int:
    """Bytes a chunked HDF5 dataset takes on disk once every chunk is written."""
    whole = [
        -(-size // chunk) * chunk for size, chunk in zip(dataset.shape, dataset.chunks, strict=True)
    ]
    return int(np.prod(whole)) * dataset.dtype.itemsize


def streamed_bytes(hidden: dict) -> int:
    """Bytes the layer-streamed pass of a layer subset still writes on the store's disk: the
    store's states still unwritten ({state: `hidden/{s}` dataset [N, L, d]}, whole chunks)
    and the two scratch states beside them, each as large as one state."""
    unwritten = sum(written_bytes(d) - d.id.get_storage_size() for d in hidden.values())
    return unwritten + 2 * written_bytes(next(iter(hidden.values())))


@contextmanager
def scratch_states(out_path: str | Path, hidden: dict):
    """Two datasets shaped like the store's states in `out_path`.scratch.h5.partial, for the
    states a layer subset does not keep (state s in dataset s % 2: layer l reads one, writes
    the other); None when every state up to the last kept one is kept. The file is removed
    afterwards (after kill -9, by the start-up sweep: `core.files.scratch_path`). The disk
    must hold it and the store's states still to write (`streamed_bytes`)."""
    first = next(iter(hidden.values()))
    if len(hidden) == max(hidden) + 1:
        yield None
        return
    with scratch_path(f"{out_path}.scratch.h5") as path:
        require_space(path, streamed_bytes(hidden))
        with h5py.File(path, "w") as f:
            yield [
                f.create_dataset(str(k), first.shape, first.dtype, chunks=first.chunks)
                for k in range(2)
            ]


def summary(arrays: dict, config) -> dict:
    n_seq, length = arrays["input_ids"].shape
    return {"sequences": n_seq, "length": length, "layers": config.num_hidden_layers}
