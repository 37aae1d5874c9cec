"""Feed-forward split of a whole layer (Kobayashi et al. 2024): shared path integral vs per pair.

Every route attributes the FF block's output at every query i to the parts z_ij of its input
(the AttnResLn stage) with Integrated Gradients over the pre-activations (zero baseline,
midpoint rule with `--steps` points, or the closed form), on one random layer (random weights,
one sequence of a random X) per model:

bert      BERT-base shapes: n 128, d 768, d_ff 3072, 12 heads; plain FF, GELU(x W_in) W_out.
llama     Llama-3.2-1B shapes: n 128, d 2048, d_ff 8192, 32 query and 8 key-value heads of 64,
          causal; gated FF, (SiLU(x W_gate) * x W_in) W_out (`gated_split`).

Routes:

obvious   per token pair (i, j): query i's IG path integral evaluated for this pair alone (one
          batched forward and backward over the m path points, as captum's
          IntegratedGradients does for one input: U(t) = tU for plain, G(t) = tG and U(t) = tU
          for gated), then the pair's part through W_in (and W_gate), times the coefficients,
          through W_out. Timed on `--pairs` pairs and extrapolated linearly to all n^2 pairs
          (every pair costs the same); its result is compared with every route's on those
          pairs (pairs with j <= i in a causal layer, the others being zero).
parts     layer_decomposition.feed_forward_parts without the head factors: the path integral
          once per query token, shared by every key j; z_ij W_pre and the product with W_post
          as batched matrix products over chunks of queries (no [n, n, d_ff] tensor). The
          route before the head factors, kept as the ablation.
factored  the same with the head factors (attnscope's route): z_ij W_pre mixed from W_pre
          applied to the H n head vectors, n^2 H d_ff instead of n^2 d d_ff multiply-adds.
closed    factored with `ig_steps = 0` (closed-form integrals, exact completeness); it differs
          from the obvious route by the midpoint rule's error, not by rounding.

Each attnscope route is timed `--repeats` times (median), in one run with the obvious route.
Peak memory: the rise of the process's peak RSS (VmHWM, reset through /proc/self/clear_refs)
over its RSS before one call of the factored route.

Run: .venv/bin/python benchmarks/bench_mixing.py [--model {bert,llama}] [--steps 50]
     [--pairs 128] [--repeats 5] [--n 128]   (without --model: both, one table each)
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from attnscope.architectures import canonical_weights  # noqa: E402
from attnscope.maps.layer_decomposition import (  # noqa: E402
    LayerInput,
    factored_stages,
    feed_forward_parts,
)

SHAPES = {
    "bert": "BERT-base layer shapes: n {n}, d 768, d_ff 3072, 12 heads",
    "llama": "Llama-3.2-1B layer shapes: n {n}, d 2048, d_ff 8192 (gated, SiLU), "
    "32 query / 8 key-value heads, causal",
}


def random_model(name: str):
    """A 1-layer `transformers` model with random weights at the shapes of `name`."""
    if name == "bert":
        from transformers import BertConfig, BertModel

        return BertModel(BertConfig(num_hidden_layers=1, attn_implementation="eager"))
    from transformers import LlamaConfig, LlamaModel

    config = LlamaConfig(
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=1,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        hidden_act="silu",
        vocab_size=256,  # the embeddings are never used: X is given
        attn_implementation="eager",
    )
    return LlamaModel(config)


def ff_input_parts(name: str, n: int, seed: int = 0):
    """A random layer and its AttnResLn stage (what the FF block reads): parts [1, n, n, d],
    bias [1, n, d] and the parts' factored form."""
    torch.manual_seed(seed)
    model = random_model(name).eval()
    layer = canonical_weights(model).layers[0]
    X = torch.randn(1, n, model.config.hidden_size)
    mask = torch.ones(1, n, dtype=torch.long)
    with torch.no_grad():
        for stage in factored_stages(LayerInput(X, mask, layer)):
            if stage.scope == "AttnResLn":
                return layer, stage.parts.clone(), stage.bias.clone(), stage.factors
    raise AssertionError("no AttnResLn stage")


def obvious_pair(layer, parts, bias, i: int, j: int, steps: int) -> torch.Tensor:
    """The FF part of key j at query i, path integral evaluated for this pair alone.  [d]"""
    ff = layer.ff
    h = parts[0, i].sum(0) + bias[0, i]  # query i's FF input
    z = parts[0, i, j]
    alphas = (torch.arange(steps, dtype=h.dtype) + 0.5) / steps
    U = h @ ff.W_in + ff.b_in  # [d_ff]
    path_U = (alphas[:, None] * U).requires_grad_(True)  # [m, d_ff]
    if not ff.gated:
        (grad_U,) = torch.autograd.grad(ff.activation(path_U).sum(), path_U)
        return ((z @ ff.W_in) * grad_U.mean(0)) @ ff.W_out
    G = h @ ff.W_gate + ff.b_gate
    path_G = (alphas[:, None] * G).requires_grad_(True)
    output = (ff.activation(path_G) * path_U).sum()
    grad_G, grad_U = torch.autograd.grad(output, (path_G, path_U))
    c_gate, c_in = grad_G.mean(0), grad_U.mean(0)  # U int t act'(tG) dt, int act(tG) dt
    return ((z @ ff.W_gate) * c_gate + (z @ ff.W_in) * c_in) @ ff.W_out


def sample_pairs(n: int, count: int, causal: bool) -> list[tuple[int, int]]:
    """`count` random (query i, key j) pairs; j <= i when the layer is causal."""
    generator = torch.Generator().manual_seed(0)
    chosen = torch.randint(0, n, (count, 2), generator=generator).tolist()
    return [(max(i, j), min(i, j)) if causal else (i, j) for i, j in chosen]


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


def benchmark(name: str, args) -> None:
    """Time every route on one random layer of model `name` and print its table."""
    layer, parts, bias, factors = ff_input_parts(name, args.n)
    n, m = args.n, args.steps
    routes = {
        f"parts ({m} steps)": lambda: feed_forward_parts(parts, bias, layer, m),
        f"factored ({m} steps)": lambda: feed_forward_parts(parts, bias, layer, m, factors),
        "closed (factored, ig_steps 0)": lambda: feed_forward_parts(parts, bias, layer, 0, factors),
    }
    pairs = sample_pairs(n, args.pairs, layer.causal)
    with torch.no_grad():
        peak = peak_rise_mib(routes[f"factored ({m} steps)"])
        seconds = {route: median_seconds(run, args.repeats) for route, run in routes.items()}
        on_pairs = {}
        for route, run in routes.items():
            out, _, _ = run()
            on_pairs[route] = torch.stack([out[0, i, j] for i, j in pairs])
            del out
    start = time.perf_counter()
    obvious = torch.stack([obvious_pair(layer, parts, bias, i, j, m) for i, j in pairs])
    obvious_pairs_s = time.perf_counter() - start
    obvious_s = obvious_pairs_s * n * n / args.pairs
    print(f"== {name}: {SHAPES[name].format(n=n)}; IG steps {m} (midpoint)")
    print(f"obvious (per pair, {m} steps): {obvious_pairs_s:.2f} s for {args.pairs} pairs")
    print(f"  -> extrapolated to {n * n} pairs: {obvious_s:.1f} s")
    if layer.causal:
        causal_s = obvious_s * (n + 1) / (2 * n)
        print(f"     (the {n * (n + 1) // 2} pairs with j <= i alone: {causal_s:.1f} s)")
    for route, s in seconds.items():
        print(f"{route}: {s:.3f} s (median of {args.repeats}), obvious / this {obvious_s / s:.1f}x")
    print(f"peak memory of the factored route: +{peak:.0f} MiB")
    print(f"largest |obvious - route| / largest |obvious| on the {args.pairs} timed pairs:")
    scale = obvious.abs().max()
    for route, values in on_pairs.items():
        print(f"  {route}: {float((obvious - values).abs().max() / scale):.2g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(SHAPES), help="one model (default: both)")
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--pairs", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    for name in [args.model] if args.model else list(SHAPES):
        benchmark(name, args)


if __name__ == "__main__":
    main()
