"""The memory estimate printed before any job: each job's formula against the peak memory the
real code takes (`benchmarks/bench_length.py`'s worker, a fresh process per step)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from attnscope.pipeline.memory_estimate import job_bytes

BENCH = Path(__file__).parents[1] / "benchmarks" / "bench_length.py"
SHAPE = dict(width=64, heads=4, ff=128, budget=64)  # one layer, all heads with their own keys
MIB = 2**20


@pytest.mark.parametrize(
    "step, job, n",
    [
        ("extract", "extract_hidden_states", 2048),
        ("weights", "weights_stats", 2048),
        ("norms", "norms_compute", 2048),
        ("mixing", "mixing_compute", 2048),
    ],
)
def test_the_estimate_is_within_a_third_of_the_measured_peak(step, job, n):
    command = [sys.executable, str(BENCH), "--worker", step, str(n), "--layers", "1"]
    command += ["--width", "64", "--heads", "4", "--kv-heads", "4", "--ff", "128"]
    command += ["--budget", "64", "--threads", "1"]
    command += ["--allocator", "release"]  # peaks that repeat (glibc's default: +-77 MiB)
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    row = json.loads(done.stdout.strip().splitlines()[-1])
    measured = row["peak"] - row["base"]  # MiB above the model and the states
    estimate = job_bytes(job, 1, n, 1, SHAPE["heads"], SHAPE["width"], SHAPE["budget"]) / MIB
    assert 0.7 * estimate <= measured <= 1.35 * estimate, (measured, estimate)
