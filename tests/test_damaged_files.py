"""Damaged or half-written files are reported by name, with the fix; none is left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from attnscope.architectures import load_model
from attnscope.core.files import remove_stale_partials
from attnscope.core.store import DamagedStoreError, HiddenStates
from attnscope.data.datasets import DATA_FILES
from conftest import tiny_model, write_tiny_store

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
            "60",
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
