"""The working memory of a run's model jobs, estimated before any job and printed.

Per model and corpus, the largest job's working memory beside the model's weights (the whole
model, or one layer on the layer-streamed route) and the process (torch, the libraries:
about 0.6 GB), from config.json and the configured lengths and batch sizes. With
B sequences per batch of n pieces, H heads, L layers, width d, budget the `memory_budget_mb`
and float32 values (4 bytes), the terms are:

    attention  A = B H n^2 4   one layer's attention weights of a batch
    map        M = B n^2 4     one [B, n, n] map (the additive mask, one head's softmax)

    extract_hidden_states  2 A + M + B (L + 1) n d 4   eager scores and weights, the states
    weights_stats          A + 4 M                 alpha, its mask, one head's temporaries
    weights_distances      L A + 2 M               every layer's attention of one batch
                           (distance_batch_size; on the layer-streamed route one layer's)
    norms_compute          A + 4 M + B H n d 4 + budget       alpha, f(x), the norm chunks
    mixing_compute         A + 10 M + budget       alpha, the seven scope maps, the chunks
                           (the mixing family's batch_size)
    attend_compute         2 C n d 4, C = 2 + L (H + 1)   one sequence's split, both sides
                           (a `component_window` w > 0: C = 2 + min(L, w + 1) (H + 1))

Against `benchmarks/bench_length.py`'s measured peaks above the step's start (one sequence,
SmolLM2's shape, docs/benchmarks.md): weights_stats 744 MiB at n = 4,096 against 832
estimated, norms 1,756 against 1,937, mixing 1,400 at n = 2,048 against 1,328;
`tests/test_memory_estimate.py` measures four jobs at a small width. The weights'
gradients, the propagation (`memory_budget_mb` and per layer B n^2 float64 norms) and the
views are not estimated.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from attnscope.architectures import architecture
from attnscope.core.layer_selection import whole_model
from attnscope.pipeline.disk_estimate import corpus_readers, model_shape, readable
from attnscope.pipeline.models import local_model_config
from attnscope.pipeline.outputs import Family
from attnscope.pipeline.user_config import corpus_for_model, cut_to_context

FLOAT = 4  # bytes: the analyses decompose in float32
MB = 2**20


@dataclass(frozen=True)
class JobMemory:
    model: str
    corpus: str
    job: str
    bytes: int  # working memory beside the model's weights


def job_bytes(
    job: str, B: int, n: int, L: int, H: int, d: int, budget_mb: float, window: int = 0
) -> int:
    """The working memory of one model job (the module docstring's formulas)."""
    A, M = B * H * n * n * FLOAT, B * n * n * FLOAT
    budget = int(budget_mb * MB)
    components = 2 + (min(L, window + 1) if window else L) * (H + 1)
    return {
        "extract_hidden_states": 2 * A + M + B * (L + 1) * n * d * FLOAT,
        "weights_stats": A + 4 * M,
        "weights_distances": L * A + 2 * M,
        "norms_compute": A + 4 * M + B * H * n * d * FLOAT + budget,
        "mixing_compute": A + 10 * M + budget,
        "attend_compute": 2 * components * n * d * FLOAT,
    }[job]


def family_jobs(config: dict, family: str) -> dict[str, int]:
    """{job: sequences per batch} of the estimated jobs of one family."""
    settings, batch = config["analyses"][family], config["batch_size"]
    return {
        "weights": {
            "weights_stats": batch,
            "weights_distances": settings.get("distance_batch_size", batch),
        },
        "norms": {"norms_compute": batch},
        "mixing": {"mixing_compute": settings.get("batch_size", batch)},
        "attend": {"attend_compute": 1},
    }.get(family, {})


def estimate(config: dict, families: dict[str, Family]) -> list[JobMemory]:
    """The largest estimated job of every model with a local folder and every corpus read."""
    readers = {  # {corpus: {job: sequences per batch}}
        corpus: {job: B for f in read_by for job, B in family_jobs(config, f.name).items()}
        for corpus, read_by in corpus_readers(config, families).items()
    }
    largest = []
    for model, spec in config["models"].items():
        model_config = local_model_config(model, spec, config["mirror"])
        if model_config is None:  # a hub model still to fetch
            continue
        anatomy = architecture(model_config["model_type"])
        L, d = anatomy.dimensions(model_config)
        limit = anatomy.max_positions(model_config)
        H = model_shape(model_config, L, d).n_heads
        streamed = config["loading"] == "layer-streamed"
        for corpus, jobs in readers.items():
            n = cut_to_context(corpus_for_model(config, model, corpus), limit)["max_length"]
            jobs = {"extract_hidden_states": config["batch_size"]} | jobs
            if not whole_model(config.get("layers"), L):
                jobs.pop("weights_distances", None)  # not made for a subset of layers
            sizes = {}
            for job, B in jobs.items():
                depth = 1 if streamed and job == "weights_distances" else L
                budget = config["memory_budget_mb"]
                window = config["analyses"]["attend"].get("component_window", 0)
                sizes[job] = job_bytes(job, B, n, depth, H, d, budget, window)
            job = max(sizes, key=sizes.get)
            largest.append(JobMemory(model, corpus, job, sizes[job]))
    return largest


def available_memory() -> int | None:
    """The host's available memory in bytes (/proc/meminfo's MemAvailable; None elsewhere)."""
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
    except OSError:
        return None
    return int(fields["MemAvailable"].split()[0]) * 1024


def print_memory_estimate(
    config: dict, families: dict[str, Family], available: int | None = None, out=sys.stderr
) -> list[JobMemory]:
    """Print each model and corpus's largest job; a warning line where one would need more
    than `available` bytes (the host's available memory where None)."""
    available = available_memory() if available is None else available
    jobs = estimate(config, families)
    print("memory estimate (working memory beside the model's weights, largest job):", file=out)
    for job in jobs:
        line = f"  {job.model}/{job.corpus}: {job.job} about {readable(job.bytes)}"
        if available is not None and job.bytes > available:
            line += (
                f" - MORE than the {readable(available)} available here: lower batch_size "
                "(or the family's), max_length or memory_budget_mb"
            )
        print(line, file=out)
    return jobs
