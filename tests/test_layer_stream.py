"""The layer-streamed extraction: the same store as a whole-model forward, one layer's weights
in memory at a time, read from safetensors (single, sharded, bfloat16)."""

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from attnscope.api import MINILM
from attnscope.architectures import StreamingUnavailableError
from attnscope.core.store import write_encoded
from attnscope.data.corpora import encode_corpus
from attnscope.model.extract import ExtractSettings, extract, extract_streamed
from attnscope.model.layer_stream import LayerStream, loading_route
from attnscope.model.sources import resolve_folder
from attnscope.pipeline.config_checks import ConfigError, check_models
from conftest import CLASSIC, DECODERS, SPECIAL_VOCAB, tiny_model, write_tiny_encoded

# A task head in some checkpoints, so that its tensors are skipped and the bare model's names
# are found under the task model's prefix (bert., model.); Mixtral's per-expert tensors are
# fused by the library's loader.
HEADS = {"bert": "mlm", "llama": "causal", "mixtral": "causal", "gemma2": "causal"}


def assert_same_stores(whole: Path, streamed: Path, rtol: float = 1e-5) -> None:
    """Token arrays equal; every state equal to float rounding (relative to its scale)."""
    with h5py.File(whole) as a, h5py.File(streamed) as b:
        assert sorted(a) == sorted(b) and sorted(a["hidden"]) == sorted(b["hidden"])
        for name in ("input_ids", "attention_mask", "token_type_ids", "category", "word_ids"):
            np.testing.assert_array_equal(a[name][()], b[name][()])
        for layer in a["hidden"]:
            x, y = a[f"hidden/{layer}"][()], b[f"hidden/{layer}"][()]
            assert x.dtype == y.dtype
            scale = float(np.abs(x).max())
            np.testing.assert_allclose(y, x, rtol=0, atol=rtol * scale, err_msg=f"state {layer}")
        assert a.attrs["dtype"] == b.attrs["dtype"]


def saved(tmp_path, architecture: str, **save) -> tuple[Path, torch.nn.Module]:
    model = tiny_model(architecture, head=HEADS.get(architecture, "base"))
    folder = tmp_path / f"model-{architecture}"
    model.save_pretrained(folder, **save)
    return folder, model


@pytest.mark.parametrize("architecture", [*CLASSIC, *DECODERS])
def test_streamed_store_equals_the_whole_model_store(tmp_path, architecture):
    folder, model = saved(tmp_path, architecture)
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", architecture, batch=5, length=16)
    extract(model, encoded, tmp_path / "whole.h5", ExtractSettings(batch_size=2))
    extract_streamed(folder, encoded, tmp_path / "streamed.h5", ExtractSettings(batch_size=2))
    assert_same_stores(tmp_path / "whole.h5", tmp_path / "streamed.h5")


def test_streamed_store_equals_the_whole_model_store_on_minilm(tmp_path):
    from transformers import AutoTokenizer

    from attnscope.architectures import load_model

    folder = resolve_folder("minilm", MINILM, "", Path())[0]
    texts = [
        "The cat sat on the mat.",
        ["A man is playing a guitar.", "Someone plays music."],
        "Attention heads in transformers attend to separators and to the next token.",
    ]
    corpus = encode_corpus("texts", [], AutoTokenizer.from_pretrained(folder), {"texts": texts})
    write_encoded(tmp_path / "encoded.h5", corpus)
    model = load_model(str(folder))
    extract(model, tmp_path / "encoded.h5", tmp_path / "whole.h5", ExtractSettings(batch_size=2))
    extract_streamed(
        folder, tmp_path / "encoded.h5", tmp_path / "streamed.h5", ExtractSettings(batch_size=2)
    )
    assert_same_stores(tmp_path / "whole.h5", tmp_path / "streamed.h5")


def test_sharded_bfloat16_checkpoint_streams_in_float32(tmp_path):
    """A bfloat16 checkpoint in several shards: its tensors are read shard by shard and
    computed in float32, as the whole model converted to float32 computes them."""
    model = tiny_model("llama", head="causal").to(torch.bfloat16)
    folder = tmp_path / "sharded"
    model.save_pretrained(folder, max_shard_size="20KB")
    assert (folder / "model.safetensors.index.json").is_file()
    assert len(list(folder.glob("*.safetensors"))) > 2
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "llama", batch=4, length=16)
    extract(model.float(), encoded, tmp_path / "whole.h5", ExtractSettings(batch_size=3))
    extract_streamed(folder, encoded, tmp_path / "streamed.h5", ExtractSettings(batch_size=3))
    assert_same_stores(tmp_path / "whole.h5", tmp_path / "streamed.h5")


def test_one_layers_tensors_are_read_and_held_at_a_time(tmp_path):
    folder, model = saved(tmp_path, "mixtral")
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "mixtral", batch=3, length=12)
    stream = LayerStream(folder)
    read: list[list[str]] = []
    slices = stream._slices

    def recording(keys):
        read.append(list(keys))
        return slices(keys)

    stream._slices = recording
    held: list[list[int]] = []
    run_layer = stream.layer

    def layer(number, inputs, X):
        held.append([j for j, b in enumerate(stream.blocks) if not next(b.parameters()).is_meta])
        return run_layer(number, inputs, X)

    stream.layer = layer
    with h5py.File(encoded) as f:
        ids = f["input_ids"][()]
    stream.load_embedding_rows(ids)
    assert stream.model.get_input_embeddings().weight.shape == (len(np.unique(ids)), 32)
    for number in range(stream.n_layers):
        stream.load(number)
        mask = torch.ones(1, 4, dtype=torch.long)
        stream.layer(
            number,
            {"input_ids": torch.zeros(1, 4, dtype=torch.long), "attention_mask": mask},
            torch.randn(1, 4, 32),
        )
        stream.unload(number)
    assert held == [[0], [1]]  # one layer's weights in memory during its pass
    embedding, *layers = read
    assert embedding == ["model.embed_tokens.weight"]
    for number, keys in enumerate(layers):
        assert keys and all(k.startswith(f"model.layers.{number}.") for k in keys)
    matrices = [k for k in stream.files if k.startswith("model.layers.")]
    matrices = [k for k in matrices if k not in stream.vector_keys]
    assert stream.vector_keys and matrices  # norm weights, read with the frame
    assert sum(len(k) for k in layers) == len(matrices)  # every matrix read once, none twice


def test_pytorch_pickles_cannot_stream_and_say_so(tmp_path):
    folder, model = saved(tmp_path, "gpt2")
    (folder / "model.safetensors").unlink()  # transformers 5 saves safetensors only
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    (folder / "vocab.txt").write_text(SPECIAL_VOCAB)
    with pytest.raises(StreamingUnavailableError, match="safetensors.*loading: whole-model"):
        LayerStream(folder)
    assert loading_route("auto", folder, "cpu") == "whole-model"
    config = {
        "models": {"tiny": {"source": "path", "path": str(folder)}},
        "mirror": "",
        "corpora": {},
        "loading": "layer-streamed",
    }
    with pytest.raises(ConfigError, match="loading: model 'tiny'.*safetensors"):
        check_models(config)
    check_models({**config, "loading": "auto"})


def test_the_route_auto_streams_only_a_model_larger_than_half_the_free_memory(tmp_path):
    folder, _ = saved(tmp_path, "llama")
    assert loading_route("auto", folder, "cpu") == "whole-model"  # a few kB
    assert loading_route("layer-streamed", folder, "cpu") == "layer-streamed"
    assert loading_route("whole-model", folder, "cpu") == "whole-model"


MEMORY_RUN = """
import sys
from attnscope.model.extract import ExtractSettings, {route}
{prelude}
{route}({model}, sys.argv[2], sys.argv[3], ExtractSettings(batch_size=2))
# VmHWM: this program's own peak (ru_maxrss would carry the forking test process's over exec)
status = open("/proc/self/status").read().split("VmHWM:")[1]
print(int(status.split()[0]))
"""


def peak_rss_mib(folder: Path, encoded: Path, out: Path, streamed: bool) -> float:
    """Peak RSS of a fresh process extracting `encoded` with `folder`'s model.  MiB"""
    if streamed:
        code = MEMORY_RUN.format(route="extract_streamed", prelude="", model="sys.argv[1]")
    else:
        prelude = "from attnscope.architectures import load_model\nm = load_model(sys.argv[1])"
        code = MEMORY_RUN.format(route="extract", prelude=prelude, model="m")
    run = subprocess.run(
        [sys.executable, "-c", code, str(folder), str(encoded), str(out)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(run.stdout.split()[-1]) / 1024


def test_streamed_peak_memory_does_not_grow_with_depth(tmp_path):
    """Random BERT-base-shaped checkpoints with 2 and 16 layers (0.06 and 0.45 GB of float32
    weights): the streamed extraction's peak RSS grows by less than one layer's weights from 2
    to 16 layers, the whole-model route's by more than ten layers' weights."""
    from transformers import BertConfig, BertModel

    peaks = {}
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "bert", batch=4, length=16)
    for layers in (2, 16):
        config = BertConfig(
            vocab_size=1000, hidden_size=768, num_hidden_layers=layers, intermediate_size=3072
        )
        folder = tmp_path / f"bert-{layers}"
        BertModel(config).save_pretrained(folder)
        for streamed in (True, False):
            out = tmp_path / f"{layers}-{streamed}.h5"
            peaks[layers, streamed] = peak_rss_mib(folder, encoded, out, streamed)
    layer_mib = 7.1e6 * 4 / 2**20  # one BERT-base layer's float32 weights
    assert peaks[16, True] - peaks[2, True] < layer_mib, peaks
    assert peaks[16, False] - peaks[2, False] > 10 * layer_mib, peaks


ABOVE_START_RUN = """
import sys
from pathlib import Path
from attnscope.model import allocator
from attnscope.model.extract import ExtractSettings, extract_streamed
allocator.release_freed_memory()  # as the layer-streamed jobs set it (loaded.open_model)
Path("/proc/self/clear_refs").write_text("5")  # VmHWM starts again from VmRSS
def status(field):
    return int(open("/proc/self/status").read().split(field + ":")[1].split()[0])
start = status("VmRSS")
extract_streamed(sys.argv[1], sys.argv[2], sys.argv[3], ExtractSettings(batch_size=4))
print(status("VmHWM") - start)
"""


def test_streamed_extraction_peak_above_start_does_not_grow_with_depth(tmp_path):
    """A random Llama (width 256, FF 512) with 2 and with 8 layers, 48 sequences of 128
    pieces, in a fresh process with the jobs' allocator setting: the extraction's peak above
    its start grows by less than 4 MiB. Each state's dataset is 6 MiB; with HDF5's chunk
    cache (up to 8 MiB per open dataset in HDF5 2.0) every state kept its chunks, and the
    8-layer peak was 6 states' worth (36 MiB) higher."""
    from transformers import LlamaConfig, LlamaModel

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bench_scale import write_corpus

    encoded = tmp_path / "encoded.h5"
    write_corpus(encoded, 2000, 48, 128)
    above = {}
    for layers in (2, 8):
        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=2000,
            hidden_size=256,
            num_attention_heads=4,
            intermediate_size=512,
            num_hidden_layers=layers,
        )
        folder = tmp_path / f"llama-{layers}"
        LlamaModel(config).save_pretrained(folder)
        args = [str(folder), str(encoded), str(tmp_path / f"states-{layers}.h5")]
        run = subprocess.run(
            [sys.executable, "-c", ABOVE_START_RUN, *args],
            capture_output=True,
            text=True,
            check=True,
        )
        above[layers] = int(run.stdout.split()[-1]) / 1024
    assert above[8] - above[2] < 4, above
