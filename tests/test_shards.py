"""Layer shards: each shard analyses a block of layers, and the gathered accumulators and maps
are exactly those of one job over every layer (norms, mixing, weights statistics, position
scans)."""

import h5py
import numpy as np
import pandas as pd
import pytest

from attnscope.analyses.mixing.corpus_pass import corpus_pass as mixing_corpus
from attnscope.analyses.mixing.settings import MixingSettings
from attnscope.analyses.norms.corpus_pass import corpus_pass as norms_corpus
from attnscope.analyses.norms.settings import NormsSettings
from attnscope.analyses.position import corpus_pass as position_pass
from attnscope.analyses.position.diagonals import select_heads
from attnscope.analyses.position.settings import PositionSettings
from attnscope.analyses.weights.statistics import accumulate_statistics
from attnscope.architectures import canonical_weights
from attnscope.core.store import HiddenStates, atomic_h5
from attnscope.core.streaming import BottomKSample, merged
from attnscope.model.extract import ExtractSettings, extract
from attnscope.model.loaded import as_loaded
from attnscope.pipeline.shards import (
    ShardError,
    gather_maps,
    gather_parts,
    save_part,
    shard_layers,
)
from conftest import tiny_model, write_tiny_encoded

N_LAYERS = 5


def test_shards_are_consecutive_blocks_covering_every_layer_once():
    for n_layers in (1, 2, 5, 12, 32):
        for shards in range(1, n_layers + 1):
            blocks = [shard_layers(n_layers, shards, k) for k in range(1, shards + 1)]
            assert sum(blocks, []) == list(range(n_layers))
            sizes = [len(block) for block in blocks]
            assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
            assert sizes == sorted(sizes, reverse=True)
    with pytest.raises(ShardError, match="config: shards is 6, but 5 layers are analysed"):
        shard_layers(5, 6, 1)


def test_samples_of_different_sizes_do_not_merge():
    with pytest.raises(ValueError, match="different sizes"):
        merged(BottomKSample(10, 4), BottomKSample(20, 4))
    with pytest.raises(ValueError, match="disagree on a setting"):
        merged({"seed": 0}, {"seed": 1})


def run(analyse, tmp_path, architecture, name, layers=None, ragged=True):
    """(accumulators, maps file) of `analyse` over `layers` of a 5-layer tiny model, on 7
    sequences of ragged lengths up to 16 pieces, or of 16 pieces each (not `ragged`)."""
    folder = tmp_path / (architecture if ragged else f"{architecture}-full")
    store_path = folder / "hidden_states.h5"
    model = tiny_model(architecture, layers=N_LAYERS)
    if not store_path.exists():
        folder.mkdir(exist_ok=True)
        encoded = write_tiny_encoded(
            folder / "encoded.h5", architecture, batch=7, length=16, ragged=ragged
        )
        extract(model, encoded, store_path, ExtractSettings(batch_size=3))
    maps_path = folder / f"{name}.h5"
    with HiddenStates(store_path) as store, atomic_h5(maps_path) as maps:
        result = analyse(store, canonical_weights(model), model, maps, layers)
    return result, maps_path


def norms(store, weights, model, maps, layers):
    # a sample smaller than the stream: the merge must keep the smallest keys of the shards
    settings = NormsSettings(batch_size=3, spearman_sample_size=40, seed=3, max_rel_residual=1e-4)
    return norms_corpus(store, as_loaded(model, weights), maps, settings, layers=layers)


def mixing(store, weights, model, maps, layers):
    settings = MixingSettings(batch_size=3, ig_steps=0, max_rel_residual=1e-4)
    return mixing_corpus(store, as_loaded(model, weights), maps, settings, layers=layers)


def weights(store, weights, model, maps, layers):  # writes no maps
    return accumulate_statistics(store, weights, batch_size=3, layers=layers)


def position(store, weights, model, maps, layers):  # writes no maps
    settings = PositionSettings(t_max=3, xcorr_t_max=4, batch_size=3)
    if not weights.learned_positions:
        return position_pass.trt_pass(store, weights, settings, layers=layers)
    return position_pass.corpus_pass(store, weights, settings, layers=layers)


def position_tables(result) -> dict[str, pd.DataFrame]:
    if not isinstance(result, position_pass.PassResult):  # a rotary model: tr_t(A) alone
        return {"trt": position_pass.trt_table(result, list(range(-3, 4)))}
    heads = select_heads(position_pass.mean_trt(result), result.offsets, [])
    return {
        "trt": position_pass.trt_table(result.trt, result.offsets),
        "identity": position_pass.identity_table(result),
        "xcov_sum": position_pass.xcov_sum_table(result),
        "spectra": position_pass.spectra_table(result),
        "shifts": position_pass.shifts_table(result),
        "g_map": position_pass.g_map_table(result, heads),
        "xcorr": position_pass.xcorr_table(result, heads),
    }


def tables_of(analysis, result) -> dict[str, pd.DataFrame]:
    if analysis is position:
        return position_tables(result)
    if analysis is norms:
        accumulator, residual = result
        return {**accumulator.tables(0.5, 20), "decomposition_check": residual}
    if analysis is weights:
        return dict(zip(("heads", "layers"), result.tables(), strict=True))
    return {"ratios": result.ratios.table(), "rsa": result.rsa.table(), "check": result.check}


def datasets(f: h5py.File) -> list[str]:
    found = []
    f.visititems(lambda name, item: found.append(name) if isinstance(item, h5py.Dataset) else None)
    return sorted(found)


def assert_same_maps(a, b) -> None:
    with h5py.File(a) as one, h5py.File(b) as other:
        assert datasets(one) and datasets(one) == datasets(other)
        for name in datasets(one):
            np.testing.assert_array_equal(one[name][()], other[name][()], err_msg=name)
        assert dict(one.attrs).keys() == dict(other.attrs).keys()


@pytest.mark.parametrize("analysis", [norms, mixing, weights, position], ids=lambda f: f.__name__)
@pytest.mark.parametrize("architecture", ["bert", "llama"])
@pytest.mark.parametrize("shards", [2, 3])
def test_gathered_shards_equal_one_job_over_every_layer(tmp_path, analysis, architecture, shards):
    whole, whole_maps = run(analysis, tmp_path, architecture, "whole")
    parts, part_maps = [], []
    for k in range(1, shards + 1):
        layers = shard_layers(N_LAYERS, shards, k)
        result, maps = run(analysis, tmp_path, architecture, f"shard{k}", layers)
        save_part(tmp_path / f"shard{k}.pkl", result)
        parts.append(tmp_path / f"shard{k}.pkl")
        part_maps.append(maps)
    gathered = gather_parts(parts)
    with atomic_h5(tmp_path / "gathered.h5") as out:
        gather_maps(part_maps, out)
    expected, got = tables_of(analysis, whole), tables_of(analysis, gathered)
    assert expected.keys() == got.keys()
    for name in expected:
        pd.testing.assert_frame_equal(got[name], expected[name], check_exact=True, obj=name)
    if analysis in (norms, mixing):
        assert_same_maps(whole_maps, tmp_path / "gathered.h5")
    if analysis is norms:  # the sample was cut: pairs were offered beyond its size
        assert all(s.seen > s.size for s in whole[0].samples.values() if s.seen)


def norms_full_sample(store, weights, model, maps, layers):
    """The norms with a sample larger than the stream: it keeps every pair, the shard's
    largest accumulator."""
    settings = NormsSettings(3, spearman_sample_size=10**6, seed=3, max_rel_residual=1e-4)
    return norms_corpus(store, as_loaded(model, weights), maps, settings, layers=layers)


# the settings of each family's run above, as the config's analyses block would hold them
SETTINGS = {
    "norms": {"spearman_sample_size": 10**6, "maps_dtype": "float32"},
    "mixing": {"maps_dtype": "float32"},
    "weights": {},
    "position": {"t_max": 3, "xcorr_t_max": 4},
}


@pytest.mark.parametrize(
    "analysis", [norms_full_sample, mixing, weights, position], ids=lambda f: f.__name__
)
def test_the_disk_estimate_holds_each_shards_files(tmp_path, analysis):
    """Issue 35, item 5: two layer shards of a 5-layer model: each shard's pickled
    accumulators take at most the estimate of its `{shard}.pkl` (the norms' sample of every
    pair alone larger than the allowance for small tables and framing), and its maps
    exactly the estimate of its `{shard}.h5` (their datasets are not compressed)."""
    from attnscope.analyses.family import families
    from attnscope.pipeline.disk_estimate import PART_ALLOWANCE, model_shape, shard_file_sizes

    name = analysis.__name__.split("_")[0]
    family = families()[name]
    config = tiny_model("bert", layers=N_LAYERS).config.to_dict()
    shape = model_shape(config, N_LAYERS, config["hidden_size"])
    written = {}
    for k in (1, 2):
        result, maps = run(analysis, tmp_path, "bert", f"shard{k}", shard_layers(N_LAYERS, 2, k))
        save_part(tmp_path / f"{k}.pkl", result)
        written[f"{name}/shards/{k}.pkl"] = (tmp_path / f"{k}.pkl").stat().st_size
        with h5py.File(maps) as f:
            stored = [f[d].id.get_storage_size() for d in datasets(f)]
        if stored:
            written[f"{name}/shards/{k}.h5"] = sum(stored)
    with HiddenStates(tmp_path / "bert" / "hidden_states.h5") as store:
        N, length = store.n_sequences, store.length
    layers = list(range(N_LAYERS))
    planned = shard_file_sizes(family, SETTINGS[name], shape, layers, 2, N, length)
    assert planned.keys() == written.keys()
    for file, size in written.items():
        if file.endswith(".h5"):
            assert size == planned[file], file
        else:
            assert 0 < size <= planned[file], file
    if name == "norms":
        assert written["norms/shards/1.pkl"] > PART_ALLOWANCE  # the sample must be counted


def test_the_norms_shard_estimate_is_near_its_file(tmp_path):
    """Item m25: on sequences of the full length (no padding), each of two norms shards'
    `{shard}.pkl` (the Spearman sample of every pair of its layers, and the moments) is at
    least 2/3 of its estimate: the sample counts the shard's layers, not the model's, and
    its pairs once over the four categories."""
    from attnscope.analyses.family import families
    from attnscope.pipeline.disk_estimate import model_shape, shard_file_sizes

    config = tiny_model("bert", layers=N_LAYERS).config.to_dict()
    shape = model_shape(config, N_LAYERS, config["hidden_size"])
    layers = list(range(N_LAYERS))
    planned = shard_file_sizes(families()["norms"], SETTINGS["norms"], shape, layers, 2, 7, 16)
    for k in (1, 2):
        block = shard_layers(N_LAYERS, 2, k)
        result, _ = run(norms_full_sample, tmp_path, "bert", f"shard{k}", block, ragged=False)
        save_part(tmp_path / f"{k}.pkl", result)
        written = (tmp_path / f"{k}.pkl").stat().st_size
        assert written <= planned[f"norms/shards/{k}.pkl"] <= 1.5 * written, (k, written)
