"""The memory estimate printed before any job: each job's formula against the peak memory the
real code takes (`benchmarks/bench_length.py`, `bench_vocabulary.py` and `bench_attend.py`'s
workers, a fresh process per step), and the vocabulary's memory bounded whatever V."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from attnscope.pipeline.memory_estimate import Sizes, job_bytes, vocabulary_bytes

BENCH = Path(__file__).parents[1] / "benchmarks"
SHAPE = dict(width=64, heads=4, ff=128, budget=64)  # one layer, all heads with their own keys
MIB = 2**20
sys.path.insert(0, str(BENCH))


def within_a_third(measured: float, estimate: float) -> None:
    assert 0.7 * estimate <= measured <= 1.35 * estimate, (measured, estimate)


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
    command = [sys.executable, str(BENCH / "bench_length.py"), "--worker", step, str(n)]
    command += ["--layers", "1", "--width", "64", "--heads", "4", "--kv-heads", "4"]
    command += ["--ff", "128", "--budget", "64", "--threads", "1"]
    command += ["--allocator", "release"]  # peaks that repeat (glibc's default: +-77 MiB)
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    row = json.loads(done.stdout.strip().splitlines()[-1])
    measured = row["peak"] - row["base"]  # MiB above the model and the states
    size = Sizes(1, n, 1, SHAPE["heads"], SHAPE["width"])
    within_a_third(measured, job_bytes(job, size, SHAPE["budget"]) / MIB)


@pytest.mark.parametrize(
    "step, V, B, n, layers",
    [
        ("loss", 262_144, 8, 64, 2),  # the sink card's next-token loss: the vocabulary's alone
        ("gradients", 131_072, 2, 512, 2),  # the whole model's backward: attention and loss
        ("gradients", 1000, 1, 1024, 4),  # attention alone
    ],
)
def test_the_vocabulary_jobs_estimates_are_within_a_third(step, V, B, n, layers):
    from bench_vocabulary import measure

    row = measure(step, V, B, n, width=64, layers=layers)
    measured = row["peak"] - row["base"]
    job = {"loss": "norms_sink_card", "gradients": "weights_gradients"}[step]
    size = Sizes(B, n, layers, 4, 64, V)
    estimate = job_bytes(job, size, 1024)
    if step == "loss":  # the job's control extraction is another step
        estimate = vocabulary_bytes(B * n, V)
    within_a_third(measured, estimate / MIB)


def test_the_losses_memory_does_not_grow_with_the_vocabulary():
    """8 x 64 positions over 32,768 and 262,144 pieces: the chunks' peak is the same (the
    logits built whole, as before the chunks, would take 64 MiB and 512 MiB in float32, and
    twice that in float64)."""
    from bench_vocabulary import measure

    small, large = (measure("loss", V, 8, 64) for V in (32_768, 262_144))
    above = [row["peak"] - row["base"] for row in (small, large)]
    assert above[1] <= 1.1 * above[0] + 8, above
    assert above[1] < 256, above  # MiB: under half of the float32 logits alone


def test_the_attend_estimate_is_within_a_third_of_the_measured_peak(tmp_path):
    """The attend pass over one sequence of 128 pieces of a random SmolLM2-shaped Llama of 4
    layers (`bench_attend`'s memory child, the freed memory released)."""
    from bench_attend import SHAPES, measure, name, prepare

    states = prepare(tmp_path, "smollm2", 4, 1, 128)
    result = measure("attend", tmp_path / name("smollm2", 4), states, 1, "whole-model", "release")
    shape = SHAPES["smollm2"]
    size = Sizes(1, 128, 4, shape["num_attention_heads"], shape["hidden_size"])
    within_a_third(result["peak_mib"], job_bytes("attend_compute", size, 1024) / MIB)


def test_the_budget_counts_only_what_the_queries_can_use():
    """m17: memory_budget_mb 100000 on 4 x 48 pieces adds no 100 GB: a query chunk holds at
    most all n queries."""
    size = Sizes(4, 48, 2, 4, 32)
    for job in ("norms_compute", "mixing_compute"):
        assert job_bytes(job, size, 100_000) == job_bytes(job, size, 10**9) < 10 * MIB
        assert job_bytes(job, size, 0.01) < job_bytes(job, size, 100_000)


def test_a_family_rule_without_a_memory_declaration_is_refused():
    """Every rule of a family's rules file but its local ones is declared (`Family.jobs`):
    one more rule, or one declaration fewer, stops the workflow naming what to edit; a
    declaration of a rule the file does not define is refused too."""
    from dataclasses import replace

    from attnscope.analyses.family import families
    from attnscope.analyses.job_memory import Memory
    from attnscope.pipeline.memory_estimate import UndeclaredJobError, check_declared_jobs

    declared = families()
    rules = {job: name for name, family in declared.items() for job in family.jobs}
    rules |= {rule: name for name, family in declared.items() for rule in family.localrules()}
    rules |= {"extract_hidden_states": "extract", "weights_figures": "figures"}
    check_declared_jobs(declared, rules)
    with pytest.raises(UndeclaredJobError, match=r"rules/norms\.smk: rule\(s\) norms_new have"):
        check_declared_jobs(declared, rules | {"norms_new": "norms"})
    fewer = {
        job: memory for job, memory in declared["attend"].jobs.items() if job != "attend_compute"
    }
    with pytest.raises(UndeclaredJobError, match=r"rule\(s\) attend_compute have no memory"):
        check_declared_jobs(declared | {"attend": replace(declared["attend"], jobs=fewer)}, rules)
    extra = declared["views"].jobs | {"views_gone": Memory(unestimated="a test")}
    with pytest.raises(
        UndeclaredJobError, match=r"declares the memory of views_gone, which rules/views"
    ):
        check_declared_jobs(declared | {"views": replace(declared["views"], jobs=extra)}, rules)


def test_a_memory_declaration_has_a_formula_or_says_why_not():
    from attnscope.analyses.job_memory import Memory

    with pytest.raises(ValueError, match="a formula"):
        Memory()
    with pytest.raises(ValueError, match="a formula"):
        Memory(lambda size, budget, settings: 0, unestimated="both")
    with pytest.raises(ValueError, match="not estimated: a layer shard"):
        job_bytes("norms_shard", Sizes(1, 8, 1, 1, 4), 1)
