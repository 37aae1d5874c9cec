"""The `layers:` setting: a store keeps only the states the chosen layers read, on both
extraction routes, with the same values as a store of every layer."""

import h5py
import numpy as np
import pandas as pd
import pytest

from attnscope.core.layer_selection import LayerSelectionError, selected_layers, stored_states
from attnscope.core.store import HiddenStates, StateNotStoredError
from attnscope.model.extract import ExtractSettings, extract, extract_streamed
from attnscope.model.loaded import as_loaded
from conftest import tiny_model, write_tiny_encoded

HEADS = {"bert": "mlm", "llama": "causal"}


def test_a_selection_names_its_layers_and_the_states_they_read():
    assert selected_layers("all", 4) == [0, 1, 2, 3]
    assert selected_layers([4, 2], 4) == [1, 3]
    assert stored_states([1, 3], 4) == [1, 3, 4]  # inputs of layers 2 and 4, and the last output
    assert stored_states([0, 2], 4) == [0, 2]
    assert stored_states([0, 1, 2, 3], 4) == [0, 1, 2, 3, 4]
    with pytest.raises(LayerSelectionError, match=r"layers names layer 5, but model 'm' has 4"):
        selected_layers([1, 5], 4, "model 'm'")
    with pytest.raises(LayerSelectionError, match="layers names layer 0"):
        selected_layers([0], 4)


@pytest.mark.parametrize("architecture", ["bert", "gpt2", "llama"])
@pytest.mark.parametrize("chosen", [[2], [1, 3], [3]])
def test_a_subset_store_keeps_the_states_of_its_layers_on_both_routes(
    tmp_path, architecture, chosen
):
    """Every state of the subset store equals the full store's to float rounding (two runs of
    the same forward on this CPU once differed in the last bit); no other state is written, the
    streamed route's scratch file is gone, and reading a left-out state names the setting."""
    model = tiny_model(architecture, head=HEADS.get(architecture, "base"), layers=3)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", architecture, batch=5, length=16)
    extract(model, encoded, tmp_path / "full.h5", ExtractSettings(batch_size=2))
    extract(model, encoded, tmp_path / "whole.h5", ExtractSettings(batch_size=2, layers=chosen))
    extract_streamed(
        folder, encoded, tmp_path / "streamed.h5", ExtractSettings(batch_size=2, layers=chosen)
    )
    expected = stored_states([l - 1 for l in chosen], 3)
    with h5py.File(tmp_path / "full.h5") as full:
        for route in ("whole", "streamed"):
            with h5py.File(tmp_path / f"{route}.h5") as subset:
                assert sorted(int(s) for s in subset["hidden"]) == expected, route
                assert list(subset.attrs["layers"]) == chosen
                assert subset.attrs["n_layers"] == 3
                for state in expected:
                    x, y = full[f"hidden/{state}"][()], subset[f"hidden/{state}"][()]
                    tolerance = 1e-6 if route == "whole" else 1e-5  # one forward, or layer by layer
                    atol = tolerance * float(np.abs(x).max())
                    np.testing.assert_allclose(y, x, rtol=0, atol=atol, err_msg=f"{route} {state}")
    assert not list(tmp_path.glob("*scratch*"))
    with HiddenStates(tmp_path / "streamed.h5") as store:
        assert store.layers == [l - 1 for l in chosen] and store.n_layers == 3
        left_out = min(set(range(4)) - set(expected))
        with pytest.raises(StateNotStoredError, match=f"not hidden/{left_out}.*layers: all"):
            store.hidden(left_out)


def test_a_subset_stores_rotary_bands_and_mixing_equal_the_full_stores(tmp_path):
    """Llama, 3 layers, `layers: [1, 3]`: the store lacks layer 1's output, so mixing's last
    stage is checked against the module recomputed from X; the rotary bands, the mixing
    ratios and the maps of layers 1 and 3 equal those of the store of every layer."""
    from attnscope.analyses.mixing.corpus_pass import corpus_pass
    from attnscope.analyses.mixing.settings import MixingSettings
    from attnscope.analyses.position import rotary
    from attnscope.architectures import canonical_weights
    from attnscope.core.store import atomic_h5

    model = tiny_model("llama", layers=3)
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "llama", batch=5, length=16)
    extract(model, encoded, tmp_path / "full.h5", ExtractSettings(batch_size=2))
    extract(model, encoded, tmp_path / "subset.h5", ExtractSettings(batch_size=2, layers=[1, 3]))
    weights = canonical_weights(model)
    results = {}
    for name in ("full", "subset"):
        with HiddenStates(tmp_path / f"{name}.h5") as store:
            assert store.stores(1) == (name == "full")
            bands = rotary.band_table(
                rotary.rotary_pass(store, weights, t_max=4, batch_size=2, device="cpu")
            )
            with atomic_h5(tmp_path / f"{name}-maps.h5") as maps:
                mixing = corpus_pass(
                    store,
                    as_loaded(model, weights),
                    maps,
                    MixingSettings(
                        batch_size=2, ig_steps=0, max_rel_residual=1e-4, maps_dtype="float32"
                    ),
                    layers=None if name == "full" else store.layers,
                )
        results[name] = bands, mixing.ratios.table(), mixing.check
    for full, subset in zip(results["full"], results["subset"], strict=True):
        expected, got = of_layers(full, [1, 3]), of_layers(subset, [1, 3])
        assert sorted(set(expected["layer"])) == [1, 3]
        pd.testing.assert_frame_equal(got, expected, rtol=1e-5, atol=1e-6)
    with h5py.File(tmp_path / "full-maps.h5") as a, h5py.File(tmp_path / "subset-maps.h5") as b:
        for scope in a:
            assert sorted(b[scope]) == ["1", "3"]
            for layer in ("1", "3"):
                np.testing.assert_allclose(b[scope][layer][()], a[scope][layer][()], atol=1e-6)


def of_layers(table: pd.DataFrame, layers: list[int]) -> pd.DataFrame:
    """The rows of `table` whose `layer` is one of `layers` (summaries over layers left out),
    with an integer layer column."""
    numbers = pd.to_numeric(table["layer"], errors="coerce")
    rows = table[numbers.isin(layers)].reset_index(drop=True)
    return rows.assign(layer=pd.to_numeric(rows["layer"]).astype(int))


def test_a_setting_has_one_spelling_and_says_whether_it_is_the_whole_model():
    """Issue 35, items 16-17: order and the depth do not change what a setting selects."""
    from attnscope.core.layer_selection import layer_setting, whole_model

    assert layer_setting("all") == layer_setting(None) == "all"
    assert layer_setting([4, 2]) == layer_setting([2, 4]) == [2, 4]
    assert layer_setting([4, 2], 6) == [2, 4]
    assert layer_setting([3, 1, 2], 3) == "all"
    assert layer_setting([3, 1, 2]) == [1, 2, 3]  # depth not known: a list
    assert whole_model("all", 3) and whole_model([2, 1, 3], 3) and whole_model("all", None)
    assert not whole_model([1, 2], 3) and not whole_model([1, 2, 3], 4)
    assert not whole_model([1, 2, 3], None)


def test_the_streamed_pass_needs_room_for_the_store_and_the_scratch_file(tmp_path, monkeypatch):
    """Issue 35, item 6: with `layers: [2]` of 3 the streamed pass writes hidden/1 (the input
    of layer 2) and passes the states before it through a scratch file of two states: before
    the pass, the need is the store's unwritten state and the scratch file, each state
    5 x 16 x d float32 in whole chunks.
    A disk with room for the scratch file alone stops the pass, naming it, before any layer
    is computed, and leaves neither the store nor the scratch file."""
    from attnscope.model import disk_space
    from attnscope.model.disk_space import DiskSpaceError, hidden_state_bytes
    from attnscope.model.extract import ExtractSettings, scratch_states, state_store, streamed_bytes

    model = tiny_model("bert", layers=3)
    folder = tmp_path / "model"
    model.save_pretrained(folder)
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "bert", batch=5, length=16)
    d = model.config.hidden_size
    with state_store(encoded, tmp_path / "s.h5", model.config, "float32", {}, [2]) as store:
        hidden = store[1]
        chunk = next(iter(hidden.values())).chunks[1]
        state = hidden_state_bytes(1, 5, 16, d, "float32", chunk)
        assert sorted(hidden) == [1] and streamed_bytes(hidden) == state + 2 * state
        hidden[1][0:2, :16] = 1.0  # two sequences of one state written: their chunks count
        written = hidden[1].id.get_storage_size()
        assert 0 < written < state and streamed_bytes(hidden) == 3 * state - written
        with scratch_states(tmp_path / "s.h5", hidden) as scratch:
            assert len(scratch) == 2 and scratch[0].shape == (5, 16, d)
    scratch_alone = 2 * state
    monkeypatch.setattr(disk_space, "free_bytes", lambda path: scratch_alone + 1)
    with pytest.raises(DiskSpaceError, match=r"streamed\.h5\.scratch\.h5.* needs up to"):
        extract_streamed(
            folder, encoded, tmp_path / "streamed.h5", ExtractSettings(batch_size=2, layers=[2])
        )
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("streamed")]
