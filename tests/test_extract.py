"""Extraction stores every layer's state exactly, streams, and never leaves half a file."""

import threading

import h5py
import numpy as np
import pytest
import torch

from attnscope.architectures import canonical_weights
from attnscope.core.attention import layer_forward
from attnscope.core.store import HiddenStates
from attnscope.model.extract import BackgroundWriter, ExtractSettings, extract
from conftest import tiny_model, write_tiny_encoded, write_tiny_store


def test_store_matches_fresh_forward_pass(tmp_path, architecture):
    store_path, model = write_tiny_store(tmp_path, architecture)
    with HiddenStates(store_path) as store:
        assert store.n_layers == model.config.num_hidden_layers
        ids = torch.from_numpy(store.input_ids.astype(np.int64))
        mask = torch.from_numpy(store.attention_mask.astype(np.int64))
        kwargs = {"input_ids": ids, "attention_mask": mask}
        if getattr(model.config, "type_vocab_size", 1) > 1:
            kwargs["token_type_ids"] = torch.from_numpy(store.token_type_ids.astype(np.int64))
        with torch.no_grad():
            fresh = model(**kwargs, output_hidden_states=True).hidden_states
        valid = store.attention_mask.astype(bool)
        # causal models' last hidden state from transformers is after their final norm
        last = store.n_layers - 1 if canonical_weights(model).causal else store.n_layers
        for l in range(last + 1):
            assert np.abs(store.hidden(l)[valid] - fresh[l].numpy()[valid]).max() <= 1e-4


def test_each_stored_state_is_the_previous_layers_output(tmp_path, architecture):
    """hidden/{l+1} = layer l+1 applied to hidden/{l}, for every architecture (GPT-2 before
    ln_f)."""
    store_path, model = write_tiny_store(tmp_path, architecture)
    weights = canonical_weights(model)
    with HiddenStates(store_path) as store:
        for l, layer in enumerate(weights.layers):
            for batch in store.batches(l, batch_size=2):
                nxt = layer_forward(batch.X, batch.mask, layer).numpy()
                target = store.hidden(l + 1, batch.start, batch.stop)[:, : nxt.shape[1]]
                valid = batch.mask.numpy().astype(bool)
                assert np.abs(nxt[valid] - target[valid]).max() <= 1e-4


def test_float16_storage(tmp_path):
    model = tiny_model("bert")
    encoded = write_tiny_encoded(tmp_path / "enc.h5", "bert")
    out = tmp_path / "hs.h5"
    extract(model, encoded, out, ExtractSettings(batch_size=2, dtype="float16"))
    with h5py.File(out, "r") as f:
        assert f["hidden/1"].dtype == np.float16
        assert f.attrs["dtype"] == "float16"


def test_padding_past_a_batchs_real_length_is_neither_written_nor_stored(tmp_path):
    """Eight 10-piece sequences and one of 64: chunks hold one sequence by about its median
    length, so the short ones store one chunk each, padding reads 0, and the file holds about
    a third of the padded [9, 64, d] array per state."""
    model = tiny_model("bert")
    encoded = write_tiny_encoded(tmp_path / "enc.h5", "bert", batch=9, length=64)
    with h5py.File(encoded, "a") as f:
        for name in ("input_ids", "attention_mask", "token_type_ids"):
            values = f[name][()]
            values[:8, 10:] = 0
            f[name][...] = values
        f["attention_mask"][8] = 1
    out = tmp_path / "hs.h5"
    extract(model, encoded, out, ExtractSettings(batch_size=4))
    with h5py.File(out, "r") as f:
        state = f["hidden/2"]
        d = state.shape[-1]
        assert state.chunks == (1, 16, d)
        assert state.id.get_storage_size() <= (8 * 16 + 64) * d * 4
        assert np.abs(state[:8, 10:]).max() == 0
        assert (np.abs(state[:8, :10]).sum(-1) > 0).all()


def test_failed_extraction_leaves_no_file(tmp_path):
    model = tiny_model("bert")
    encoded = write_tiny_encoded(tmp_path / "enc.h5", "bert")
    with h5py.File(encoded, "a") as f:
        ids = f["input_ids"][()]
        ids[1, 2] = 10_000  # outside the vocabulary: the forward pass fails mid-corpus
        f["input_ids"][...] = ids
    out = tmp_path / "hs.h5"
    with pytest.raises(IndexError):
        extract(model, encoded, out, ExtractSettings(batch_size=1))
    assert list(tmp_path.glob("hs.h5*")) == []


def test_a_write_refused_in_the_writer_thread_reaches_the_caller(tmp_path):
    """HDF5 refuses the thread's writes (the file is open read-only): the caller gets HDF5's
    error, and no put() is left waiting for a slot that the failed thread never handed back."""
    path = tmp_path / "states.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("hidden/0", shape=(8, 4, 3), dtype="f4")
    errors = []

    def extract_four_batches():
        try:
            with h5py.File(path, "r") as f, BackgroundWriter([f["hidden/0"]], [0], 2) as writer:
                for start in range(0, 8, 2):
                    writer.put(start, start + 2, 4, [torch.ones(2, 4, 3)])
        except Exception as error:
            errors.append(error)

    caller = threading.Thread(target=extract_four_batches)
    caller.start()
    caller.join(timeout=60)
    assert not caller.is_alive(), "put() or close waits forever after the thread failed"
    assert len(errors) == 1 and "write" in str(errors[0]).lower()


@pytest.mark.parametrize("architecture", ["bert", "gpt2"])
def test_check_store_tool_accepts_a_good_store_and_rejects_a_tampered_one(tmp_path, architecture):
    import json
    import subprocess
    import sys
    from pathlib import Path

    store, model = write_tiny_store(tmp_path, architecture)
    model.save_pretrained(tmp_path / "model")
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"path": str(tmp_path / "model")}))
    tool = Path(__file__).parents[1] / "tools" / "check_store.py"
    command = [sys.executable, str(tool), str(store), str(manifest)]
    assert subprocess.run(command, capture_output=True).returncode == 0
    with h5py.File(store, "a") as f:
        f["hidden/1"][0, 1, 0] += 1e-2
    assert subprocess.run(command, capture_output=True).returncode == 1


def test_check_store_tool_accepts_a_float16_store_and_says_why_it_rejects(tmp_path):
    import json
    import subprocess
    import sys
    from pathlib import Path

    model = tiny_model("bert")
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "bert")
    store = tmp_path / "hs16.h5"
    extract(model, encoded, store, ExtractSettings(batch_size=3, dtype="float16"))
    model.save_pretrained(tmp_path / "model")
    manifest = tmp_path / "manifest.json"
    manifest.write_text(json.dumps({"path": str(tmp_path / "model")}))
    tool = Path(__file__).parents[1] / "tools" / "check_store.py"
    command = [sys.executable, str(tool), str(store), str(manifest)]
    good = subprocess.run(command, capture_output=True, text=True)
    assert good.returncode == 0 and "OK" in good.stdout and "float16" in good.stdout
    with h5py.File(store, "a") as f:
        f["hidden/1"][0, 1, 0] += 0.5
    bad = subprocess.run(command, capture_output=True, text=True)
    assert bad.returncode == 1 and "FAIL: hidden/1" in bad.stdout


def test_extraction_with_sdpa_equals_the_eager_forward_and_restores_eager(tmp_path):
    """Extraction runs SDPA (no attention maps needed); states equal an eager forward's to
    float rounding, padding beyond each batch's longest sequence stays 0, and the model is
    eager again afterwards (attention analyses need eager)."""
    model = tiny_model("bert")
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "bert", batch=5, length=16)
    store = tmp_path / "hs.h5"
    extract(model, encoded, store, ExtractSettings(batch_size=2))
    assert model.config._attn_implementation == "eager"
    with HiddenStates(store) as hs, torch.no_grad():
        ids = torch.from_numpy(hs.input_ids.astype(np.int64))
        mask = torch.from_numpy(hs.attention_mask.astype(np.int64))
        types = torch.from_numpy(hs.token_type_ids.astype(np.int64))
        eager = model(
            input_ids=ids, attention_mask=mask, token_type_ids=types, output_hidden_states=True
        )
        real = hs.attention_mask.astype(bool)
        for l, state in enumerate(eager.hidden_states):
            stored = hs.hidden(l)
            assert np.abs(stored[real] - state.numpy()[real]).max() < 1e-4
            for start, stop in [(0, 2), (2, 4), (4, 5)]:
                n = int(hs.lengths[start:stop].max())
                assert not stored[start:stop, n:].any()
