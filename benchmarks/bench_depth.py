"""Peak memory of the layer-streamed jobs against depth: extraction, norms and mixing.

A random Llama (`--width` 1024, `--heads` 16, `--kv-heads` 8, `--ff` 4096, `--vocab`
128,256: `bench_scale`'s llama-w1024) is written at each of `--depths` layers as
`bench_scale.write_checkpoint` writes it (bfloat16, one safetensors shard per layer; or
with `--checkpoint float32` as `save_pretrained` writes it, one float32 file), with
one encoded corpus of `--sequences` random sequences of `--length` pieces. Each step runs in
a fresh process with its job's allocator settings (`allocator.keep_freed_memory`, then
`allocator.release_freed_memory` as `loaded.open_model` sets it on this route) and its job's
code (`extract_streamed`; `streamed_model` and the family's `corpus_pass`). The process
reports, in MiB:

    base    VmRSS before the step (the libraries imported)
    peak    VmHWM, the kernel's peak RSS
    anon    the largest RssAnon seen (anonymous memory: what the step allocated), sampled
            every millisecond by a thread, so a peak shorter than that can be missed
    file    the largest RssFile seen (file-backed pages: libraries, mapped checkpoint files)

and each row's growth over the first depth's. The kernel counts a mapped file's pages that
the process touched in RSS until the mapping goes, though it can drop them at will: only
`anon` growth is memory that the step holds.

Run: .venv/bin/python benchmarks/bench_depth.py [--depths 4 8 16 32] [--sequences 1]
     [--length 128] [--steps extract norms mixing] [--width 1024 --heads 16 --kv-heads 8
     --ff 4096 --vocab 128256] [--folder /tmp/attnscope-depth]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from bench_scale import LLAMA, write_corpus  # noqa: E402

STEPS = ("extract", "norms", "mixing")


def status_kib() -> dict[str, int]:
    """VmRSS, VmHWM, RssAnon and RssFile of this process.  KiB"""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            fields[name] = int(value.split()[0])
    return fields


class Sampler(threading.Thread):
    """The largest RssAnon and RssFile seen, read every `every` seconds until `stop()`."""

    def __init__(self, every: float = 0.001):
        super().__init__(daemon=True)
        self.every, self.largest, self.done = every, {"RssAnon": 0, "RssFile": 0}, False

    def run(self) -> None:
        while not self.done:
            now = status_kib()
            for name in self.largest:
                self.largest[name] = max(self.largest[name], now[name])
            time.sleep(self.every)

    def stop(self) -> dict[str, int]:
        self.done = True
        self.join()
        return self.largest


def worker(step: str, folder: str, encoded: str, states: str) -> dict:
    """Run one step as its job does; its memory figures in MiB."""
    import h5py

    from attnscope.analyses.mixing.corpus_pass import corpus_pass as mixing
    from attnscope.analyses.mixing.settings import MixingSettings
    from attnscope.analyses.norms.corpus_pass import corpus_pass as norms
    from attnscope.analyses.norms.settings import NormsSettings
    from attnscope.core.store import HiddenStates
    from attnscope.model import allocator
    from attnscope.model.extract import ExtractSettings, extract_streamed
    from attnscope.model.loaded import as_loaded
    from attnscope.model.streamed_weights import streamed_model

    allocator.keep_freed_memory()  # runlog.start
    allocator.release_freed_memory()  # loaded.open_model, layer-streamed
    Path("/proc/self/clear_refs").write_text("5")
    base = status_kib()
    sampler = Sampler()
    sampler.start()
    start = time.perf_counter()
    if step == "extract":
        extract_streamed(folder, encoded, states, ExtractSettings(batch_size=4))
    else:
        model, weights = streamed_model(folder)
        common = dict(batch_size=4, max_rel_residual=1e-3)
        with HiddenStates(states) as store, h5py.File(f"{states}-{step}.h5", "w") as maps:
            if step == "norms":
                settings = NormsSettings(spearman_sample_size=1000000, seed=0, **common)
                norms(store, as_loaded(model, weights), maps, settings)
            else:
                mixing(store, as_loaded(model, weights), maps, MixingSettings(ig_steps=0, **common))
    seconds = time.perf_counter() - start
    largest = sampler.stop()
    end = status_kib()
    mib = {
        "base": base["VmRSS"],
        "peak": end["VmHWM"],
        "anon": largest["RssAnon"],
        "file": largest["RssFile"],
        "base_anon": base["RssAnon"],
        "base_file": base["RssFile"],
    }
    return {"seconds": seconds, **{k: v / 1024 for k, v in mib.items()}}


def write_model(folder: Path, depth: int, sizes: dict, kind: str) -> None:
    """A random Llama of `sizes` at `depth` layers: `kind` bfloat16, one safetensors shard
    per layer (`bench_scale.write_checkpoint`), or float32, one file (`save_pretrained`)."""
    import bench_scale

    if (folder / "config.json").is_file():
        return
    if kind == "bfloat16":
        bench_scale.SHAPES["depth"] = dict(LLAMA, **sizes, tie_word_embeddings=True)
        bench_scale.write_checkpoint(folder, "depth", depth)
        return
    import torch
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(0)
    LlamaModel(LlamaConfig(num_hidden_layers=depth, **sizes)).save_pretrained(folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--depths", type=int, nargs="+", default=[4, 8, 16, 32])
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS))
    parser.add_argument("--sequences", type=int, default=1)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--ff", type=int, default=4096)
    parser.add_argument("--vocab", type=int, default=LLAMA["vocab_size"])
    parser.add_argument("--checkpoint", choices=("bfloat16", "float32"), default="bfloat16")
    parser.add_argument("--folder", type=Path, default=Path("/tmp/attnscope-depth"))
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker)))
        return
    sizes = dict(
        hidden_size=args.width,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        head_dim=args.width // args.heads,
        intermediate_size=args.ff,
        vocab_size=args.vocab,
    )
    print(f"random {args.checkpoint} Llama {sizes}, {args.sequences} x {args.length} pieces")
    print("step     depth  seconds  base  peak  anon  file  | growth: peak  anon  file (MiB)")
    first: dict[str, dict] = {}
    for depth in args.depths:
        name = f"w{args.width}-ff{args.ff}-v{args.vocab}-{args.checkpoint}-L{depth}"
        folder = args.folder / name
        write_model(folder, depth, sizes, args.checkpoint)
        encoded = args.folder / f"encoded-v{args.vocab}-{args.sequences}x{args.length}.h5"
        if not encoded.is_file():
            write_corpus(encoded, args.vocab, args.sequences, args.length)
        states = args.folder / f"{name}-states.h5"
        for step in ["extract", *(s for s in args.steps if s != "extract")]:
            command = [sys.executable, __file__, "--worker", step, str(folder), str(encoded)]
            done = subprocess.run([*command, str(states)], capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(done.stderr[-3000:])
            row = json.loads(done.stdout.strip().splitlines()[-1])
            if step not in args.steps:
                continue
            was = first.setdefault(step, row)
            grown = "  ".join(f"{row[k] - was[k]:+5.0f}" for k in ("peak", "anon", "file"))
            print(f"{step:8} {depth:5d} {row['seconds']:8.1f} {row['base']:5.0f} "
                  f"{row['peak']:5.0f} {row['anon']:5.0f} {row['file']:5.0f}  |  {grown}",
                  flush=True)  # fmt: skip
        for path in args.folder.glob(f"{name}-states.h5*"):
            path.unlink()


if __name__ == "__main__":
    main()
