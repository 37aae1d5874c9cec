"""Damaged or half-written files are reported by name, with the fix; none is left behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnscope.architectures import MismatchedWeightsError, lm_head_kind, load_model
from attnscope.core.files import remove_stale_partials
from attnscope.core.store import DamagedStoreError, HiddenStates
from attnscope.data.datasets import DATA_FILES
from attnscope.model.sources import build_manifest
from conftest import (
    CLASSIC,
    DECODERS,
    SPECIAL_VOCAB,
    tiny_config,
    tiny_model,
    write_tiny_encoded,
    write_tiny_store,
)

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"


def truncate_to_half(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def test_truncated_hidden_states_name_the_file_and_the_fix(tmp_path):
    store, _ = write_tiny_store(tmp_path, "bert")
    with HiddenStates(store) as intact:
        assert intact.n_layers == 2
    truncate_to_half(store)
    with pytest.raises(DamagedStoreError) as caught:
        HiddenStates(store)
    assert str(store) in str(caught.value)
    assert "--forcerun extract_hidden_states" in str(caught.value)


def start_writer(out: Path, folder: bool = False) -> subprocess.Popen:
    """A process that writes `out` through atomic_path (or atomic_folder) and then sleeps
    inside the block, its partial half-written, until killed."""
    writer = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; sys.path.insert(0, sys.argv[1]);"
            "from attnscope.core.files import atomic_folder, atomic_path\n"
            "with (atomic_folder if sys.argv[3] == 'folder' else atomic_path)(sys.argv[2]) as p:\n"
            "    p.is_dir() or p.write_bytes(b'x' * 1000); print('writing', flush=True)\n"
            "    time.sleep(float(sys.argv[4]))\n"
            "print('done', flush=True)",
            str(SCRIPTS),
            str(out),
            "folder" if folder else "file",
            "900",  # killed by the test; outlives a slow start (parsing GGUF metadata)
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout.readline().strip() == "writing"
    return writer


def test_writer_killed_with_sigkill_leaves_a_partial_that_the_next_start_removes(tmp_path):
    out = tmp_path / "results" / "m" / "c" / "hidden_states.h5"
    finished = tmp_path / "results" / "m" / "c" / "encoded.h5"
    finished.parent.mkdir(parents=True)
    finished.write_bytes(b"done")
    writer = start_writer(out)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    partial = out.with_name(out.name + ".partial")
    assert partial.exists() and not out.exists()
    assert remove_stale_partials(tmp_path / "results") == [partial]
    assert not partial.exists() and finished.read_bytes() == b"done"
    assert not list((tmp_path / "results").rglob("*.lock"))


@pytest.mark.parametrize("folder", [False, True])
def test_a_live_writers_partial_survives_the_sweep(tmp_path, folder):
    """Another run's start-up sweep leaves work in progress alone (issue 19, item 3)."""
    out = tmp_path / "results" / "m" / "c" / ("views" if folder else "maps.h5")
    writer = start_writer(out, folder)
    try:
        partial = out.with_name(out.name + ".partial")
        assert remove_stale_partials(tmp_path / "results") == []
        assert partial.exists()
    finally:
        writer.kill()
        writer.wait()
    assert remove_stale_partials(tmp_path / "results") == [partial]


def test_another_run_in_the_same_folder_leaves_a_live_partial(tmp_path):
    """A second `snakemake` in the same folder (separate outputs) starts while a job of the
    first writes maps.h5.partial: the partial is still there after the second run."""
    out = tmp_path / "results" / "m" / "c" / "mixing" / "maps.h5"
    writer = start_writer(out)
    try:
        done = subprocess.run(
            [
                str(Path(sys.executable).parent / "snakemake"),
                "--snakefile",
                str(ROOT / "Snakefile"),
                "--directory",
                str(tmp_path),
                "--cores",
                "1",
                "results/software/versions.tsv",
            ],  # fmt: skip
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        assert out.with_name("maps.h5.partial").exists()
    finally:
        writer.kill()
        writer.wait()


def test_snakefile_removes_stale_partials_when_the_workflow_starts():
    snakefile = (ROOT / "Snakefile").read_text()
    onstart = snakefile.split("onstart:", 1)[1].split("\nrule ", 1)[0]
    assert 'remove_stale_partials("results")' in onstart
    assert 'remove_stale_partials("resources")' in onstart  # dequantised GGUFs (issue m14)


def test_truncated_safetensors_names_the_file(tmp_path):
    model = tiny_model("bert")
    model.save_pretrained(tmp_path, safe_serialization=True)
    weights = tmp_path / "model.safetensors"
    truncate_to_half(weights)
    with pytest.raises(OSError) as caught:
        load_model(str(tmp_path))
    assert str(weights) in str(caught.value)
    assert "acquire_model" in str(caught.value)


def test_corrupt_mirror_file_shows_the_checksum_error_on_the_console(tmp_path):
    """A rule script's error reaches the console, not only the job log."""
    relpath = next(iter(DATA_FILES))
    mirror = tmp_path / "mirror"
    (mirror / relpath).parent.mkdir(parents=True)
    (mirror / relpath).write_bytes(b"not the pinned file")
    log = tmp_path / "acquire.log"
    code = (
        "import sys, types; sys.path.insert(0, sys.argv[1])\n"
        "from attnscope.pipeline import runlog\n"
        "from attnscope.data.datasets import acquire\n"
        "sm = types.SimpleNamespace(log=[sys.argv[2]], threads=1, rule='acquire_data')\n"
        "runlog.start(sm)\n"
        "acquire(sys.argv[3], sys.argv[4], sys.argv[5])\n"
    )
    args = [str(SCRIPTS), str(log), relpath, str(tmp_path / "out"), str(mirror)]
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode != 0
    assert "ChecksumError" in done.stderr and "SHA-256" in done.stderr and relpath in done.stderr
    assert "Traceback" in log.read_text()
    assert not (tmp_path / "out").exists()


# ---- issue 35, item 1: a checkpoint that does not match config.json --------------------------

ALL_ARCHITECTURES = (*CLASSIC, *DECODERS)
LAYER = re.compile(r"(^|\.)(layer|layers|h)\.(\d+)\.")  # a tensor inside a layer


def save_with_head(folder: Path, architecture: str, head: str = "head", tied: bool = False) -> Path:
    """A tiny model of `architecture` saved as a folder: bare ("base"), or with its LM head
    ("head"; `tied`: a decoder whose head shares the word embeddings, and is not stored)."""
    from transformers import AutoModelForCausalLM

    if tied:
        config = tiny_config(architecture)
        config.tie_word_embeddings = True
        torch.manual_seed(0)
        AutoModelForCausalLM.from_config(config).save_pretrained(folder)
        return folder
    masked = architecture in ("bert", "roberta", "electra")
    kind = {"base": "base", "head": "mlm" if masked else "causal"}[head]
    tiny_model(architecture, head=kind).save_pretrained(folder)
    return folder


def rewrite_layers(folder: Path, change) -> list[str]:
    """Rewrite model.safetensors with `change(tensors)` applied; returns the names it dropped
    or added."""
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    tensors = load_file(path)
    changed = change(tensors)
    save_file(tensors, path, metadata={"format": "pt"})
    return changed


def drop_last_layer(tensors: dict) -> list[str]:
    """Remove layer 1 (the last of the tiny models' 2) from a state dict."""
    dropped = [k for k in tensors if (m := LAYER.search(k)) and m.group(3) == "1"]
    for key in dropped:
        del tensors[key]
    return dropped


def add_a_layer(tensors: dict) -> list[str]:
    """Add a layer 2 (a copy of layer 1) beyond config.json's 2 layers."""
    added = {}
    for key, value in tensors.items():
        if (m := LAYER.search(key)) and m.group(3) == "1":
            added[key[: m.start(3)] + "2" + key[m.end(3) :]] = value.clone()
    tensors.update(added)
    return sorted(added)


def routes(folder: Path):
    """(name, loader) of every way attnscope opens a checkpoint: acquisition (from the
    headers), the whole-model route and the layer-streamed one, bare and with the LM head
    where the checkpoint has one."""
    from attnscope.model.layer_stream import LayerStream

    kind = lm_head_kind(str(folder))
    (folder / "vocab.txt").write_text(SPECIAL_VOCAB)  # a tokenizer file, for acquisition
    yield "acquisition", lambda: build_manifest("m", {"source": "path", "path": str(folder)})
    yield "whole-model", lambda: load_model(str(folder))
    yield "layer-streamed", lambda: LayerStream(folder)
    if kind is not None:
        yield f"whole-model {kind}", lambda: load_model(str(folder), head=kind)
        yield f"layer-streamed {kind}", lambda: LayerStream(folder).head_model(kind)


@pytest.mark.parametrize("architecture", ALL_ARCHITECTURES)
def test_every_family_loads_cleanly_on_both_routes(tmp_path, architecture):
    """A checkpoint saved bare and one saved with its LM head pass acquisition and load on
    both routes, bare and with the head: the head's tensors beside a bare model, BERT's
    pooler absent from a masked-LM checkpoint and a tied head (GPT-2's; a decoder's with
    tie_word_embeddings) are no mismatch."""
    folders = [save_with_head(tmp_path / h, architecture, h) for h in ("base", "head")]
    if architecture in DECODERS:
        folders.append(save_with_head(tmp_path / "tied", architecture, tied=True))
        assert lm_head_kind(str(folders[-1])) == "causal"
    assert lm_head_kind(str(folders[1])) is not None
    for folder in folders:
        for route, load in routes(folder):
            try:
                load()
            except MismatchedWeightsError as error:
                pytest.fail(f"{folder.name}, {route}: {error}")


@pytest.mark.parametrize("architecture", ALL_ARCHITECTURES)
@pytest.mark.parametrize("damage", ["truncated", "extra layer"])
def test_weights_that_do_not_match_the_config_are_refused_on_both_routes(
    tmp_path, architecture, damage
):
    """config.json says 2 layers; the safetensors hold 1 (layer 1 dropped) or 3 (a layer 2
    added): acquisition and every route refuse it before running, naming tensors of that
    layer and their number, instead of drawing layer 1 at random or leaving layer 2 out
    silently."""
    folder = save_with_head(tmp_path / "model", architecture)
    names = rewrite_layers(folder, drop_last_layer if damage == "truncated" else add_a_layer)
    assert len(names) > 4
    wrong = "1" if damage == "truncated" else "2"
    said = "lacks tensors the model runs" if damage == "truncated" else "does not have"
    for route, load in routes(folder):
        with pytest.raises(MismatchedWeightsError) as caught:
            load()
        message = str(caught.value)
        assert str(folder) in message and "(2 layers)" in message and said in message, route
        shown = [n for n in message.replace(",", " ").split() if LAYER.search(n)]
        assert shown and all(LAYER.search(n).group(3) == wrong for n in shown), (route, message)
        assert "in all)" in message, (route, message)


def test_api_load_refuses_a_truncated_checkpoint(tmp_path):
    """`attnscope.load` takes the whole-model route: a missing layer stops it by name."""
    import attnscope

    folder = save_with_head(tmp_path / "model", "bert")
    (folder / "vocab.txt").write_text(SPECIAL_VOCAB)  # a tokenizer file: attnscope.load reads it
    rewrite_layers(folder, drop_last_layer)
    with pytest.raises(MismatchedWeightsError, match=r"encoder\.layer\.1\."):
        attnscope.load(folder)


# A writer of scratch data, paused inside its scratch block by a log that sleeps at its first
# line (the progress bar of extraction, the per-layer line of the others).
SCRATCH_WRITER = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
work, job = Path(sys.argv[2]), sys.argv[3]

class Sleeping:
    def info(self, *args):
        self.write("")
    def write(self, text):
        print("writing", flush=True)
        time.sleep(60)
    def flush(self):
        pass

from attnscope.core.store import HiddenStates
results = work / "results" / "m" / "c"
if job == "extraction":  # a layer subset's states pass through a scratch file
    from attnscope.model.extract import ExtractSettings, extract_streamed
    extract_streamed(work / "model", work / "encoded.h5", results / "hidden_states.h5",
                     ExtractSettings(2, layers=[2]), log=Sleeping())
elif job == "gradients":
    from attnscope.analyses.weights.settings import GradientSettings
    from attnscope.analyses.weights.streamed_backward import streamed_gradient_importance
    from attnscope.model.streamed_weights import streamed_head, streamed_model
    _, weights = streamed_model(work / "model", "cpu")
    head = streamed_head(work / "model", "causal", "cpu")
    with HiddenStates(work / "states.h5") as store:
        streamed_gradient_importance(work / "model", weights, head, store, None,
                                     GradientSettings(2, 0.3, 0), results / "weights", Sleeping())
else:  # the JS distances of the layer-streamed route
    from attnscope.analyses.weights.head_distances import attention_entries, entries_columns
    from attnscope.model.layer_walks import Batches, by_layer
    from attnscope.model.streamed_weights import streamed_model
    _, weights = streamed_model(work / "model", "cpu")
    with HiddenStates(work / "states.h5") as store:
        columns = entries_columns(store, 2, weights.causal)
        blocks = by_layer(store, weights.layers, Batches(2), attention_entries, columns,
                          results / "weights", log=Sleeping())
        next(blocks)
"""


@pytest.mark.parametrize("job", ["extraction", "gradients", "distances"])
def test_scratch_files_of_a_killed_job_are_swept_and_a_live_ones_kept(tmp_path, job):
    """Issue 35, item 18: the scratch file of a layer subset's streamed extraction and the
    scratch folders of the layer-streamed gradients and JS distances are held by their job
    while it runs (the start-up sweep leaves them) and removed by the next sweep after kill -9;
    nothing else in the results folder is touched."""
    from attnscope.model.extract import ExtractSettings, extract

    model = tiny_model("llama", head="causal", layers=3)
    model.save_pretrained(tmp_path / "model")
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "llama", batch=5, length=16)
    extract(model.base_model, encoded, tmp_path / "states.h5", ExtractSettings(batch_size=2))
    results = tmp_path / "results"
    finished = results / "m" / "c" / "weights" / "heads.tsv"
    finished.parent.mkdir(parents=True)
    finished.write_text("done")
    script = tmp_path / "writer.py"
    script.write_text(SCRATCH_WRITER)
    command = [sys.executable, str(script), str(SCRIPTS), str(tmp_path), job]
    writer = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout.readline().strip() == "writing"
        before = sorted(p for p in results.rglob("*") if p != finished)
        assert [
            p for p in before if "scratch" in p.name or p.name.startswith(("gradients-", "layer-"))
        ]
        assert remove_stale_partials(results) == []  # a live job's scratch stays
        assert sorted(p for p in results.rglob("*") if p != finished) == before
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.wait()
    swept = remove_stale_partials(results)
    assert swept and not [p for p in results.rglob("*") if p.is_file() and p != finished]
    assert finished.read_text() == "done"
