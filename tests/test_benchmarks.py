"""benchmarks/bench_flops.py: its FLOP counts on shapes counted by hand and against torch's own
FLOP counter, and a tiny run that prints a row for every step."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_flops as bf  # noqa: E402

# d 4, 2 heads sharing 1 key-value head of 2, plain FF 8, causal
SMALL = bf.Shape("small", 4, 2, 1, 2, 8, 16, gated=False, causal=True, embed_parts=1)


def test_matmul_count_by_hand():
    work = bf.matmul(2, 3, 4, batch=5)
    assert work.flops == 2 * 2 * 3 * 4 * 5
    assert work.bytes == (2 * 3 + 3 * 4 + 2 * 4) * 5 * 4


def test_forward_count_by_hand():
    # one sequence of 3: Q K V 2*3*4*(4+2+2) = 192, logits and values 2 heads x 2*3*2*3 = 72
    # each, output 2*3*4*4 = 96, FF 2*3*4*8 + 2*3*8*4 = 384: 816 per layer
    assert bf.attention_work(SMALL, 1, 3).flops == 192 + 72 + 72 + 96
    assert bf.extract_work(SMALL, 1, 3, layers=2).flops == 2 * 816


def test_js_count_by_hand():
    # 2 heads, one causal sequence of 2: 3 visible entries, 3 head pairs a <= b
    assert bf.js_work(2, 1, 2, causal=True).flops == 4 * 3 * 3 + 3 * 2 * 3


class ProductFlops(TorchDispatchMode):
    """Counts 2 m k n for every matrix product torch runs ([m, k] x [k, n], batched ones
    times their batch), whatever function or einsum reached it."""

    def __init__(self):
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        aten, packet = torch.ops.aten, func.overloadpacket
        if packet in (aten.mm, aten.bmm, aten.addmm, aten.baddbmm):
            a, b = args[:2] if packet in (aten.mm, aten.bmm) else args[1:3]
            batch = a.shape[0] if a.dim() == 3 else 1
            self.flops += 2 * batch * a.shape[-2] * a.shape[-1] * b.shape[-1]
        elif packet in (aten.mv, aten.dot, aten.addmv, aten.vdot):
            raise AssertionError(f"uncounted product {packet}")
        return func(*args, **(kwargs or {}))


BERT_LIKE = bf.Shape("bert-like", 32, 4, 4, 8, 64, 128, gated=False, causal=False, embed_parts=3)
# a gated FF wide enough that the FF split takes its queries in sub-chunks (`ff_pairs`)
WIDE_FF = bf.Shape("wide-ff", 8, 2, 1, 4, 1 << 15, 64, gated=True, causal=True, embed_parts=1)


@pytest.mark.parametrize("shape", [bf.SHAPES["tiny"], BERT_LIKE], ids=lambda s: s.name)
@pytest.mark.parametrize("step", ["norms", "mixing", "propagate", "attend", "probe"])
def test_counts_match_the_products_torch_runs(shape, step):
    """Each step's count is the FLOPs of the matrix products its call makes, counted under
    torch's dispatcher: for a decoder (grouped keys and values, gated FF, causal) and an
    encoder (every head its own keys, plain FF)."""
    steps = bf.Steps(shape, 2)
    run = steps.call(step, 16)
    with torch.no_grad(), ProductFlops() as counter:
        run()
    assert counter.flops == steps.work(step, 16).flops


def test_mixing_count_with_ff_sub_chunks():
    """At a FF wide enough for sub-chunks of queries, the causal layer skips the keys after
    each sub-chunk's last query (fewer pairs than n^2), as `ff_pairs` counts them."""
    assert bf.ff_pairs(1, 16, 16, WIDE_FF.pre, True) < 16 * 16 * 0.7
    steps = bf.Steps(WIDE_FF, 1)
    run = steps.call("mixing", 16)
    with torch.no_grad(), ProductFlops() as counter:
        run()
    assert counter.flops == steps.work("mixing", 16).flops


def test_extract_count_matches_torch_flop_counter():
    """The tiny Llama's eager forward, counted by FlopCounterMode, is extract_work's count
    (the embedding lookup and the rotary products are no matrix products)."""
    from torch.utils.flop_counter import FlopCounterMode

    steps = bf.Steps(bf.SHAPES["tiny"], 2)
    inputs = steps.inputs(3, 8)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        steps.model(**inputs)
    assert counter.get_total_flops() == bf.extract_work(bf.SHAPES["tiny"], 3, 8, 2).flops


def test_tiny_run_prints_every_step(tmp_path):
    out = tmp_path / "flops.json"
    command = [sys.executable, str(BENCH / "bench_flops.py"), "--tiny", "--layers", "1"]
    command += ["--repeats", "1", "--threads", "1", "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    table = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert [line.split("|")[1].strip() for line in table[1:]] == list(bf.STEPS)
    rows = json.loads(out.read_text())["rows"]
    assert [r["step"] for r in rows] == list(bf.STEPS)
    for row in rows:
        assert row["gflop_s"] > 0 and row["gb_s"] > 0 and row["seconds"] > 0, row
        assert row["verdict"] in ("matmul", "memory", "products", "elementwise", "python")
        assert abs(row["products"] + row["other_ops"] + row["outside"] - 1) < 1e-6
