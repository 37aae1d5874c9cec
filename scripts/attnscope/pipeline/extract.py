"""Run a model over an encoded corpus once and store every layer's hidden state.

Streaming: one batch of sequences is in memory at a time; each batch's states go straight
into the HDF5 datasets, so memory does not grow with the corpus size.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from attnscope.architectures import architecture
from attnscope.core.store import TOKEN_ARRAYS, atomic_h5, open_store
from attnscope.data.datasets import sha256_of

PACKAGES = ("torch", "transformers", "numpy", "h5py")


def extract(
    model,
    encoded_path: str | Path,
    out_path: str | Path,
    batch_size: int,
    device: str,
    dtype: str = "float32",
    attrs: dict | None = None,
    log=None,
) -> dict:
    """Write hidden_states.h5 for one model and one encoded corpus; returns summary stats."""
    storage = np.dtype(dtype)
    model = model.to(device).eval()
    with open_store(encoded_path, "encode_corpus") as enc, atomic_h5(out_path) as out:
        arrays = {name: enc[name][()] for name in TOKEN_ARRAYS}
        n_seq, length = arrays["input_ids"].shape
        if n_seq == 0:
            raise ValueError(f"{encoded_path}: the encoded corpus has no sequences")
        family = architecture(model.config.model_type)
        if not family.uses_segment_ids(model.config):
            arrays["token_type_ids"] = np.zeros_like(arrays["token_type_ids"])
        for name, values in arrays.items():
            out.create_dataset(name, data=values)
        d = model.config.hidden_size
        n_states = model.config.num_hidden_layers + 1
        chunk = (min(batch_size, n_seq), length, d)
        hidden = [
            out.create_dataset(f"hidden/{l}", shape=(n_seq, length, d), dtype=storage, chunks=chunk)
            for l in range(n_states)
        ]
        progress = tqdm(total=n_seq, unit="seq", file=log, mininterval=5, desc="extract")
        for start in range(0, n_seq, batch_size):
            stop = min(start + batch_size, n_seq)
            n = int(arrays["attention_mask"][start:stop].sum(axis=1).max())
            batch = {
                key: torch.from_numpy(arrays[key][start:stop, :n].astype(np.int64)).to(device)
                for key in ("input_ids", "attention_mask", "token_type_ids")
            }
            states = family.residual_states(model, family.model_inputs(model, **batch))
            for l, state in enumerate(states):
                block = np.zeros((stop - start, length, d), dtype=storage)
                block[:, :n] = state.float().cpu().numpy().astype(storage)
                hidden[l][start:stop] = block
            progress.update(stop - start)
        progress.close()
        out.attrs.update(attrs or {})
        out.attrs["corpus_sha256"] = sha256_of(encoded_path)
        out.attrs["dtype"] = dtype
        out.attrs["packages"] = json.dumps(
            {p: importlib.metadata.version(p) for p in PACKAGES}, sort_keys=True
        )
    return {"sequences": n_seq, "length": length, "layers": n_states - 1}


def manifest_attrs(manifest: dict) -> dict:
    """Store attributes that tie hidden states to the exact model they came from."""
    weights = json.dumps(manifest["weights_sha256"], sort_keys=True)
    return {
        "model_name": manifest["name"],
        "model_id": manifest["id"],
        "model_revision": manifest["revision"],
        "model_type": manifest["model_type"],
        "weights_sha256": hashlib.sha256(weights.encode()).hexdigest(),
    }
