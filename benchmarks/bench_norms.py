"""Head-summed norm maps ||sum_h alpha^h_ij f^h(x_j)||: Gram route vs the direct route.

Direct (as the original Kobayashi et al. code did): build alpha f(x) as a [B, H, n, n, d]
tensor, sum over heads, take norms. Gram (attnscope.maps.head_norms):
the H x H Gram matrix of the f^h(x_j) per token, ||sum_h a_h f_h||^2 = a^T G_j a.

Inputs: one BERT-base-sized layer with random weights (d 768, H 12, n 128, `--batch`
sequences), alpha and f(x) recomputed from a random X with attnscope.core.attention.

Peak memory: each method runs in a fresh subprocess that builds its inputs, resets the kernel's
peak-RSS counter (writing 5 to /proc/self/clear_refs resets VmHWM), reads VmRSS, runs the
method once and reads VmHWM; the peak is VmHWM - VmRSS, i.e. the extra resident memory the
computation needed on top of its inputs (torch CPU tensors are invisible to tracemalloc, not
to the kernel). Time: median wall time of `--repeats` runs after one warm-up run.

Run: .venv/bin/python benchmarks/bench_norms.py [--batch 4] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from attnscope.architectures import canonical_weights  # noqa: E402
from attnscope.core.attention import attention_probs, value_vectors  # noqa: E402
from attnscope.maps.head_norms import head_summed_norms  # noqa: E402


def direct_norms(alpha: torch.Tensor, fx: torch.Tensor) -> torch.Tensor:
    """The original route through a [B, H, n, n, d] tensor.  -> [B, n, n]"""
    weighted = alpha[..., None] * fx[:, :, None]  # [B, H, n, n, d]
    return weighted.sum(1).norm(dim=-1)


METHODS = {"gram": head_summed_norms, "direct": direct_norms}


def inputs(batch: int, n: int = 128, seed: int = 0):
    """alpha [B, 12, n, n] and f(x) [B, 12, n, 768] from a random BERT-base-sized layer."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    config = BertConfig(num_hidden_layers=1, attn_implementation="eager")  # base: 768, 12 heads
    layer = canonical_weights(BertModel(config).eval()).layers[0]
    X = torch.randn(batch, n, config.hidden_size)
    mask = torch.ones(batch, n, dtype=torch.long)
    with torch.no_grad():
        return attention_probs(X, mask, layer), value_vectors(X, layer)


def proc_status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def measure(method: str, batch: int, repeats: int) -> dict:
    """Run in a fresh process: peak extra memory of one call, then median time."""
    alpha, fx = inputs(batch)
    run = METHODS[method]
    Path("/proc/self/clear_refs").write_text("5")
    before = proc_status_kib("VmRSS")
    with torch.no_grad():
        run(alpha, fx)
    peak_mib = (proc_status_kib("VmHWM") - before) / 1024
    times = []
    with torch.no_grad():
        for _ in range(repeats):
            start = time.perf_counter()
            run(alpha, fx)
            times.append(time.perf_counter() - start)
    return {"method": method, "seconds": statistics.median(times), "peak_mib": peak_mib}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--measure", choices=METHODS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(args.measure, args.batch, args.repeats)))
        return

    alpha, fx = inputs(args.batch)
    with torch.no_grad():
        gram, direct = head_summed_norms(alpha, fx), direct_norms(alpha, fx)
    error = float(((gram - direct).abs() / direct).max())
    del alpha, fx, gram, direct
    results = {}
    for method in METHODS:
        command = [sys.executable, __file__, "--measure", method]
        command += ["--batch", str(args.batch), "--repeats", str(args.repeats)]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results[method] = json.loads(out.strip().splitlines()[-1])
    B, H, n, d = args.batch, 12, 128, 768
    print(
        f"BERT-base-sized random layer: B={B} H={H} n={n} d={d}, torch threads "
        f"{torch.get_num_threads()}, median of {args.repeats} runs"
    )
    print(f"max relative difference gram vs direct: {error:.2e}")
    print(f"direct [B,H,n,n,d] tensor alone: {B * H * n * n * d * 4 / 2**20:.0f} MiB")
    print(f"{'method':8} {'seconds':>10} {'peak MiB':>10}")
    for r in results.values():
        print(f"{r['method']:8} {r['seconds']:10.4f} {r['peak_mib']:10.1f}")
    g, dr = results["gram"], results["direct"]
    print(
        f"speed-up {dr['seconds'] / g['seconds']:.1f}x, "
        f"peak memory ratio {dr['peak_mib'] / max(g['peak_mib'], 1e-9):.1f}x"
    )


if __name__ == "__main__":
    main()
