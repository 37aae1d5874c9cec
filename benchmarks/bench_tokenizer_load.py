"""Loading a dequantised model's tokenizer with its added tokens recorded, and without.

`transformers` 5 saves no `added_tokens_decoder` in tokenizer_config.json beside a
tokenizer.json, and each load then parses the whole tokenizer.json in Python to find the added
tokens again. Since this change `gguf.dequantise` records them (`gguf._record_added_tokens`).
Every job that encodes a corpus or prints pieces opens the tokenizer once. Two copies of the
folder's tokenizer files, each loaded in a fresh process:

  recorded  tokenizer_config.json with `added_tokens_decoder` (the folder as written now)
  bare      without it (as `transformers` saves it; folders dequantised before this change)

The copies alternate within each round (their order rotating). Printed: each copy's seconds
per load (`AutoTokenizer.from_pretrained`, imports left out), bare / recorded, and whether the
two tokenizers give the same pieces and the same ids on a text.

Run: .venv/bin/python benchmarks/bench_tokenizer_load.py resources/models/gemma3-270m
     [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

CHILD = """
import hashlib, json, sys, time
from transformers import AutoTokenizer

start = time.perf_counter()
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
seconds = time.perf_counter() - start
text = "The cat sat on the mat. <unk> <mask> <bos> didn't 1,234 ünïcode " * 50
pieces = tokenizer.convert_ids_to_tokens(range(len(tokenizer)))
seen = json.dumps([tokenizer(text).input_ids, pieces, tokenizer.all_special_ids])
print(json.dumps({"seconds": seconds, "sha256": hashlib.sha256(seen.encode()).hexdigest()}))
"""
COPIES = ("recorded", "bare")
FILES = ("tokenizer.json", "tokenizer_config.json", "config.json")


def run(folder: Path) -> dict:
    """One load in a fresh process: {seconds, sha256 of its ids, pieces and special ids}."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder)],
        env={**os.environ, "PYTHONPATH": str(ROOT / "scripts")},
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, help="a dequantised model folder")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from attnscope.model import gguf

    with tempfile.TemporaryDirectory() as scratch:
        copies = {name: Path(scratch) / name for name in COPIES}
        for copy in copies.values():
            copy.mkdir()
            for name in FILES:
                shutil.copy(args.folder / name, copy / name)
        gguf._record_added_tokens(copies["recorded"])
        settings_path = copies["bare"] / "tokenizer_config.json"
        settings = json.loads(settings_path.read_text())
        settings.pop("added_tokens_decoder", None)
        settings_path.write_text(json.dumps(settings, indent=2))
        seconds = {name: [] for name in COPIES}
        seen = {}
        for k in range(args.repeats):
            for name in COPIES[k % 2 :] + COPIES[: k % 2]:
                result = run(copies[name])
                seconds[name].append(result["seconds"])
                seen.setdefault(name, set()).add(result["sha256"])
                print(f"round {k + 1} {name:8s} {result['seconds']:6.2f} s", flush=True)
    ratios = [b / r for b, r in zip(seconds["bare"], seconds["recorded"], strict=True)]
    print(f"{args.folder.name}: bare / recorded {min(ratios):.2f}-{max(ratios):.2f}x")
    print(f"median seconds: recorded {statistics.median(seconds['recorded']):.2f}, "
          f"bare {statistics.median(seconds['bare']):.2f}")  # fmt: skip
    same = seen["recorded"] == seen["bare"] and len(seen["bare"]) == 1
    print("same ids, pieces and special ids:", "yes" if same else "NO")


if __name__ == "__main__":
    main()
