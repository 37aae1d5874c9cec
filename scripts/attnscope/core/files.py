"""Files written atomically and hashed: a reader never sees a half-written output.

Every output goes to `<name>.partial` first and is renamed to `<name>` only when complete;
a failed writer removes its partial file. While it writes, the writer holds an exclusive lock
(flock) on `<name>.partial.lock`. A killed one (kill -9) cannot clean up, but its lock dies
with it: `remove_stale_partials` (called from the Snakefile's onstart) removes exactly the
partials whose lock nobody holds, so a run never touches the work in progress of another run
in the same folder (Snakemake's lock lets runs with separate outputs work side by side).
Scratch files and folders, never kept (`scratch_path`, `scratch_folder`), are partials too:
held by their lock while in use, removed afterwards, and swept the same way after kill -9.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_SUFFIX = ".lock"


def _lock_path(partial: Path) -> Path:
    return partial.with_name(partial.name + LOCK_SUFFIX)


@contextmanager
def _owned(partial: Path) -> Iterator[None]:
    """Hold the lock of `partial` while the block runs; remove the lock file afterwards."""
    lock = _lock_path(partial)
    while True:
        handle = open(lock, "a")
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:  # a sweep may have removed the file between our open and our lock: lock anew
            if os.stat(lock).st_ino == os.fstat(handle.fileno()).st_ino:
                break
        except FileNotFoundError:
            pass
        handle.close()
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)
        handle.close()


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield `path`.partial to write to; rename it to `path` on success, remove it on failure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with _owned(partial):
        try:
            yield partial
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)


@contextmanager
def atomic_folder(path: str | Path) -> Iterator[Path]:
    """Yield the empty folder `path`.partial to fill; it replaces `path` (removed first) only
    on success, and is removed on failure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with _owned(partial):
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        try:
            yield partial
            shutil.rmtree(path, ignore_errors=True)
            os.replace(partial, path)
        finally:
            shutil.rmtree(partial, ignore_errors=True)


@contextmanager
def scratch_path(path: str | Path) -> Iterator[Path]:
    """Yield `path`.partial for scratch data that is never kept (a file or folder the block
    creates); it is removed when the block ends, and after kill -9 by the start-up sweep."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    with _owned(partial):
        try:
            yield partial
        finally:
            if partial.is_dir():
                shutil.rmtree(partial, ignore_errors=True)
            else:
                partial.unlink(missing_ok=True)


@contextmanager
def scratch_folder(parent: str | Path, prefix: str) -> Iterator[Path]:
    """A new empty folder `<parent>/<prefix><random>.partial` for the block's scratch files,
    removed with them when the block ends (`scratch_path`)."""
    Path(parent).mkdir(parents=True, exist_ok=True)
    with scratch_path(Path(parent) / f"{prefix}{secrets.token_hex(6)}") as folder:
        folder.mkdir()
        yield folder


def write_table(table, path: str | Path) -> None:
    """Write a tidy pandas table as TSV with a header (gzip when the name ends in .gz),
    atomically."""
    compression = "gzip" if str(path).endswith(".gz") else None
    with atomic_path(path) as partial:
        table.to_csv(partial, sep="\t", index=False, compression=compression)


def write_text(text: str, path: str | Path) -> None:
    """Write a text file atomically."""
    with atomic_path(path) as partial:
        partial.write_text(text)


def sha256_of(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def remove_stale_partials(folder: str | Path) -> list[Path]:
    """Delete every `*.partial` file or folder under `folder` (outputs being written, and
    scratch files and folders) whose writer is gone (no process holds its lock: killed with
    kill -9, or the machine went down) and return them. Partials of live writers, of this
    run or another one, are left alone."""
    found = sorted(Path(folder).rglob("*.partial")) if Path(folder).is_dir() else []
    stale = []
    for partial in found:
        if not partial.exists():  # inside a scratch folder removed just before
            continue
        lock = _lock_path(partial)
        with open(lock, "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live writer owns it
            if partial.is_dir():
                shutil.rmtree(partial, ignore_errors=True)
            else:
                partial.unlink(missing_ok=True)
            lock.unlink(missing_ok=True)
            stale.append(partial)
    return stale
