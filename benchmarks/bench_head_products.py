"""Three products of the norms and attend passes, as attnscope computes them now and as before.

    head outputs   z^h_i = sum_j alpha^h_ij f^h(x_j) (`core.attention.head_outputs`, the norms
                   pass's sink terms and its decomposition check): now (alpha v) W_O per head,
                   n^2 d' + n d' d products; before alpha f(x), n^2 d
    head-summed    ||sum_h alpha^h_ij f^h(x_j)|| (`maps.head_norms.head_summed_norms`, the norms
                   maps, the probe's and the views' norm features): now the per-key Gram
                   matrices from f(x) laid out key by key and the quadratic form batched over
                   keys; before both as einsums over the head layout
    pair sums      the attend family's lift of every component pair (`analyses.attend.lift.
                   pair_sums`, most of `lift_sums`' time): now one [C d', n] x [n, n] product
                   per head and weighting, both sides laid out dimension by dimension once;
                   before C products [n, n] x [n, d'] (the weighting broadcast over the
                   components)

Each on random inputs at the default run's shapes (`SHAPES`: the norms pass's batch of 16 at
n = 128, its single 1,024-piece window (MiniLM: 512), and the attend family's queries and keys
by component at a model's last layer: C = the embedding parts + (L - 1)(H + 1) + the bias).
One torch thread (a model job's share of this 2-core machine); each round times both forms,
their order alternating; medians of `--repeats` rounds after a warm-up. Printed per row:
seconds before and now, before / now, and the largest difference relative to the largest
value (float32 rounding: the forms sum in other orders).

Run: .venv/bin/python benchmarks/bench_head_products.py [--repeats 5] [--steps ...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from attnscope.analyses.attend.lift import pair_sums  # noqa: E402
from attnscope.core.attention import head_outputs  # noqa: E402
from attnscope.maps.head_norms import head_summed_norms  # noqa: E402

# name: (layers, heads, d', d, attend's key weightings K; encoders see 3 more classes)
MODELS = {
    "MiniLM": (6, 12, 32, 384, 9),
    "SmolLM2": (30, 9, 64, 576, 6),
    "Gemma-3-270M": (18, 4, 256, 640, 6),
}
EMBED_PARTS = {"MiniLM": 3, "SmolLM2": 1, "Gemma-3-270M": 1}  # word, position, type / word
SHAPES = {  # step: [(model, batch, n)]
    "head outputs": [("MiniLM", 16, 128), ("SmolLM2", 16, 128), ("MiniLM", 1, 512)]
    + [("SmolLM2", 1, 1024), ("Gemma-3-270M", 1, 1024)],
    "head-summed": [("MiniLM", 16, 128), ("SmolLM2", 16, 128), ("SmolLM2", 1, 1024)],
    "pair sums": [("MiniLM", 1, 128), ("SmolLM2", 1, 128), ("Gemma-3-270M", 1, 128)],
}


def head_outputs_before(alpha, v, W_O):
    """z = alpha f(x), f(x) = v W_O per head: the form before this change."""
    return torch.einsum("bhij,bhjd->bhid", alpha, torch.einsum("bhne,hed->bhnd", v, W_O))


def head_outputs_now(alpha, v, W_O):
    """`head_outputs`, (alpha v) W_O per head, with f(x) = v W_O made beside it as the norms
    pass makes it (its norms of f(x) need it either way)."""
    torch.einsum("bhne,hed->bhnd", v, W_O)
    return head_outputs(alpha, v, SimpleNamespace(W_O=W_O))


def head_summed_before(alpha, fx):
    """The head-summed norms with the Gram matrices and the quadratic form as einsums."""
    gram = torch.einsum("bhjd,bgjd->bjhg", fx, fx).double()
    squared = (torch.einsum("bhij,bjhg->bgij", alpha.double(), gram) * alpha.double()).sum(1)
    return squared.clamp_min(0).sqrt().float()


def pair_sums_before(Q, K, W):
    """`pair_sums` with the weighting broadcast over the components: the form before."""
    H, C = Q.shape[:2]
    flat = Q.reshape(H, C, -1)
    return torch.stack(
        [flat @ (W[:, k, None] @ K).reshape(H, C, -1).transpose(1, 2) for k in range(W.shape[1])],
        1,
    )


def inputs(step: str, model: str, batch: int, n: int, generator):
    """Random inputs of one row: softmax weights, values / f(x), or Q, K by component."""
    L, H, d_head, d, K = MODELS[model]
    randn = lambda *shape: torch.randn(*shape, generator=generator)  # noqa: E731
    if step == "pair sums":
        C = EMBED_PARTS[model] + (L - 1) * (H + 1) + 1
        W = torch.softmax(randn(H, K, n, n), -1) - 1 / n
        return (randn(H, C, n, d_head), randn(H, C, n, d_head), W), f"C {C}, K {K}"
    alpha = torch.softmax(randn(batch, H, n, n), -1)
    if step == "head outputs":
        return (alpha, randn(batch, H, n, d_head), randn(H, d_head, d) / d_head**0.5), ""
    return (alpha, randn(batch, H, n, d)), ""


FORMS = {
    "head outputs": (head_outputs_before, head_outputs_now),
    "head-summed": (head_summed_before, head_summed_norms),
    "pair sums": (pair_sums_before, pair_sums),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", nargs="+", choices=list(SHAPES), default=list(SHAPES))
    args = parser.parse_args()
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    print("step          model         batch     n  shape        before s   now s  ratio  rel diff")
    for step in args.steps:
        before, now = FORMS[step]
        for model, batch, n in SHAPES[step]:
            args_, shape = inputs(step, model, batch, n, generator)
            with torch.no_grad():
                reference, result = before(*args_), now(*args_)  # warm-up, and the difference
                diff = float((result - reference).abs().max() / reference.abs().max())
                times = {before: [], now: []}
                for r in range(args.repeats):
                    for form in (before, now) if r % 2 == 0 else (now, before):
                        start = time.perf_counter()
                        form(*args_)
                        times[form].append(time.perf_counter() - start)
            t_before, t_now = (statistics.median(times[f]) for f in (before, now))
            print(
                f"{step:13s} {model:13s} {batch:5d} {n:5d}  {shape:11s} {t_before:8.3f} "
                f"{t_now:7.3f} {t_before / t_now:6.2f}  {diff:.1e}"
            )


if __name__ == "__main__":
    main()
