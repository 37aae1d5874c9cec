"""Files written atomically and hashed: a reader never sees a half-written output.

Every output goes to `<name>.partial` first and is renamed to `<name>` only when complete;
a failed writer removes its partial file. A killed one (kill -9) cannot: the workflow removes
such stale partial files when it starts (`remove_stale_partials`, called from Snakefile onstart).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield `path`.partial to write to; rename it to `path` on success, remove it on failure."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
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
    partial = path.with_name(path.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    try:
        yield partial
        shutil.rmtree(path, ignore_errors=True)
        os.replace(partial, path)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


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
    """Delete every `*.partial` file under `folder` (left by writers that were killed) and
    return them. Call only when no writer runs there (Snakemake holds its directory lock)."""
    stale = sorted(Path(folder).rglob("*.partial")) if Path(folder).is_dir() else []
    for path in stale:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return stale
