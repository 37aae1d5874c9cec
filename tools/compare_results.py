"""Compare two results folders: every table byte for byte, every HDF5 dataset value for value.

Usage: python tools/compare_results.py BEFORE AFTER
TSVs compare as bytes (gzip-compressed ones after decompression: the gzip header holds a
time stamp), JSON manifests as parsed objects, HDF5 files dataset by dataset (NaN equals NaN)
with their attributes. Figures, logs and benchmarks are skipped. Prints one line per file
that differs or exists on one side only, and exits 1 if there is any.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

import h5py
import numpy as np

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


def h5_differences(a: Path, b: Path) -> list[str]:
    found = []
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        names_a, names_b = [], []
        fa.visititems(lambda n, o: names_a.append(n) if isinstance(o, h5py.Dataset) else None)
        fb.visititems(lambda n, o: names_b.append(n) if isinstance(o, h5py.Dataset) else None)
        if sorted(names_a) != sorted(names_b):
            found.append(f"datasets differ: {sorted(set(names_a) ^ set(names_b))}")
        for name in sorted(set(names_a) & set(names_b)):
            x, y = fa[name][()], fb[name][()]
            equal = x.shape == y.shape and (
                np.array_equal(x, y, equal_nan=True)
                if x.dtype.kind == "f"
                else np.array_equal(x, y)
            )
            if not equal:
                found.append(f"dataset {name} differs")
        if {k: str(v) for k, v in fa.attrs.items()} != {k: str(v) for k, v in fb.attrs.items()}:
            found.append("file attributes differ")
    return found


def differences(a: Path, b: Path) -> list[str]:
    if a.suffix == ".h5":
        return h5_differences(a, b)
    if a.suffix == ".json":
        return [] if json.loads(a.read_text()) == json.loads(b.read_text()) else ["JSON differs"]
    if a.suffix == ".gz":
        return [] if gzip.open(a).read() == gzip.open(b).read() else ["content differs"]
    return [] if a.read_bytes() == b.read_bytes() else ["bytes differ"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    args = parser.parse_args()
    before, after = compared_files(args.before), compared_files(args.after)
    report = [f"{p}: only in {args.before}" for p in sorted(before - after)]
    report += [f"{p}: only in {args.after}" for p in sorted(after - before)]
    same = sorted(before & after)
    for path in same:
        report += [f"{path}: {d}" for d in differences(args.before / path, args.after / path)]
    print("\n".join(report))
    print(f"{len(same)} files in both, {len(report)} differences")
    return int(bool(report))


if __name__ == "__main__":
    sys.exit(main())
