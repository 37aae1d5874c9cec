"""The decomposition carried through the whole depth against the per-layer decomposition.

One random BERT-base-shaped model (12 layers, d 768, 12 heads, d_ff 3072, random weights: they
cost what real ones do) and one sequence of `--n` random pieces. Both routes decompose every
layer with the same stages and check every stage against the real module output, as the
workflow's rules do:

per-layer   `corpus.layer_scope_maps` per layer: the parts of X_l are its own tokens, with the
            head-factored FF route (what `mixing_compute` runs)
propagated  `propagation.propagate`: the token split carried from the embeddings through every
            layer, [n, n, d] parts in and out of every layer (what `mixing_propagate` runs)

Each route is timed `--repeats` times (median), both in one run; peak memory is the rise of
the process's peak RSS (VmHWM, reset through /proc/self/clear_refs) over its RSS before one
call of the route.

Run: .venv/bin/python benchmarks/bench_propagation.py [--n 128] [--layers 12] [--repeats 3]
     [--device cpu]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_mixing import median_seconds, peak_rise_mib  # noqa: E402

from attnscope.architectures import architecture, canonical_weights  # noqa: E402
from attnscope.core.checks import ResidualLog  # noqa: E402
from attnscope.maps.layer_maps import LayerBatch, layer_scope_maps  # noqa: E402
from attnscope.maps.propagation import StageCheck, propagate  # noqa: E402


def random_bert(layers: int, device: str):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(num_hidden_layers=layers, attn_implementation="eager")
    return BertModel(config).to(device).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    model = random_bert(args.layers, args.device)
    weights = canonical_weights(model)
    arch = architecture(model.config.model_type)
    ids = torch.randint(1000, 20000, (1, args.n), device=args.device)
    mask = torch.ones_like(ids)
    states = arch.residual_states(model, {"input_ids": ids, "attention_mask": mask})

    def per_layer():
        log = ResidualLog(1e-4, None)
        with torch.no_grad():
            for l in range(weights.n_layers):
                at = LayerBatch(l, states[l], mask, states[l + 1])
                layer_scope_maps(model, weights, at, 0, log)

    def propagated():
        log = ResidualLog(1e-4, None)
        with torch.no_grad():
            for event in propagate(model, weights, lambda l: states[l], mask):
                if isinstance(event, StageCheck):
                    event.record(log, mask)

    print(
        f"BERT-base shapes: {args.layers} layers, n {args.n}, d 768, d_ff 3072, 12 heads, "
        f"one sequence, device {args.device}, threads {torch.get_num_threads()}"
    )
    print("| route | time (median) | peak RSS rise | vs per-layer |")
    print("|---|---|---|---|")
    base = None
    for name, run in (("per-layer", per_layer), ("propagated", propagated)):
        peak = peak_rise_mib(run)
        seconds = median_seconds(run, args.repeats)
        base = base or seconds
        print(f"| {name} | {seconds:.2f} s | {peak:.0f} MiB | {seconds / base:.2f}x |")


if __name__ == "__main__":
    main()
