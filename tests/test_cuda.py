"""The CUDA path: skipped (with the reason) where torch sees no GPU, never faked."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from attnscope.core.store import HiddenStates
from attnscope.model.devices import pick_device
from attnscope.model.extract import ExtractSettings, extract
from conftest import tiny_model, write_tiny_encoded

ROOT = Path(__file__).parents[1]
HAS_GPU = torch.cuda.is_available()
needs_gpu = pytest.mark.skipif(not HAS_GPU, reason="torch sees no CUDA device on this machine")


def test_device_setting_resolves_without_touching_a_missing_gpu():
    assert pick_device("cpu") == "cpu"
    assert pick_device("auto") == ("cuda" if HAS_GPU else "cpu")
    if not HAS_GPU:
        with pytest.raises(RuntimeError, match="no CUDA device"):
            pick_device("cuda")


def test_a_device_is_the_one_asked_for_or_refused_by_name():
    """Issue 35, item 12: cuda:N is that GPU (N below the count torch sees) and nothing else
    is swapped for a device silently: "tpu" or "cuda:x" is refused naming the setting, and
    so is a GPU torch does not see. The schema takes cuda:N too; the API goes through the
    same function."""
    import jsonschema
    import yaml

    from attnscope.api import load

    for wrong in ("tpu", "gpu", "cuda:", "cuda:x", "cuda:-1", "CUDA"):
        with pytest.raises(ValueError, match=f"^device: '{re.escape(wrong)}' is not one of"):
            pick_device(wrong)
    with pytest.raises(ValueError, match="^device: 'tpu' is not one of auto, cpu, cuda or cuda:N"):
        load(device="tpu")
    count = torch.cuda.device_count() if HAS_GPU else 0
    if HAS_GPU:
        assert pick_device("cuda:0") == "cuda:0" and pick_device("cuda") == "cuda"
        assert pick_device(f"cuda:{count - 1}") == f"cuda:{count - 1}"
    with pytest.raises(RuntimeError, match=f"device: cuda:{count} was asked for, but torch sees"):
        pick_device(f"cuda:{count}")
    schema = yaml.safe_load((ROOT / "config/schema.yaml").read_text())["properties"]["device"]
    for right in ("auto", "cpu", "cuda", "cuda:0", "cuda:12"):
        jsonschema.validate(right, schema)
    for wrong in ("tpu", "gpu", "cuda:", "cuda:x", "cuda:1 "):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schema)


@needs_gpu
@pytest.mark.parametrize("architecture", ["bert", "gpt2"])
def test_extraction_on_the_gpu_equals_the_cpu(tmp_path, architecture):
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", architecture, batch=6, length=16)
    extract(tiny_model(architecture), encoded, tmp_path / "cpu.h5", ExtractSettings(batch_size=4))
    extract(
        tiny_model(architecture),
        encoded,
        tmp_path / "gpu.h5",
        ExtractSettings(batch_size=4, device="cuda"),
    )
    with HiddenStates(tmp_path / "cpu.h5") as cpu, HiddenStates(tmp_path / "gpu.h5") as gpu:
        real = cpu.attention_mask.astype(bool)
        for layer in range(cpu.n_layers + 1):
            difference = np.abs(cpu.hidden(layer)[real] - gpu.hidden(layer)[real]).max()
            assert difference < 1e-4, (layer, difference)


def test_a_local_run_checks_the_gpu_it_names_before_any_job():
    """check_local_device (the workflow's onstart) refuses cuda:N where torch does not see
    that GPU, as it refuses cuda where it sees none."""
    from attnscope.model.devices import check_local_device

    count = torch.cuda.device_count() if HAS_GPU else 0
    check_local_device("cpu")
    check_local_device("auto")
    seen = "was asked for, but torch sees" if HAS_GPU else "device is cuda:7, but torch sees no"
    with pytest.raises(RuntimeError, match=seen):
        check_local_device(f"cuda:{max(count, 7)}")
