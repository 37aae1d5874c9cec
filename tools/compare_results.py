"""Compare two results folders: every table and every HDF5 dataset, exactly or within a
tolerance.

Usage: python tools/compare_results.py BEFORE AFTER [--rtol R] [--residual-bound B]
                                        [--shared-columns]

With --rtol 0 (the default) TSVs compare as bytes (gzip-compressed ones after decompression:
the gzip header holds a time stamp) and HDF5 datasets value for value (NaN equals NaN). With
--rtol R > 0, a float column of a TSV or a float dataset of an HDF5 file may differ by R times
its largest magnitude (docs/clusters.md's reproducibility promise across thread counts, devices and
machines); text, integer columns and the shapes must still be equal. A bfloat16 dataset (uint16
bits with the attribute `encoding = bfloat16`, see attnscope.core.store) compares as the values
its bits stand for. JSON manifests compare as parsed objects, without their files' modification
times (`mtime_ns`: a model folder dequantised or downloaded anew has new ones, the same bytes),
HDF5 attributes as text.

Check tables (`*_check.tsv`: decomposition_check, propagation_check, identity_check) record
residuals, float rounding that differs between two correct runs by far more than R of itself
(the loading routes round the prediction's `Logit` check differently). With --rtol R > 0 their
residual columns (`max_abs`, `max_rel`, `max_abs_residual`) agree where every row's relative
residual (`max_rel`, or `max_abs_residual / max_abs_value`) is within B (default 1e-4, the
default `max_rel_residual`) on both sides; their other columns (layer, stage, scale) compare
as any table's.

With --shared-columns (a newer version's tables beside an older one's, which lack its new
columns), a table compares on the columns both sides have, value by value, and each side's
columns of its own are one line (`columns only in AFTER: ...`), so that a column added on
purpose is named once and the rest still compares.

Figures, logs and benchmarks are skipped. Prints one line per file that differs, exists on one
side only or cannot be read (naming the file), and exits 1 if there is any.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import h5py
import numpy as np
import pandas as pd

SKIPPED_FOLDERS = {"figures", "logs", "benchmarks"}
SKIPPED_SUFFIXES = {".svg", ".png", ".pdf", ".html", ".log"}
CHECK_SUFFIX = "_check.tsv"
RESIDUAL_COLUMNS = ("max_abs", "max_rel", "max_abs_residual")
MTIME_KEY = "mtime_ns"  # a file's modification time in a manifest: not compared


class UnreadableError(Exception):
    """A file that its reader cannot read (truncated, not HDF5, not JSON, ...)."""


def compared_files(root: Path) -> set[Path]:
    return {
        path.relative_to(root)
        for path in root.rglob("*")
        if path.is_file()
        and not SKIPPED_FOLDERS & set(path.relative_to(root).parts)
        and path.suffix not in SKIPPED_SUFFIXES
    }


def read(path: Path, reader):
    """reader(path); an unreadable file raises UnreadableError naming it."""
    try:
        return reader(path)
    except (OSError, EOFError, ValueError) as error:  # h5py, gzip, JSON, pandas, UTF-8
        raise UnreadableError(f"{path} cannot be read ({type(error).__name__}: {error})") from error


def arrays_agree(x: np.ndarray, y: np.ndarray, rtol: float) -> bool:
    """Equal shapes and values; floats within rtol times the largest magnitude of either."""
    if x.shape != y.shape:
        return False
    if x.dtype.kind != "f" or y.dtype.kind != "f":
        return np.array_equal(x, y)
    if rtol == 0:
        return np.array_equal(x, y, equal_nan=True)
    same_nan = np.array_equal(np.isnan(x), np.isnan(y))
    finite = ~np.isnan(x)
    if not same_nan or not finite.any():
        return same_nan
    a, b = x[finite].astype(np.float64), y[finite].astype(np.float64)
    scale = max(np.abs(a).max(), np.abs(b).max())
    return bool(np.abs(a - b).max() <= rtol * scale)


def without_mtimes(value):
    """A parsed JSON value with every `mtime_ns` key left out, at any depth."""
    if isinstance(value, dict):
        return {k: without_mtimes(v) for k, v in value.items() if k != MTIME_KEY}
    if isinstance(value, list):
        return [without_mtimes(v) for v in value]
    return value


def dataset_values(dataset: h5py.Dataset) -> np.ndarray:
    """A dataset's values; bfloat16 bits (uint16, `encoding = bfloat16`) as float32."""
    values = dataset[()]
    if dataset.attrs.get("encoding") == "bfloat16":
        return (values.astype(np.uint32) << 16).view(np.float32)
    return values


def open_h5(path: Path) -> h5py.File:
    return h5py.File(path, "r")


def h5_differences(a: Path, b: Path, rtol: float) -> list[str]:
    found = []
    with read(a, open_h5) as fa, read(b, open_h5) as fb:
        names_a, names_b = [], []
        fa.visititems(lambda n, o: names_a.append(n) if isinstance(o, h5py.Dataset) else None)
        fb.visititems(lambda n, o: names_b.append(n) if isinstance(o, h5py.Dataset) else None)
        if sorted(names_a) != sorted(names_b):
            found.append(f"datasets differ: {sorted(set(names_a) ^ set(names_b))}")
        for name in sorted(set(names_a) & set(names_b)):
            if not arrays_agree(dataset_values(fa[name]), dataset_values(fb[name]), rtol):
                found.append(f"dataset {name} differs")
        if {k: str(v) for k, v in fa.attrs.items()} != {k: str(v) for k, v in fb.attrs.items()}:
            found.append("file attributes differ")
    return found


def relative_residuals(table: pd.DataFrame) -> np.ndarray:
    """Each row's relative residual in a check table: `max_rel`, or `max_abs_residual` over
    `max_abs_value` (identity_check.tsv)."""
    if "max_rel" in table:
        return table["max_rel"].to_numpy(float)
    return table["max_abs_residual"].to_numpy(float) / table["max_abs_value"].to_numpy(float)


def as_text(column: pd.Series) -> np.ndarray:
    """A column's cells as strings, an empty cell as "" (pandas' `astype(str)` keeps it a NaN,
    which equals nothing, not even itself)."""
    return column.astype(object).fillna("").astype(str).to_numpy(dtype=object)


def table_differences(
    a: Path, b: Path, rtol: float, residual_bound: float, shared_columns: bool = False
) -> list[str]:
    x, y = (read(p, lambda p: pd.read_csv(p, sep="\t")) for p in (a, b))
    found = []
    if shared_columns:
        for side, mine, other in ((a, x, y), (b, y, x)):
            own = [c for c in mine.columns if c not in other.columns]
            if own:
                found.append(f"columns only in {side}: {', '.join(own)}")
        shared = [c for c in x.columns if c in y.columns]
        x, y = x[shared], y[shared]
    if list(x.columns) != list(y.columns) or len(x) != len(y):
        return [*found, "columns or rows differ"]
    residuals = []
    if a.name.endswith(CHECK_SUFFIX) and ("max_rel" in x or "max_abs_value" in x):
        bounded = [relative_residuals(t) <= residual_bound for t in (x, y)]
        if np.all(bounded[0]) and np.all(bounded[1]):  # noise on both sides: as good as equal
            residuals = [c for c in RESIDUAL_COLUMNS if c in x]
    for column in x.columns:
        if column in residuals:
            continue
        u, v = x[column].to_numpy(), y[column].to_numpy()
        if u.dtype.kind != "f" or v.dtype.kind != "f":  # text and whole numbers: exact
            u, v = (as_text(t[column]) for t in (x, y))
        if not arrays_agree(u, v, rtol):
            found.append(f"column {column} differs")
    return found


def differences(
    a: Path, b: Path, rtol: float = 0.0, residual_bound: float = 1e-4, shared_columns=False
) -> list[str]:
    """What differs between two versions of one file; an unreadable one raises UnreadableError."""
    if a.suffix == ".h5":
        return h5_differences(a, b, rtol)
    if a.suffix == ".json":
        x, y = (read(p, lambda p: without_mtimes(json.loads(p.read_text()))) for p in (a, b))
        return [] if x == y else ["JSON differs"]
    if (rtol or shared_columns) and a.name.endswith((".tsv", ".tsv.gz")):
        return table_differences(a, b, rtol, residual_bound, shared_columns)
    if a.suffix == ".gz":
        x, y = (read(p, lambda p: gzip.open(p).read()) for p in (a, b))
        return [] if x == y else ["content differs"]
    x, y = (read(p, Path.read_bytes) for p in (a, b))
    return [] if x == y else ["bytes differ"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rtol", type=float, default=0.0, help="0: exact (default)")
    parser.add_argument(
        "--residual-bound",
        type=float,
        default=1e-4,
        help="with --rtol > 0: check tables' residuals agree when both are within it",
    )
    parser.add_argument(
        "--shared-columns",
        action="store_true",
        help="tables compare on the columns both sides have; the others are named",
    )
    args = parser.parse_args()
    before, after = compared_files(args.before), compared_files(args.after)
    report = [f"{p}: only in {args.before}" for p in sorted(before - after)]
    report += [f"{p}: only in {args.after}" for p in sorted(after - before)]
    same = sorted(before & after)
    for path in same:
        try:
            found = differences(
                args.before / path,
                args.after / path,
                args.rtol,
                args.residual_bound,
                args.shared_columns,
            )
        except UnreadableError as error:
            found = [str(error)]
        except OSError as error:  # a dataset of an HDF5 file that opened but is damaged
            found = [f"cannot be read to the end ({type(error).__name__}: {error})"]
        report += [f"{path}: {d}" for d in found]
    print("\n".join(report))
    print(f"{len(same)} files in both, {len(report)} differences")
    return int(bool(report))


if __name__ == "__main__":
    sys.exit(main())
