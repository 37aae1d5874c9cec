"""How long writing an extraction's bytes into fresh page cache takes, warm and after idling.

Writes `--gb` GB (default 1.36, the float32 states of 992 wiki sequences with MiniLM) to a new
file with plain `write` calls and deletes it, several times: right after the previous write, then
after `--idle` seconds of sleep. On a virtual machine that hands freed memory back to its host,
the writes after a pause are several times slower; the plain forward loops that bench_extract.py
runs between two extractions are such a pause. No HDF5, no model: the cost of the bytes alone.

Run: .venv/bin/python benchmarks/bench_page_cache.py [--gb 1.36] [--idle 10 30] [--dir /tmp]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np


def write_seconds(folder: str, block: np.ndarray, blocks: int) -> float:
    """Write `blocks` copies of `block` to a new file in `folder`, delete it; the seconds taken."""
    with tempfile.NamedTemporaryFile(dir=folder, delete=False) as handle:
        start = time.perf_counter()
        for _ in range(blocks):
            handle.write(block.data)
        seconds = time.perf_counter() - start
    os.unlink(handle.name)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.36)
    parser.add_argument("--idle", type=float, nargs="+", default=[10, 30])
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    blocks = 8
    block = np.random.default_rng(0).standard_normal(
        int(args.gb * 1e9) // 4 // blocks, dtype=np.float32
    )
    print(f"{blocks * block.nbytes / 1e9:.2f} GB into {args.dir}")
    print(f"first write of the process: {write_seconds(args.dir, block, blocks):.2f} s")
    for _ in range(2):
        print(f"right after the previous one: {write_seconds(args.dir, block, blocks):.2f} s")
    for idle in args.idle:
        time.sleep(idle)
        print(f"after {idle:g} s idle: {write_seconds(args.dir, block, blocks):.2f} s")
        print(f"right after the previous one: {write_seconds(args.dir, block, blocks):.2f} s")


if __name__ == "__main__":
    main()
