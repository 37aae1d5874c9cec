"""The disk estimate: what a run will write, against the disk's real free space."""

import pytest

from attnscope.pipeline.disk_estimate import (
    DiskSpaceError,
    free_bytes,
    hidden_state_bytes,
    require_space,
)
from attnscope.pipeline.extract import extract
from conftest import tiny_model, write_tiny_encoded


def test_hidden_state_estimate_is_the_full_store(tmp_path):
    """Sequences of the full length fill every chunk: the states take the estimate exactly."""
    import h5py

    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "llama", batch=5, length=32)
    with h5py.File(encoded, "a") as f:
        f["attention_mask"][...] = 1
    extract(tiny_model("llama"), encoded, tmp_path / "hs.h5", 2, "cpu", dtype="bfloat16")
    with h5py.File(tmp_path / "hs.h5") as f:
        n_layers = len(f["hidden"]) - 1
        stored = sum(f[f"hidden/{l}"].id.get_storage_size() for l in range(n_layers + 1))
        d_model = f["hidden/0"].shape[-1]
    assert stored == hidden_state_bytes(n_layers, 5, 32, d_model, "bfloat16")


def test_a_job_that_would_overfill_its_disk_stops_naming_the_file(tmp_path):
    require_space(tmp_path / "small.h5", 1)
    with pytest.raises(DiskSpaceError, match="big.h5 needs up to .* GB free"):
        require_space(tmp_path / "big.h5", free_bytes(tmp_path) + 10**9)
