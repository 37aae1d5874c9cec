"""Feed-forward split of a whole layer (Kobayashi et al. 2024): shared path integral vs per pair.

Every route attributes the FF block's output at every query i to the parts z_ij of its input
(the AttnResLn stage) with Integrated Gradients over the pre-activation (zero baseline, midpoint
rule with `--steps` points, or the closed form), at BERT-base layer shapes (n 128, d 768,
d_ff 3072, 12 heads, random weights, one sequence of a random X):

obvious   per token pair (i, j): the pair's part through W_in, the IG path integral of query i
          evaluated on its own (one batched forward and backward over the m path points, as
          captum's IntegratedGradients does for one input), the product through W_out. Timed on
          `--pairs` pairs and extrapolated linearly to all n^2 pairs (every pair costs the
          same); its result is compared with attnscope's on those pairs.
parts     layer_decomposition.feed_forward_parts without the head factors: the path integral
          once per query token, shared by every key j; z_ij W_in and the product with W_out as
          batched matrix products over chunks of queries (no [n, n, d_ff] tensor). The route
          before the head factors, kept as the ablation.
factored  the same with the head factors (attnscope's route): z_ij W_in mixed from W_in applied
          to the H n head vectors, n^2 H d_ff instead of n^2 d d_ff multiply-adds.
closed    factored with `ig_steps = 0` (g(U)/U, exact completeness).

Each attnscope route is timed `--repeats` times (median), in one run with the obvious route.
Peak memory: the rise of the process's peak RSS (VmHWM, reset through /proc/self/clear_refs)
over its RSS before one call of the factored route.

Run: .venv/bin/python benchmarks/bench_mixing.py [--steps 50] [--pairs 128] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from attnscope.analyses.mixing.layer_decomposition import (  # noqa: E402
    feed_forward_parts,
    layer_stages,
)
from attnscope.architectures import canonical_weights  # noqa: E402


def ff_input_parts(n: int, seed: int = 0):
    """A random BERT-base layer and its AttnResLn stage: parts [1, n, n, 768], bias [1, n, 768]
    and the parts' factored form."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(num_hidden_layers=1, attn_implementation="eager")
    layer = canonical_weights(BertModel(config).eval()).layers[0]
    X = torch.randn(1, n, config.hidden_size)
    mask = torch.ones(1, n, dtype=torch.long)
    with torch.no_grad():
        for stage in layer_stages(X, mask, layer):
            if stage.scope == "AttnResLn":
                return layer, stage.parts.clone(), stage.bias.clone(), stage.factors
    raise AssertionError("no AttnResLn stage")


def obvious_pair(layer, parts, bias, i: int, j: int, steps: int) -> torch.Tensor:
    """The FF part of key j at query i, path integral evaluated for this pair alone.  [d]"""
    U = parts[0, i].sum(0) @ layer.W_in + bias[0, i] @ layer.W_in + layer.b_in  # [d_ff]
    alphas = (torch.arange(steps, dtype=U.dtype) + 0.5) / steps
    path = (alphas[:, None] * U).requires_grad_(True)  # [m, d_ff]
    (grad,) = torch.autograd.grad(layer.activation(path).sum(), path)
    c = grad.mean(0)
    u = parts[0, i, j] @ layer.W_in
    return (u * c) @ layer.W_out


def peak_rise_mib(run) -> float:
    def kib(field):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
        raise KeyError(field)

    Path("/proc/self/clear_refs").write_text("5")
    before = kib("VmRSS")
    run()
    return (kib("VmHWM") - before) / 1024


def median_seconds(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--pairs", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    layer, parts, bias, factors = ff_input_parts(args.n)
    n, m = args.n, args.steps
    routes = {
        f"parts ({m} steps)": lambda: feed_forward_parts(parts, bias, layer, m),
        f"factored ({m} steps)": lambda: feed_forward_parts(parts, bias, layer, m, factors),
        "closed (factored, ig_steps 0)": lambda: feed_forward_parts(parts, bias, layer, 0, factors),
    }
    with torch.no_grad():
        peak = peak_rise_mib(routes[f"factored ({m} steps)"])
        seconds = {name: median_seconds(run, args.repeats) for name, run in routes.items()}
        factored, _, _ = routes[f"factored ({m} steps)"]()
        plain, _, _ = routes[f"parts ({m} steps)"]()
    generator = torch.Generator().manual_seed(0)
    chosen = torch.randint(0, n, (args.pairs, 2), generator=generator).tolist()
    start = time.perf_counter()
    obvious = [obvious_pair(layer, parts, bias, i, j, m) for i, j in chosen]
    obvious_pairs_s = time.perf_counter() - start
    obvious_s = obvious_pairs_s * n * n / args.pairs
    reference = torch.stack([factored[0, i, j] for i, j in chosen])
    on_pairs = float((torch.stack(obvious).detach() - reference).abs().max())
    routes_apart = float((factored - plain).abs().max() / plain.abs().max())
    print(f"BERT-base layer shapes: n {n}, d 768, d_ff 3072; IG steps {m} (midpoint)")
    print(f"obvious (per pair, {m} steps): {obvious_pairs_s:.2f} s for {args.pairs} pairs")
    print(f"  -> extrapolated to {n * n} pairs: {obvious_s:.1f} s")
    for name, s in seconds.items():
        print(f"{name}: {s:.3f} s (median of {args.repeats}), {obvious_s / s:.0f}x faster")
    print(f"peak memory of the factored route: +{peak:.0f} MiB")
    print(f"largest |difference| obvious vs factored on the timed pairs: {on_pairs:.2g}")
    print(f"factored vs parts route, largest difference / largest value: {routes_apart:.2g}")


if __name__ == "__main__":
    main()
