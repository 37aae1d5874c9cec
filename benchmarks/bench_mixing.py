"""Feed-forward split of a whole layer (Kobayashi et al. 2024): shared path integral vs per pair.

Both routes attribute the FF block's output at every query i to the parts z_ij of its input
(the AttnResLn stage) with m-step Integrated Gradients over the pre-activation (zero baseline,
midpoint rule), at BERT-base layer shapes (n 128, d 768, d_ff 3072, 12 heads, random weights,
one sequence of a random X):

obvious  per token pair (i, j): the pair's part through W_in, the IG path integral of query i
         evaluated on its own (one batched forward and backward over the m path points, as
         captum's IntegratedGradients does for one input), the product through W_out. It is timed
         on `--pairs` pairs and extrapolated linearly to all n^2 pairs (every pair costs the
         same); its result is compared with attnscope's on those pairs.
shared   attnscope.analyses.mixing.layer_decomposition.feed_forward_parts: the path integral
         once per query token, shared by every key j; the parts through W_in and W_out as
         batched matrix products over chunks of queries (no [n, n, d_ff] tensor).
closed   the same with `ig_steps = 0` (g(U)/U, exact completeness).

Peak memory: the rise of the process's peak RSS (VmHWM, reset through /proc/self/clear_refs)
over its RSS before one call of the shared route.

Run: .venv/bin/python benchmarks/bench_mixing.py [--steps 50] [--pairs 128]
"""

from __future__ import annotations

import argparse
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
    """A random BERT-base layer and its AttnResLn parts [1, n, n, 768] and bias [1, n, 768]."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(num_hidden_layers=1, attn_implementation="eager")
    layer = canonical_weights(BertModel(config).eval()).layers[0]
    X = torch.randn(1, n, config.hidden_size)
    mask = torch.ones(1, n, dtype=torch.long)
    with torch.no_grad():
        for stage in layer_stages(X, mask, layer):
            if stage.scope == "AttnResLn":
                return layer, stage.parts.clone(), stage.bias.clone()
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--pairs", type=int, default=128)
    args = parser.parse_args()
    layer, parts, bias = ff_input_parts(args.n)
    n = args.n
    with torch.no_grad():
        peak = peak_rise_mib(lambda: feed_forward_parts(parts, bias, layer, args.steps))
        start = time.perf_counter()
        shared, _, _ = feed_forward_parts(parts, bias, layer, args.steps)
        shared_s = time.perf_counter() - start
        start = time.perf_counter()
        feed_forward_parts(parts, bias, layer, 0)
        closed_s = time.perf_counter() - start
    generator = torch.Generator().manual_seed(0)
    chosen = torch.randint(0, n, (args.pairs, 2), generator=generator).tolist()
    start = time.perf_counter()
    obvious = [obvious_pair(layer, parts, bias, i, j, args.steps) for i, j in chosen]
    obvious_pairs_s = time.perf_counter() - start
    obvious_s = obvious_pairs_s * n * n / args.pairs
    reference = torch.stack([shared[0, i, j] for i, j in chosen])
    difference = float((torch.stack(obvious).detach() - reference).abs().max())
    print(f"BERT-base layer shapes: n {n}, d 768, d_ff 3072; IG steps {args.steps} (midpoint)")
    print(f"obvious (per pair): {obvious_pairs_s:.2f} s for {args.pairs} pairs")
    print(f"  -> extrapolated to {n * n} pairs: {obvious_s:.1f} s")
    print(f"shared path integral ({args.steps} steps): {shared_s:.2f} s, peak +{peak:.0f} MiB")
    print(f"closed form (ig_steps 0): {closed_s:.2f} s")
    print(
        f"speed-up shared vs obvious: {obvious_s / shared_s:.0f}x; closed vs obvious: "
        f"{obvious_s / closed_s:.0f}x; largest difference on the timed pairs {difference:.2g}"
    )


if __name__ == "__main__":
    main()
