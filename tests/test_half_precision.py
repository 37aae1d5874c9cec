"""16-bit extraction: bfloat16 stores hold the exact bits, bfloat16 and float16 forwards stay
within their stated distance of the float32 forward, and the analyses still decompose the
stored states exactly in float32."""

import h5py
import numpy as np
import pytest
import torch

from attnscope.analyses.mixing.corpus_pass import corpus_pass as mixing_corpus
from attnscope.analyses.mixing.settings import MixingSettings
from attnscope.analyses.norms.corpus_pass import corpus_pass as norms_corpus
from attnscope.analyses.norms.settings import NormsSettings
from attnscope.architectures import canonical_weights
from attnscope.core.checks import NonFiniteError
from attnscope.core.store import HiddenStates, atomic_h5
from attnscope.model.devices import check_compute_dtype
from attnscope.model.extract import ExtractSettings, extract, extract_streamed
from attnscope.model.loaded import as_loaded
from conftest import tiny_model, write_tiny_encoded

# Largest |state - float32 state| relative to the state's largest value, over every layer of
# the tiny random models (2 layers; measured: bfloat16 up to 0.025 (Mixtral), float16 up to
# 0.0014). The lower bound shows that the forward did run in the 16-bit type.
DISTANCE = {"bfloat16": (1e-4, 0.05), "float16": (1e-5, 5e-3)}
# Whole-model and layer-streamed 16-bit forwards take the same inputs but the rotary decoders'
# may round in another order: within one step of the 16-bit type at the state's largest value
# (bfloat16 keeps 7 fraction bits, float16 10; measured up to 0.45 and 0.77 of a step).
ROUTES = {"bfloat16": 2**-7, "float16": 2**-10}
ARCHITECTURES = ("bert", "gpt2", "llama", "gemma2", "mixtral", "gpt_neox")


def distance(path_a, path_b) -> list[float]:
    """Per stored state: max |b - a| over real pieces / max |a|."""
    with HiddenStates(path_a) as a, HiddenStates(path_b) as b:
        real = a.attention_mask.astype(bool)
        return [
            float(np.abs(b.hidden(l)[real] - a.hidden(l)[real]).max())
            / float(np.abs(a.hidden(l)[real]).max())
            for l in range(a.n_layers + 1)
        ]


def test_bfloat16_store_holds_each_states_bfloat16_bits(tmp_path):
    model = tiny_model("llama")
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "llama", batch=5)
    extract(model, encoded, tmp_path / "f32.h5", ExtractSettings(batch_size=2))
    extract(model, encoded, tmp_path / "bf16.h5", ExtractSettings(batch_size=2, dtype="bfloat16"))
    with h5py.File(tmp_path / "bf16.h5") as f:
        assert f.attrs["dtype"] == "bfloat16"
        assert all(f[f"hidden/{l}"].dtype == np.uint16 for l in range(3))
        assert all(f[f"hidden/{l}"].attrs["encoding"] == "bfloat16" for l in range(3))
    with HiddenStates(tmp_path / "f32.h5") as full, HiddenStates(tmp_path / "bf16.h5") as half:
        for l in range(full.n_layers + 1):
            rounded = torch.from_numpy(full.hidden(l)).to(torch.bfloat16).float().numpy()
            np.testing.assert_array_equal(half.hidden(l), rounded)
            assert np.abs(half.hidden(l) - full.hidden(l)).max() > 0  # really rounded


@pytest.mark.parametrize("compute_dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_16_bit_forward_stays_within_its_stated_distance(tmp_path, architecture, compute_dtype):
    """Both routes in `compute_dtype`: each within DISTANCE of the float32 store, and of each
    other within ROUTES."""
    folder = tmp_path / "model"
    tiny_model(architecture).save_pretrained(folder)
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", architecture, batch=5)
    run = ExtractSettings(batch_size=2, compute_dtype=compute_dtype)
    extract(tiny_model(architecture), encoded, tmp_path / "f32.h5", ExtractSettings(batch_size=2))
    extract(tiny_model(architecture), encoded, tmp_path / "whole.h5", run)
    extract_streamed(folder, encoded, tmp_path / "streamed.h5", run)
    low, high = DISTANCE[compute_dtype]
    whole = distance(tmp_path / "f32.h5", tmp_path / "whole.h5")
    streamed = distance(tmp_path / "f32.h5", tmp_path / "streamed.h5")
    assert max(whole) <= high and max(streamed) <= high
    assert min(whole[1:]) > low and min(streamed[1:]) > low
    assert max(distance(tmp_path / "whole.h5", tmp_path / "streamed.h5")) <= ROUTES[compute_dtype]


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_analyses_decompose_a_bfloat16_forwards_store_in_float32(tmp_path, dtype):
    """States of a bfloat16 forward, stored in `dtype`: the norm and mixing decompositions of
    every layer still rebuild the float32 modules' outputs on the stored input (mixing checks
    its last stage against a recomputed X_{l+1}, not the stored bfloat16 one)."""
    model = tiny_model("llama")
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "llama", batch=5)
    store_path = tmp_path / "states.h5"
    extract(
        model,
        encoded,
        store_path,
        ExtractSettings(batch_size=2, dtype=dtype, compute_dtype="bfloat16"),
    )
    model = model.float()
    weights = canonical_weights(model)
    with HiddenStates(store_path) as store:
        assert not store.exact
        with atomic_h5(tmp_path / "norms.h5") as maps:
            _, residual = norms_corpus(
                store,
                as_loaded(model, weights),
                maps,
                NormsSettings(
                    batch_size=2, spearman_sample_size=100, seed=0, max_rel_residual=1e-4
                ),
            )
        with atomic_h5(tmp_path / "mixing.h5") as maps:
            mixing = mixing_corpus(
                store,
                as_loaded(model, weights),
                maps,
                MixingSettings(
                    batch_size=2, ig_steps=0, max_rel_residual=1e-4, maps_dtype="float32"
                ),
            )
    assert len(residual) == model.config.num_hidden_layers
    assert (residual["max_rel"] < 1e-5).all()
    assert set(mixing.check["layer"]) == {1, 2} and (mixing.check["max_rel"] < 1e-4).all()


@pytest.mark.parametrize("compute_dtype", ["float32", "bfloat16", "float16"])
def test_this_cpu_build_runs_every_compute_dtype(compute_dtype):
    check_compute_dtype(compute_dtype, "cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a build without CUDA")
def test_a_compute_dtype_the_build_cannot_run_is_named():
    with pytest.raises(RuntimeError, match="config: compute_dtype is bfloat16.*cuda"):
        check_compute_dtype("bfloat16", "cuda")


def overflowing_llama(folder):
    """A tiny Llama whose second layer's FF output weights are scaled by 3e7, saved in
    `folder`: hidden/0 and hidden/1 stay below 1 in magnitude, hidden/2 goes past float16's
    largest value, 65,504 (as real decoders' first positions come within one scale step of)."""
    model = tiny_model("llama")
    with torch.no_grad():
        model.layers[1].mlp.down_proj.weight.mul_(3e7)
    model.save_pretrained(folder)
    return model


def run_route(route: str, model, folder, encoded, out, **settings):
    """Extract on `route` in batches of 2; `settings`: `ExtractSettings`' others."""
    if route == "whole-model":
        return extract(model, encoded, out, ExtractSettings(batch_size=2, **settings))
    return extract_streamed(folder, encoded, out, ExtractSettings(batch_size=2, **settings))


def full_batch_state(tmp_path, state: int) -> np.ndarray:
    """hidden/{state} of the first batch (sequences 0 and 1) of the float32 store."""
    with HiddenStates(tmp_path / "f32.h5") as full:
        real = full.attention_mask[:2].astype(bool)
        return full.hidden(state, 0, 2)[real]


@pytest.mark.parametrize("route", ["whole-model", "layer-streamed"])
def test_a_state_beyond_float16_stops_extraction_naming_dtype(tmp_path, route):
    """Issue 35, item 2: a float16 store of states above 65,504 would hold inf. Extraction
    stops at the first such batch naming the state, its largest |x| and `dtype`, and leaves
    no store (nor its partial or scratch file) behind; the suggested bfloat16 store works."""
    model = overflowing_llama(tmp_path / "model")
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "llama", batch=5)
    run_route(route, model, tmp_path / "model", encoded, tmp_path / "f32.h5")
    with HiddenStates(tmp_path / "f32.h5") as full:
        largest = [float(np.abs(full.hidden(l)).max()) for l in range(3)]
    assert largest[1] < 1 and largest[2] > 65504  # the premise: only hidden/2 overflows
    before = set(tmp_path.iterdir())
    out = tmp_path / "f16.h5"
    with pytest.raises(NonFiniteError) as error:
        run_route(route, model, tmp_path / "model", encoded, out, dtype="float16")
    message = str(error.value)
    assert "hidden/2 (the output of layer 2) of sequences 0..1" in message
    assert "`dtype: float16`" in message and "`dtype: bfloat16`" in message
    assert "`dtype: float32`" in message and "compute_dtype" not in message
    reported = float(message.split("reaches |x| = ")[1].split(",")[0])
    assert reported == pytest.approx(float(np.abs(full_batch_state(tmp_path, 2)).max()), 1e-4)
    assert set(tmp_path.iterdir()) == before  # nothing half-written is left
    run_route(route, model, tmp_path / "model", encoded, tmp_path / "bf16.h5", dtype="bfloat16")
    with HiddenStates(tmp_path / "bf16.h5") as half:
        assert np.isfinite(half.hidden(2)).all()


@pytest.mark.parametrize("route", ["whole-model", "layer-streamed"])
def test_a_float16_forward_that_overflows_stops_extraction_naming_compute_dtype(tmp_path, route):
    """The same model run in float16: its forward itself gives inf (the FF's products pass
    65,504 before the output does), so the error names `compute_dtype` rather than `dtype`."""
    model = overflowing_llama(tmp_path / "model")
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "llama", batch=5)
    with pytest.raises(NonFiniteError) as error:
        run_route(
            route, model, tmp_path / "model", encoded, tmp_path / "out.h5", compute_dtype="float16"
        )
    message = str(error.value)
    assert "the forward in `compute_dtype: float16` gave" in message
    assert "hidden/2 (the output of layer 2)" in message
    assert "`compute_dtype: bfloat16`" in message and "`compute_dtype: float32`" in message
    assert not (tmp_path / "out.h5").exists()
    assert not list(tmp_path.glob("out.h5*"))
