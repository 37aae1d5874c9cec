"""Wall time and peak memory of each analysis step against the sequence length n.

A random Llama of SmolLM2-135M's sizes (width 576, 9 heads, 3 key-value heads, FF 1536,
`--layers` of its 30 layers: the cost is per layer) reads one sequence of n random pieces for
each n of `--lengths`. Each (step, n) runs in a fresh process: the model is built, the step
runs once on 16 pieces (a warm-up), the layer inputs are computed, the peak RSS is reset
(/proc/self/clear_refs), then the step runs; the process reports the step's wall time, the
RSS when it started (`base`: the model and the states) and its peak RSS (VmHWM). The growth
exponents a (time ~ n^a) and b (peak above base ~ n^b) are least-squares slopes over the
lengths run (at least two); b is also fitted over the lengths whose peak above base is at least
NOISE_MIB only (below it the allocator's own noise decides the figure). The column `maps`
is the peak above base in units of one layer's attention weights [H, n, n] in float32: a
step whose memory grows no faster than the maps keeps it flat. Timings on a machine shared
with other work vary by tens of per cent: state the load with any figure.

steps    extract   the model's own forward, every residual state (`residual_states`)
         norms     per layer: alpha, f(x), the attention output and the head-summed norm map
                   (`head_summed_norms` in query chunks of memory_budget_mb)
         weights   per layer: alpha and every head statistic (`sequence_statistics`)
         rotary    per layer: the rotary band statistics (`RotaryStatistics`, t_max 10)
         mixing    per layer: every whole-layer scope's map, each stage checked
                   (`layer_scope_maps`, query chunks of memory_budget_mb, closed-form FF
                   split); only for n up to `--mixing-max`
         propagate the token split carried through every layer, each stage checked
                   (`propagate`, what mixing_propagate runs per batch: chunks of input tokens
                   of memory_budget_mb where the code has them); n up to `--mixing-max`

`--allocator release` has each worker set `allocator.release_freed_memory` (every block above
128 KiB mapped on its own and returned when freed): its peaks repeat to the MiB, where under
glibc's defaults, whose mmap threshold grows with the blocks freed, the same worker's peak
varied by up to 77 MiB between runs (weights at n 2,048, width 64: 118 to 195 MiB).

`--width 256` (with `--heads 4 --ff 1024`) runs a random Llama of that width instead, all heads
with their own keys and values (the shape issue 37 measured mixing on).

Run: .venv/bin/python benchmarks/bench_length.py [--lengths 256 512 1024 2048 4096]
     [--layers 2] [--steps extract norms weights rotary mixing propagate] [--mixing-max 1024]
     [--budget 1024] [--threads 0] [--width 576 --heads 9 --kv-heads 3 --ff 1536]
     [--allocator default|release]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))

from bench_rotary import SMOLLM2  # noqa: E402  (SmolLM2-135M's sizes, one definition)

STEPS = ("extract", "norms", "weights", "rotary", "mixing", "propagate")
SCALED = ("mixing", "propagate")  # run only up to --mixing-max
T_MAX = 10  # config.yaml's analyses.position.t_max
NOISE_MIB = 64  # peaks above base below this are the allocator's noise


def status_mib(field: str) -> float:
    """A field of /proc/self/status (VmRSS, VmHWM) in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def shape(width: int, heads: int, kv_heads: int, ff: int) -> dict:
    """SmolLM2-135M's sizes, with the width, heads and FF given."""
    return SMOLLM2 | dict(
        hidden_size=width,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=ff,
    )


def worker(step: str, n: int, layers: int, budget: float, threads: int, sizes: dict) -> dict:
    """Run `step` on one random sequence of n pieces; its seconds, base and peak RSS (MiB)."""
    import torch
    from transformers import LlamaConfig, LlamaModel

    from attnscope.analyses.position.rotary import RotaryStatistics
    from attnscope.analyses.weights.statistics import sequence_statistics
    from attnscope.architectures import architecture, canonical_weights
    from attnscope.core.attention import (
        attention_output,
        attention_probs,
        value_vectors,
        visible_pairs,
    )
    from attnscope.core.checks import ResidualLog
    from attnscope.maps.head_norms import head_summed_norms
    from attnscope.maps.layer_maps import LayerBatch, layer_scope_maps
    from attnscope.maps.propagation import StageCheck, propagate

    if threads:
        torch.set_num_threads(threads)
    torch.set_grad_enabled(False)
    torch.manual_seed(0)
    config = LlamaConfig(num_hidden_layers=layers, attn_implementation="eager", **sizes)
    model = LlamaModel(config).eval()
    weights = canonical_weights(model)
    arch = architecture("llama")

    def sequence(length: int):
        ids = torch.randint(5, sizes["vocab_size"], (1, length))
        mask = torch.ones(1, length, dtype=torch.long)
        inputs = {"input_ids": ids, "attention_mask": mask}
        return inputs, mask, None if step == "extract" else arch.residual_states(model, inputs)

    def run(inputs, mask, states) -> None:
        length = mask.shape[1]
        category = torch.zeros(1, length, dtype=torch.long)
        if step == "extract":
            arch.residual_states(model, inputs)
        if step == "propagate":
            log = ResidualLog(1e-4, None)
            for event in propagate(model, weights, states.__getitem__, mask, 0, budget):
                if isinstance(event, StageCheck):
                    event.record(log, mask)
        for l, layer in enumerate(weights.layers if step not in ("extract", "propagate") else []):
            X = states[l]
            if step == "norms":
                alpha, fx = attention_probs(X, mask, layer), value_vectors(X, layer)
                attention_output(alpha, fx, layer)
                head_summed_norms(alpha, fx, budget) * visible_pairs(mask, layer.causal)
            elif step == "weights":
                sequence_statistics(attention_probs(X, mask, layer), mask, category, layer.causal)
            elif step == "rotary":
                stats = RotaryStatistics(layer, length, T_MAX)
                stats.update(X, mask)
                stats.summary()
            elif step == "mixing":
                log = ResidualLog(1e-4, None)
                at = LayerBatch(l, X, mask, states[l + 1])
                layer_scope_maps(model, weights, at, 0, log, None, budget)

    run(*sequence(16))  # warm-up: first calls load kernels, outside the measurement
    measured = sequence(n)
    Path("/proc/self/clear_refs").write_text("5")  # the peak RSS starts again from here
    base = status_mib("VmRSS")
    start = time.perf_counter()
    run(*measured)
    seconds = time.perf_counter() - start
    return {"step": step, "n": n, "seconds": seconds, "base": base, "peak": status_mib("VmHWM")}


def slope(lengths: list[int], values: list[float]) -> float:
    """The least-squares slope of log(value) on log(n)."""
    if len(lengths) < 2 or min(values) <= 0:
        return float("nan")
    return float(np.polyfit(np.log(lengths), np.log(values), 1)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS))
    parser.add_argument("--mixing-max", type=int, default=1024)
    parser.add_argument("--budget", type=float, default=1024, help="memory_budget_mb")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--width", type=int, default=SMOLLM2["hidden_size"])
    parser.add_argument("--heads", type=int, default=SMOLLM2["num_attention_heads"])
    parser.add_argument("--kv-heads", type=int, default=None, help="default: --heads, 3 at 576")
    parser.add_argument("--ff", type=int, default=SMOLLM2["intermediate_size"])
    parser.add_argument("--allocator", choices=("default", "release"), default="default")
    parser.add_argument("--worker", nargs=2, metavar=("STEP", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    smollm2 = args.width == SMOLLM2["hidden_size"]
    if args.kv_heads is None:
        args.kv_heads = SMOLLM2["num_key_value_heads"] if smollm2 else args.heads
    sizes = shape(args.width, args.heads, args.kv_heads, args.ff)
    if args.worker:
        step, n = args.worker[0], int(args.worker[1])
        if args.allocator == "release":
            from attnscope.model.allocator import release_freed_memory

            release_freed_memory()
        print(json.dumps(worker(step, n, args.layers, args.budget, args.threads, sizes)))
        return
    what = "SmolLM2-shaped" if smollm2 else f"width {args.width}, {args.heads} heads, FF {args.ff}"
    print(f"random {what} Llama, {args.layers} layers, one sequence per n, CPU")
    header = f"{'step':8} {'n':>5} {'seconds':>9} {'base MiB':>9} {'peak MiB':>9} {'above':>7}"
    print(header + f" {'maps':>6}")
    found: dict[str, list[dict]] = {}
    for step in args.steps:
        for n in args.lengths:
            if step in SCALED and n > args.mixing_max:
                continue
            command = [sys.executable, __file__, "--worker", step, str(n)]
            command += ["--layers", str(args.layers), "--budget", str(args.budget)]
            command += ["--threads", str(args.threads), "--width", str(args.width)]
            command += ["--heads", str(args.heads), "--kv-heads", str(args.kv_heads)]
            command += ["--ff", str(args.ff), "--allocator", args.allocator]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                print(f"{step:8} {n:>5} failed: {done.stderr.strip().splitlines()[-1:]}")
                continue
            row = json.loads(done.stdout.strip().splitlines()[-1])
            found.setdefault(step, []).append(row)
            above = row["peak"] - row["base"]
            maps = above / (args.heads * n * n * 4 / 2**20)
            print(
                f"{step:8} {n:>5} {row['seconds']:>9.2f} {row['base']:>9.0f} "
                f"{row['peak']:>9.0f} {above:>7.0f} {maps:>6.2f}",
                flush=True,
            )
    print("\ngrowth exponents over the lengths run: time ~ n^a, peak above base ~ n^b")
    for step, rows in found.items():
        lengths = [r["n"] for r in rows]
        a = slope(lengths, [r["seconds"] for r in rows])
        b = slope(lengths, [r["peak"] - r["base"] for r in rows])
        above = [(r["n"], r["peak"] - r["base"]) for r in rows]
        above = [(n, mib) for n, mib in above if mib >= NOISE_MIB]
        b_above = slope([n for n, _ in above], [mib for _, mib in above])
        print(
            f"{step:8} a = {a:.2f}  b = {b:.2f}  (n = {', '.join(map(str, lengths))}); "
            f"b = {b_above:.2f} over n = {', '.join(str(n) for n, _ in above)} (>= {NOISE_MIB} MiB)"
        )


if __name__ == "__main__":
    main()
