"""Peak memory of the jobs' work over the vocabulary against V (`core.lm_head`).

A random Llama with its LM head (width `--width`, `--layers` layers, 4 heads, FF 2 x width) and
a vocabulary of V pieces (`--vocab`) reads B sequences of n random pieces (`--batch`, `--length`,
every piece real). Each (step, V) runs in a fresh process: the model and the inputs are built,
the step runs once on one sequence of 8 pieces (a warm-up), the peak RSS is reset
(/proc/self/clear_refs), then the step runs; the process reports the RSS when it started
(`base`: the model and the inputs) and its peak RSS (VmHWM), in MiB.

steps    loss        the sink card's next-token loss (`forward_from_layer.next_token_loss`)
                     on a last state X_L [B, n, d]
         loss-whole  the same loss as the code before the chunks computed it: a batch's
                     logits [B, n, V] built whole, in float64 (for the comparison)
         gradients   the whole-model route of weights_gradients on one batch
                     (`gradients.attention_gradients`: forward with the attention weights
                     kept, the loss from the unembedding's input, backward; then the
                     importance sums of every layer, `ImportanceSums.add`)
         head-backward  the layer-streamed route's first step: dL/dX_L from the loss on X_L
                     (`head_input`, `sequence_losses`, backward)

`--allocator release` (default here) has each worker set `allocator.release_freed_memory`, so
that peaks repeat to the MiB (as `bench_length.py`).

Run: .venv/bin/python benchmarks/bench_vocabulary.py [--vocab 32768 131072 262144]
     [--steps loss loss-whole gradients head-backward] [--batch 16] [--length 128]
     [--width 64] [--layers 2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))

STEPS = ("loss", "loss-whole", "gradients", "head-backward")


def status_mib(field: str) -> float:
    """A field of /proc/self/status (VmRSS, VmHWM) in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def worker(step: str, V: int, B: int, n: int, width: int, layers: int) -> dict:
    """Run `step` once on B random sequences of n pieces; base and peak RSS (MiB)."""
    import numpy as np
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from attnscope.analyses.weights.gradients import (
        ImportanceSums,
        attention_gradients,
        next_token_targets,
    )
    from attnscope.architectures import canonical_weights, prediction_head
    from attnscope.core.forward_from_layer import next_token_loss
    from attnscope.core.lm_head import head_input, sequence_losses

    torch.set_num_threads(1)
    torch.manual_seed(0)
    sizes = dict(hidden_size=width, num_attention_heads=4, num_key_value_heads=4)
    config = LlamaConfig(
        num_hidden_layers=layers, intermediate_size=2 * width, vocab_size=V,
        attn_implementation="eager", tie_word_embeddings=True, **sizes,
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    weights, head = canonical_weights(model), prediction_head(model)

    def inputs(rows: int, length: int):
        ids = torch.randint(0, V, (rows, length))
        return ids, torch.ones(rows, length, dtype=torch.long), torch.randn(rows, length, width)

    def run(ids, mask, X) -> None:
        if step == "loss":
            next_token_loss(head, weights, X, ids.numpy(), mask, len(ids))
        elif step == "loss-whole":  # the code before the chunks
            with torch.no_grad():
                logits = (head_input(head, weights.final_ln, X) @ head.W_U).double()
                torch.nn.functional.cross_entropy(
                    logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1), reduction="sum"
                )
        else:
            labels, chosen = next_token_targets(ids, mask)
            if step == "gradients":
                types = torch.zeros_like(ids)
                alphas, grads = attention_gradients(model, head, ids, mask, types, labels, chosen)
                sums = ImportanceSums(layers, causal=True)
                for l, (alpha, grad) in enumerate(zip(alphas, grads, strict=True)):
                    sums.add(l, alpha, grad, mask, types)  # every piece of category 0
            else:
                X = X.clone().requires_grad_()
                with torch.enable_grad():
                    h = head_input(head, weights.final_ln, X)
                    sequence_losses(head, h, labels, chosen).sum().backward()

    run(*inputs(1, 8))  # warm-up: first calls load kernels, outside the measurement
    measured = inputs(B, n)
    np.asarray(measured[0])
    Path("/proc/self/clear_refs").write_text("5")  # the peak RSS starts again from here
    base = status_mib("VmRSS")
    run(*measured)
    return {"step": step, "V": V, "base": base, "peak": status_mib("VmHWM")}


def measure(step: str, V: int, B: int, n: int, width: int = 64, layers: int = 2) -> dict:
    """One worker in a fresh process (the freed memory released at once)."""
    command = [sys.executable, __file__, "--worker", step, str(V), "--batch", str(B)]
    command += ["--length", str(n), "--width", str(width), "--layers", str(layers)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab", type=int, nargs="+", default=[32768, 131072, 262144])
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS))
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--worker", nargs=2, metavar=("STEP", "V"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        from attnscope.model.allocator import release_freed_memory

        release_freed_memory()
        step, V = args.worker[0], int(args.worker[1])
        print(json.dumps(worker(step, V, args.batch, args.length, args.width, args.layers)))
        return
    print(
        f"random Llama with its head, width {args.width}, {args.layers} layers, "
        f"{args.batch} x {args.length} pieces, CPU"
    )
    print(f"{'step':14} {'V':>7} {'base MiB':>9} {'peak MiB':>9} {'above':>7}")
    for step in args.steps:
        for V in args.vocab:
            row = measure(step, V, args.batch, args.length, args.width, args.layers)
            above = row["peak"] - row["base"]
            print(f"{step:14} {V:>7} {row['base']:>9.0f} {row['peak']:>9.0f} {above:>7.0f}")


if __name__ == "__main__":
    main()
