"""Time the batched JS head distances against per-sequence NumPy loops on the same maps.

Run from the repository root:  .venv/bin/python benchmarks/bench_js.py
Inputs: random Dirichlet attention rows in the MiniLM shape (6 layers x 12 heads, n = 128),
a few sequences, no padding, float32 like the workflow's maps. Three implementations:
  clark      the straightforward loop (the primary baseline): per sequence and head, that head's
             smoothed maps [1, n, n] against all heads' [G, n, n] at once, every ordered pair;
  optimised  per sequence, per unordered head pair a < b, vectorised over the n x n entries;
  batched    attnscope's `js_sums(smoothed_entries(...))`, as the workflow calls it per batch.
The runs are interleaved so all see the same machine load; the script prints median times, the
median of the per-round speed ratios and each baseline's largest difference from `batched`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from attnscope.analyses.weights.head_distances import JS_SMOOTHING, js_sums, smoothed_entries  # noqa: E402


def clark_loop(maps: np.ndarray) -> np.ndarray:
    """Per sequence and head a: JS of a's rows with every head's rows, all ordered pairs.

    maps [N, G, n, n] (sequence, head, query, key) -> [G, G] summed distances.
    """
    N, G, n, _ = maps.shape
    D = np.zeros((G, G))
    for s in range(N):
        P = JS_SMOOTHING / n + (1 - JS_SMOOTHING) * maps[s]  # [G, n, n]
        for a in range(G):
            p = P[a][None]  # [1, n, n]
            m = (p + P) / 2
            js = (-p * np.log(m / p) - P * np.log(m / P)) / 2
            D[a] += js.sum(axis=(1, 2))
    return D


def optimised_loop(maps: np.ndarray) -> np.ndarray:
    """Per sequence, per unordered head pair a < b, vectorised over the rows; mirrored.

    maps [N, G, n, n] -> [G, G] summed distances.
    """
    N, G, n, _ = maps.shape
    D = np.zeros((G, G))
    for s in range(N):
        P = (1 - JS_SMOOTHING) * maps[s] + JS_SMOOTHING / n
        for a in range(G):
            for b in range(a + 1, G):
                p, q = P[a], P[b]
                m = (p + q) / 2
                js = 0.5 * (p * np.log(p / m)).sum(-1) + 0.5 * (q * np.log(q / m)).sum(-1)
                D[a, b] += js.sum()
    return D + D.T


def batched(maps: np.ndarray) -> np.ndarray:
    """attnscope's implementation on the same maps, as the workflow calls it per batch."""
    alpha = torch.from_numpy(maps).transpose(0, 1)  # [G, N, n, n]
    mask = torch.ones(maps.shape[0], maps.shape[-1], dtype=torch.long)
    return js_sums(smoothed_entries(alpha, mask, causal=False)).numpy()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--sequences", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds; medians")
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0: torch's default")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    N, G, n = args.sequences, args.layers * args.heads, args.length
    maps = rng.dirichlet(np.ones(n), size=(N, G, n)).astype(np.float32)
    pair_entries = G * (G - 1) // 2 * N * n * n
    print(
        f"maps [N, G, n, n] = [{N}, {G}, {n}, {n}] float32 ({args.layers} layers x "
        f"{args.heads} heads), {G * (G - 1) // 2} head pairs x {N * n * n} entries; "
        f"torch threads {torch.get_num_threads()} (the NumPy loops run on one core)"
    )
    functions = {"clark": clark_loop, "optimised": optimised_loop, "batched": batched}
    times = {name: [] for name in functions}
    results = {}
    for _ in range(args.repeats):
        for name, fn in functions.items():
            start = time.perf_counter()
            results[name] = fn(maps)
            times[name].append(time.perf_counter() - start)
    fast = results["batched"]
    print(f"{'':10s} {'median s':>9s} {'ns/pair-entry':>14s} {'max rel diff':>13s} {'ratio':>7s}")
    for name, t in times.items():
        error = np.abs(results[name] - fast).max() / np.abs(results[name]).max()
        ratio = np.median(np.array(t) / np.array(times["batched"]))
        median = np.median(t)
        print(
            f"{name:10s} {median:9.3f} {median / pair_entries * 1e9:14.2f} {error:13.1e} "
            f"{ratio:6.1f}x"
        )
        if not np.allclose(results[name], fast, rtol=1e-4, atol=1e-4 * np.abs(fast).max()):
            raise SystemExit(f"{name} disagrees with batched")
    print(f"{args.repeats} interleaved rounds; ratio = median over rounds of time / batched time")


if __name__ == "__main__":
    main()
