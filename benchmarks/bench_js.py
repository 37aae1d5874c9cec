"""Time the batched JS head distances against a plain per-sequence NumPy loop.

Run from the repository root:  .venv/bin/python benchmarks/bench_js.py
Inputs: random Dirichlet attention rows in the MiniLM shape (6 layers x 12 heads, n = 128),
a few sequences, no padding. Both implementations get the same float32 maps; the script
checks that they agree and prints the speed ratio.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from attnscope.head_distances import JS_SMOOTHING, js_sums, smoothed_entries  # noqa: E402


def numpy_loop(maps: np.ndarray) -> np.ndarray:
    """The straightforward way: per sequence, per head pair, JS of every row pair.

    maps [N, G, n, n] (sequence, head, query, key) -> [G, G] summed distances.
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
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs of each")
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0: torch's default")
    parser.add_argument(
        "--dtype",
        choices=["float32", "float64"],
        default="float32",
        help="dtype of the maps both get (the workflow's maps are float32)",
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    G, n = args.layers * args.heads, args.length
    maps = rng.dirichlet(np.ones(n), size=(args.sequences, G, n)).astype(args.dtype)
    print(
        f"{args.sequences} sequences, {args.layers} layers x {args.heads} heads, n = {n}, "
        f"{args.dtype} maps, torch threads {torch.get_num_threads()}"
    )
    times = {numpy_loop: [], batched: []}
    results = {}
    for _ in range(args.repeats):  # interleaved, so both see the same machine load
        for fn in times:
            start = time.perf_counter()
            results[fn] = fn(maps)
            times[fn].append(time.perf_counter() - start)
    t_loop, t_fast = min(times[numpy_loop]), min(times[batched])
    d_loop, d_fast = results[numpy_loop], results[batched]
    error = np.abs(d_fast - d_loop).max() / np.abs(d_loop).max()
    print(f"numpy loop   {t_loop:8.3f} s (best of {args.repeats})")
    print(f"batched      {t_fast:8.3f} s (best of {args.repeats})")
    print(f"max difference relative to the largest distance {error:.2e}")
    if not np.allclose(d_fast, d_loop, rtol=1e-4, atol=1e-4 * np.abs(d_loop).max()):
        raise SystemExit("the two implementations disagree")
    print(f"ratio {t_loop / t_fast:.1f}x")


if __name__ == "__main__":
    main()
