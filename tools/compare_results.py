"""Compare two results folders: every table and every HDF5 dataset, exactly or within a
tolerance.

Usage: python tools/compare_results.py BEFORE AFTER [--rtol R]

With --rtol 0 (the default) TSVs compare as bytes (gzip-compressed ones after decompression:
the gzip header holds a time stamp) and HDF5 datasets value for value (NaN equals NaN). With
--rtol R > 0, a float column of a TSV or a float dataset of an HDF5 file may differ by R times
its largest magnitude (the README's reproducibility promise across thread counts, devices and
machines); text, integer columns and the shapes must still be equal. JSON manifests compare as
parsed objects, HDF5 attributes as text. Figures, logs and benchmarks are skipped. Prints one
line per file that differs or exists on one side only, and exits 1 if there is any.
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


def compared_files(root: Path) -> set[Path]:
    return {
        path.relative_to(root)
        for path in root.rglob("*")
        if path.is_file()
        and not SKIPPED_FOLDERS & set(path.relative_to(root).parts)
        and path.suffix not in SKIPPED_SUFFIXES
    }


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


def h5_differences(a: Path, b: Path, rtol: float) -> list[str]:
    found = []
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        names_a, names_b = [], []
        fa.visititems(lambda n, o: names_a.append(n) if isinstance(o, h5py.Dataset) else None)
        fb.visititems(lambda n, o: names_b.append(n) if isinstance(o, h5py.Dataset) else None)
        if sorted(names_a) != sorted(names_b):
            found.append(f"datasets differ: {sorted(set(names_a) ^ set(names_b))}")
        for name in sorted(set(names_a) & set(names_b)):
            if not arrays_agree(fa[name][()], fb[name][()], rtol):
                found.append(f"dataset {name} differs")
        if {k: str(v) for k, v in fa.attrs.items()} != {k: str(v) for k, v in fb.attrs.items()}:
            found.append("file attributes differ")
    return found


def table_differences(a: Path, b: Path, rtol: float) -> list[str]:
    x, y = pd.read_csv(a, sep="\t"), pd.read_csv(b, sep="\t")
    if list(x.columns) != list(y.columns) or len(x) != len(y):
        return ["columns or rows differ"]
    found = []
    for column in x.columns:
        u, v = x[column].to_numpy(), y[column].to_numpy()
        if u.dtype.kind != "f" or v.dtype.kind != "f":  # text and whole numbers: exact
            u, v = x[column].astype(str).to_numpy(), y[column].astype(str).to_numpy()
        if not arrays_agree(u, v, rtol):
            found.append(f"column {column} differs")
    return found


def differences(a: Path, b: Path, rtol: float = 0.0) -> list[str]:
    if a.suffix == ".h5":
        return h5_differences(a, b, rtol)
    if a.suffix == ".json":
        return [] if json.loads(a.read_text()) == json.loads(b.read_text()) else ["JSON differs"]
    if rtol and a.name.endswith((".tsv", ".tsv.gz")):
        return table_differences(a, b, rtol)
    if a.suffix == ".gz":
        return [] if gzip.open(a).read() == gzip.open(b).read() else ["content differs"]
    return [] if a.read_bytes() == b.read_bytes() else ["bytes differ"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--rtol", type=float, default=0.0, help="0: exact (default)")
    args = parser.parse_args()
    before, after = compared_files(args.before), compared_files(args.after)
    report = [f"{p}: only in {args.before}" for p in sorted(before - after)]
    report += [f"{p}: only in {args.after}" for p in sorted(after - before)]
    same = sorted(before & after)
    for path in same:
        found = differences(args.before / path, args.after / path, args.rtol)
        report += [f"{path}: {d}" for d in found]
    print("\n".join(report))
    print(f"{len(same)} files in both, {len(report)} differences")
    return int(bool(report))


if __name__ == "__main__":
    sys.exit(main())
