"""The CUDA path: skipped (with the reason) where torch sees no GPU, never faked."""

import numpy as np
import pytest
import torch

from attnscope.core.store import HiddenStates
from attnscope.pipeline.extract import extract
from attnscope.pipeline.models import pick_device
from conftest import tiny_model, write_tiny_encoded

HAS_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="torch sees no CUDA device on this machine")


def test_device_setting_resolves_without_touching_a_missing_gpu():
    assert pick_device("cpu") == "cpu"
    assert pick_device("auto") == ("cuda" if HAS_GPU else "cpu")
    if not HAS_GPU:
        with pytest.raises(RuntimeError, match="no CUDA device"):
            pick_device("cuda")


@needs_gpu
@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_extraction_on_the_gpu_equals_the_cpu(tmp_path, family):
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", family, batch=6, length=16)
    extract(tiny_model(family), encoded, tmp_path / "cpu.h5", batch_size=4, device="cpu")
    extract(tiny_model(family), encoded, tmp_path / "gpu.h5", batch_size=4, device="cuda")
    with HiddenStates(tmp_path / "cpu.h5") as cpu, HiddenStates(tmp_path / "gpu.h5") as gpu:
        real = cpu.attention_mask.astype(bool)
        for layer in range(cpu.n_layers + 1):
            difference = np.abs(cpu.hidden(layer)[real] - gpu.hidden(layer)[real]).max()
            assert difference < 1e-4, (layer, difference)
