"""Analyses on a model read one layer at a time (`loading: layer-streamed`): the same canonical
weights and the same tables and maps as on the whole model, each layer read once, at most
one layer's matrices held, and a peak memory that does not grow with depth."""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest
import torch

from attnscope.analyses.mixing.corpus_pass import corpus_pass as mixing_corpus
from attnscope.analyses.mixing.settings import MixingSettings
from attnscope.analyses.norms.corpus_pass import corpus_pass as norms_corpus
from attnscope.analyses.norms.settings import NormsSettings
from attnscope.analyses.weights.head_distances import (
    attention_entries,
    entries_columns,
    head_distances,
)
from attnscope.analyses.weights.statistics import attention_statistics
from attnscope.architectures import ModelLayer, canonical_weights
from attnscope.core.store import HiddenStates
from attnscope.maps.prediction import model_logits, stored_logits
from attnscope.model.loaded import as_loaded, open_model
from attnscope.model.streamed_weights import KEEP
from conftest import CLASSIC, DECODERS, write_tiny_encoded, write_tiny_model_run


def tensors(obj, name: str = "") -> dict[str, torch.Tensor]:
    """{path: tensor} of every tensor in a canonical dataclass (nested, lists included)."""
    if isinstance(obj, torch.Tensor):
        return {name: obj}
    found = {}
    if dataclasses.is_dataclass(obj):
        for field in dataclasses.fields(obj):
            found |= tensors(getattr(obj, field.name), f"{name}.{field.name}")
    elif isinstance(obj, list):
        for i, item in enumerate(obj):
            found |= tensors(item, f"{name}[{i}]")
    return found


@pytest.mark.parametrize("architecture", [*CLASSIC, *DECODERS])
def test_streamed_canonical_weights_equal_the_whole_models(tmp_path, architecture):
    """Every layer's canonical tensors, the frame (norms, positions) and the word-embedding
    rows read by index equal those of the whole loaded model; the outline has every layer's
    shapes and settings with no tensor read."""
    _, model, manifest = write_tiny_model_run(tmp_path, architecture)
    whole = canonical_weights(model)
    loaded = open_model(manifest, loading="layer-streamed")
    streamed = loaded.weights
    assert loaded.module.config.model_type == model.config.model_type
    assert streamed.layers.reads == 0
    assert [layer.W_Q.device.type for layer in streamed.outline] == ["meta"] * whole.n_layers
    assert (streamed.n_layers, streamed.n_heads, streamed.d_head) == (
        whole.n_layers,
        whole.n_heads,
        whole.d_head,
    )
    for outline, layer in zip(streamed.outline, whole.layers, strict=True):
        assert (outline.causal, outline.scale, outline.sliding_window) == (
            layer.causal,
            layer.scale,
            layer.sliding_window,
        )
    for l in range(whole.n_layers):
        want, got = tensors(whole.layers[l]), tensors(streamed.layers[l])
        assert want.keys() == got.keys()
        for name in want:
            torch.testing.assert_close(got[name], want[name], rtol=0, atol=0, msg=name)
    frame = {"final_ln", "embedding_ln", "position_embeddings", "token_type_embeddings"}
    for name in frame:
        want, got = tensors(getattr(whole, name)), tensors(getattr(streamed, name))
        assert want.keys() == got.keys()
        for key in want:
            torch.testing.assert_close(got[key], want[key], rtol=0, atol=0)
    ids = torch.tensor([[3, 5, 3], [7, 0, 119]])
    assert streamed.word_embeddings.shape == whole.word_embeddings.shape
    torch.testing.assert_close(streamed.word_embeddings[ids], whole.word_embeddings[ids])


def run_analyses(store: Path, model, weights, out: Path) -> dict:
    """The norms, mixing and weights-statistics tables of one store; their maps in `out`."""
    with HiddenStates(store) as states, h5py.File(out / "norms.h5", "w") as maps:
        norms, norms_check = norms_corpus(
            states,
            as_loaded(model, weights),
            maps,
            NormsSettings(batch_size=3, spearman_sample_size=50, seed=0, max_rel_residual=1e-3),
        )
    with HiddenStates(store) as states, h5py.File(out / "mixing.h5", "w") as maps:
        mixing = mixing_corpus(
            states,
            as_loaded(model, weights),
            maps,
            MixingSettings(batch_size=3, ig_steps=0, max_rel_residual=1e-2, maps_dtype="float32"),
        )
    with HiddenStates(store) as states:
        heads, layers = attention_statistics(states, weights, batch_size=3)
    return {
        **norms.tables(1.0, 50),
        "norms_check": norms_check,
        "mixing_ratio": mixing.ratios.table(),
        "rsa": mixing.rsa.table(),
        "mixing_check": mixing.check,
        "heads": heads,
        "layers": layers,
    }


@pytest.mark.parametrize("architecture", ["bert", "gpt2", "llama", "gemma2", "mixtral", "gpt_neox"])
def test_analyses_on_the_streamed_model_equal_the_whole_models(tmp_path, architecture):
    """norms, mixing and the weights statistics give the same tables and maps (the module's
    own attention output included in every residual check) on both routes, reading each of 4
    layers once."""
    store, model, manifest = write_tiny_model_run(tmp_path, architecture, layers=4)
    whole = open_model(manifest)
    streamed = open_model(manifest, loading="layer-streamed")
    (tmp_path / "whole").mkdir()
    (tmp_path / "streamed").mkdir()
    want = run_analyses(store, whole.module, whole.weights, tmp_path / "whole")
    got = run_analyses(store, streamed.module, streamed.weights, tmp_path / "streamed")
    analyses = 3  # each walks the 4 layers in order, reading each once
    assert streamed.weights.layers.reads == analyses * model.config.num_hidden_layers == 12
    for name, table in want.items():
        assert not table.empty, name
        pd.testing.assert_frame_equal(got[name], table, check_exact=False, rtol=1e-6, atol=0)
    for maps in ("norms.h5", "mixing.h5"):
        want_maps, got_maps = (
            datasets(tmp_path / "whole" / maps),
            datasets(tmp_path / "streamed" / maps),
        )
        assert want_maps and want_maps.keys() == got_maps.keys()
        for path, values in want_maps.items():
            np.testing.assert_array_equal(got_maps[path], values, err_msg=path)


@pytest.mark.parametrize("architecture", ["bert", "gpt2", "llama", "gemma2"])
def test_js_distances_walked_layer_by_layer_equal_the_batched_ones(tmp_path, architecture):
    """The layer-streamed JS head distances (`LoadedModel.layer_blocks`: every layer's
    attention entries written to a scratch dataset, then summed batch by batch) equal the
    whole model's, which hold one batch of every layer at once and write no scratch file, bit
    for bit, reading each of 4 layers once; batches of 3 over 4 sequences leave a short last
    batch; the scratch folder is removed."""
    store, _, manifest = write_tiny_model_run(tmp_path, architecture, layers=4)
    whole = open_model(manifest)
    streamed = open_model(manifest, loading="layer-streamed")
    with HiddenStates(store) as states:
        columns = entries_columns(states, 3, whole.weights.causal)
        blocks = whole.layer_blocks(states, 3, attention_entries, columns, tmp_path / "whole")
        want = head_distances(blocks)
        blocks = streamed.layer_blocks(states, 3, attention_entries, columns, tmp_path / "sp")
        got = head_distances(blocks)
    G = whole.weights.n_layers * whole.weights.n_heads
    assert streamed.weights.layers.reads == 4 and len(columns) == 3
    assert want.shape == (G, G) and want.max() > 0
    np.testing.assert_array_equal(got, want)
    assert not (tmp_path / "whole").exists()  # no spool on the whole-model route
    assert (tmp_path / "sp").is_dir() and not list((tmp_path / "sp").iterdir())


def datasets(path: Path) -> dict[str, np.ndarray]:
    """{name: values} of every dataset of an HDF5 file."""
    found = {}
    with h5py.File(path) as f:
        f.visititems(
            lambda name, item: (
                found.update({name: item[()]}) if isinstance(item, h5py.Dataset) else None
            )
        )
    return found


@pytest.mark.parametrize("architecture", ["bert", "llama"])
def test_a_layer_handle_runs_its_own_module_layer_whatever_was_read_since(tmp_path, architecture):
    """`ModelLayer(model, weights, 0).attention_output` after layer 1 was read (which unloads
    layer 0's module on the layer-streamed route) equals the whole model's layer-0 output."""
    store, model, manifest = write_tiny_model_run(tmp_path, architecture)
    loaded = open_model(manifest, loading="layer-streamed")
    first = ModelLayer(loaded.module, loaded.weights, 0)
    loaded.weights.layers[1]  # another layer read: layer 0's module goes back to meta
    with HiddenStates(store) as states:
        batch = next(states.batches(0, 3, "cpu"))
    with torch.no_grad():
        got = first.attention_output(batch.X, batch.mask)
        want = ModelLayer(model, canonical_weights(model), 0).attention_output(batch.X, batch.mask)
    assert got.device.type == "cpu"
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_at_most_keep_layers_are_held(tmp_path):
    """While the mixing analysis walks 4 layers (reading the next layer's norm too), only the
    layer being read holds real matrices at each load."""
    store, _, manifest = write_tiny_model_run(tmp_path, "llama", layers=4)
    loaded = open_model(manifest, loading="layer-streamed")
    stream = loaded.weights.layers.stream
    held, load = [], stream.load

    def watched(layer):
        load(layer)
        blocks = enumerate(stream.blocks)
        held.append([i for i, b in blocks if next(b.parameters()).device.type != "meta"])

    stream.load = watched
    with HiddenStates(store) as states, h5py.File(tmp_path / "maps.h5", "w") as maps:
        mixing_corpus(
            states,
            loaded,
            maps,
            MixingSettings(batch_size=3, ig_steps=4, max_rel_residual=1e-2, maps_dtype="float32"),
        )
    assert held == [[0], [1], [2], [3]]
    assert KEEP == 1


MEMORY_RUN = """
import sys, h5py
from attnscope.core.store import HiddenStates
from attnscope.analyses.mixing.corpus_pass import corpus_pass as mixing
from attnscope.analyses.mixing.settings import MixingSettings
from attnscope.analyses.norms.corpus_pass import corpus_pass as norms
from attnscope.analyses.norms.settings import NormsSettings
if sys.argv[4] == "streamed":
    from attnscope.model.streamed_weights import streamed_model
    model, weights = streamed_model(sys.argv[1])
else:
    from attnscope.architectures import ModelLayer, canonical_weights, load_model
    model = load_model(sys.argv[1])
    weights = canonical_weights(model)
from attnscope.model.loaded import as_loaded
loaded = as_loaded(model, weights)
with HiddenStates(sys.argv[2]) as store, h5py.File(sys.argv[3] + "-norms.h5", "w") as maps:
    norms(store, loaded, maps, NormsSettings(2, spearman_sample_size=50, seed=0,
                                             max_rel_residual=1e-3))
with HiddenStates(sys.argv[2]) as store, h5py.File(sys.argv[3] + "-mixing.h5", "w") as maps:
    mixing(store, loaded, maps, MixingSettings(2, ig_steps=4, max_rel_residual=1e-2))
print(int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]))
"""


def test_streamed_analyses_peak_memory_does_not_grow_with_depth(tmp_path):
    """Random BERT-base-shaped checkpoints with 4 and 16 layers: norms and mixing on the
    streamed route peak (VmHWM of a fresh process) within one layer's float32 weights of each
    other (one layer's matrices are held, and freed before the next is read); on the
    whole-model route the 16-layer run needs more than ten layers' more. glibc's malloc is
    given a fixed mmap threshold, so that what it keeps of freed layers is not counted (with
    its sliding threshold the streamed 16-layer run peaked 1.7 layers higher than the 4-layer
    one here; see the README)."""
    from transformers import BertConfig, BertModel

    from attnscope.model.extract import ExtractSettings, extract_streamed

    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "bert", batch=4, length=16)
    peaks = {}
    for layers in (4, 16):
        config = BertConfig(
            vocab_size=1000, hidden_size=768, num_hidden_layers=layers, intermediate_size=3072
        )
        folder = tmp_path / f"bert-{layers}"
        BertModel(config).save_pretrained(folder)
        store = tmp_path / f"states-{layers}.h5"
        extract_streamed(folder, encoded, store, ExtractSettings(batch_size=2))
        for route in ("streamed", "whole"):
            args = [str(folder), str(store), str(tmp_path / f"{layers}-{route}"), route]
            run = subprocess.run(
                [sys.executable, "-c", MEMORY_RUN, *args],
                capture_output=True,
                text=True,
                check=True,
                env={**os.environ, "MALLOC_MMAP_THRESHOLD_": str(128 * 1024)},
            )
            peaks[layers, route] = int(run.stdout.split()[-1]) / 1024
    layer_mib = 7.1e6 * 4 / 2**20  # one BERT-base layer's float32 weights
    assert peaks[16, "streamed"] - peaks[4, "streamed"] < layer_mib, peaks
    assert peaks[16, "whole"] - peaks[4, "whole"] > 10 * layer_mib, peaks


def headed_run(tmp_path, architecture: str, loaded, name: str, batch_size: int = 3):
    """(depth_pass result, propagated.h5 datasets, views page of sequence 1) of one route."""
    from attnscope.analyses.mixing.depth_pass import depth_pass
    from attnscope.analyses.mixing.settings import MixingSettings
    from attnscope.analyses.views.payload import sequence_page
    from attnscope.analyses.views.settings import ViewsSettings
    from attnscope.core.store import atomic_h5
    from attnscope.maps.layer_decomposition import stream_scope
    from attnscope.maps.prediction import Prediction

    store = next(tmp_path.glob("*-hidden_states.h5"))
    prediction = Prediction(
        head=loaded.head,
        mask_token_id=4
        if architecture in ("bert", "roberta")
        else None,  # id 4: every row's piece 3
        contrast=(7, 9),
        token_of=str,
        logits=loaded.reference_logits,
    )
    scopes = ("AttnRes-w", stream_scope(loaded.weights.outline[0].plan))
    settings = MixingSettings(batch_size, ig_steps=0, max_rel_residual=1e-4, rollout_scopes=scopes)
    with (
        HiddenStates(store) as states,
        h5py.File(tmp_path / "whole" / "mixing.h5", "r") as maps,
        atomic_h5(tmp_path / name / "propagated.h5") as out,
    ):
        result = depth_pass(states, loaded, out, maps, prediction, settings)
        page = sequence_page(
            states, 1, loaded, Tokens(),
            ViewsSettings(
                scopes=True, ig_steps=0, top_k=5, max_rel_residual=1e-4, depth_rel_residual=1e-3
            ),
            prediction=prediction,
        )  # fmt: skip
    return result, datasets(tmp_path / name / "propagated.h5"), page


class Tokens:
    """A stand-in tokenizer for the page's labels: piece ids as strings."""

    def convert_ids_to_tokens(self, ids):
        return [f"t{i}" for i in ids]

    def convert_tokens_to_string(self, tokens):
        return " ".join(tokens)


@pytest.mark.parametrize(
    "architecture,head",
    [("bert", "mlm"), ("gpt2", "causal"), ("llama", "causal"), ("gemma2", "causal")],
)
def test_propagation_and_views_on_the_streamed_model_equal_the_whole_models(
    tmp_path, architecture, head
):
    """The decomposition through the whole depth, its rollouts, the prediction's attribution
    (checked against the head on the stored X_L when streamed, the model's forward when
    whole) and the views page agree on both routes; the streamed pass reads every layer once
    per batch and holds the LM head, not the model."""
    store, model, manifest = write_tiny_model_run(tmp_path, architecture, layers=3, head=head)
    whole = open_model(manifest, with_head=True)
    streamed = open_model(manifest, with_head=True, loading="layer-streamed")
    assert whole.head is not None and streamed.head is not None
    assert streamed.reference_logits.func is stored_logits  # no module in memory
    assert whole.reference_logits.func is model_logits
    (tmp_path / "whole").mkdir()
    (tmp_path / "streamed").mkdir()
    with HiddenStates(store) as states, h5py.File(tmp_path / "whole" / "mixing.h5", "w") as maps:
        mixing_corpus(
            states,
            whole,
            maps,
            MixingSettings(batch_size=3, ig_steps=0, max_rel_residual=1e-4, maps_dtype="float32"),
        )
    want, want_maps, want_page = headed_run(tmp_path, architecture, whole, "whole")
    reads = streamed.weights.layers.reads
    got, got_maps, got_page = headed_run(tmp_path, architecture, streamed, "streamed")
    batches, pages = 2, 1  # 4 sequences in batches of 3; the page walks the depth twice
    assert streamed.weights.layers.reads - reads == 3 * (batches + 2 * pages)
    assert want_maps.keys() == got_maps.keys() and len(want_maps) == 3 + 1  # + bias_norm
    for path, values in want_maps.items():
        np.testing.assert_array_equal(got_maps[path], values, err_msg=path)
    assert len(want.prediction) > 0 and "status" not in want.prediction
    for name in ("mixing", "rollout", "prediction", "check"):
        table, other = getattr(want, name), getattr(got, name)
        assert not table.empty, name
        pd.testing.assert_frame_equal(other, table, check_exact=False, rtol=1e-5, atol=1e-6)
    assert want_page.arrays.keys() == got_page.arrays.keys()
    assert "prediction/logit" in want_page.arrays
    for key, values in want_page.arrays.items():
        np.testing.assert_allclose(got_page.arrays[key], values, rtol=1e-5, atol=1e-6, err_msg=key)


def test_a_layer_handle_loads_its_layer_explicitly():
    """Issue 49, item 1: before running the module, a layer handle loads its layer by name
    (`StreamedLayers.load`), with no read of `layers[index]` kept for its side effect."""
    from types import SimpleNamespace

    from attnscope.architectures import ModelLayer

    class Layers(list):
        def __init__(self):
            super().__init__(["layer 0", "layer 1"])
            self.calls = []

        def __getitem__(self, index):
            self.calls.append(("read", index))
            return super().__getitem__(index)

        def load(self, index):
            self.calls.append(("load", index))

    layers = Layers()
    model = SimpleNamespace(config=SimpleNamespace(model_type="bert"))
    handle = ModelLayer(model, SimpleNamespace(layers=layers), 1)
    handle.architecture = SimpleNamespace(attention_output=lambda m, index, X, mask: (index, X))
    layers.calls.clear()
    assert handle.attention_output("X", None) == (1, "X")
    assert layers.calls == [("load", 1)]
