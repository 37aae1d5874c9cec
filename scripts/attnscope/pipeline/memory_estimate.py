"""The working memory of a run's model jobs, estimated before any job and printed.

Per model and corpus, the largest job's working memory beside the model's weights (the whole
model, or one layer on the layer-streamed route) and the process (torch, the libraries:
about 0.6 GB), from config.json and the configured lengths and batch sizes. With
B sequences per batch of n pieces, H heads, L layers, width d, a vocabulary of V pieces,
budget the `memory_budget_mb` and float32 values (4 bytes), the terms are:

    attention  A = B H n^2 4   one layer's attention weights of a batch
    map        M = B n^2 4     one [B, n, n] map (the additive mask, one head's softmax)
    vocabulary W = 3 min(CHUNK, P V 4)   the logits of P positions, built a chunk of at most
                   `core.lm_head.CHUNK_BYTES` (64 MiB) at a time: the chunk, its shifted
                   copy and their exponentials (the same under autograd: the backward
                   rebuilds one chunk at a time)
    budget     a query chunk of memory_budget_mb, but never more than all n queries take:
               norms min(budget, 3 B H n^2 8) (the float64 quadratic form),
               mixing min(budget, 4 B n^2 d 4) (`layer_decomposition.STAGE_COPIES` stages)

    extract_hidden_states  2 A + M + B (L + 1) n d 4   eager scores and weights, the states
    weights_stats          A + 4 M                 alpha, its mask, one head's temporaries
    weights_distances      L A + 2 M               every layer's attention of one batch
                           (distance_batch_size; on the layer-streamed route one layer's)
    weights_gradients      (2 L + 5) A + 12 L B n d 4 + W(B n)   every layer's attention and
                           its gradient kept for the backward, the layers' activations, the
                           importance sums in float64, the loss (one layer on the
                           layer-streamed route)
    norms_compute          A + 4 M + B H n d 4 + budget       alpha, f(x), the norm chunks
    norms_sink_card        max(extract_hidden_states, W(B n))   the repeated-token control's
                           forward, then the next-token loss of the massive-activation
                           intervention (a causal LM)
    mixing_compute         A + 10 M + budget       alpha, the seven scope maps, the chunks
                           (the mixing family's batch_size)
    attend_compute         5 C n d 4 + 3 H K n^2 4 + 16 MiB,   C = 2 + L (H + 1),  K = 7
                           one sequence's split, its normed copy, the queries and keys of
                           every head by component and one weighting's key difference (each
                           [C, n, d]); the K weightings of every head [H, K, n, n]; the
                           pass's fixed cost (a `component_window` w > 0:
                           C = 2 + min(L, w + 1) (H + 1))

Without a language-model head (config.json's `architectures` names none) the jobs that
touch the vocabulary have nothing to compute there: W = 0 and weights_gradients is not
counted.

Against the peaks measured above each step's start (`tests/test_memory_estimate.py`, fresh
processes, `--allocator release`): four steps of `benchmarks/bench_length.py` at a small
width, the vocabulary steps of `benchmarks/bench_vocabulary.py` (V up to 262,144) and the
attend pass of `benchmarks/bench_attend.py` (SmolLM2's shape, 4 layers), each within a third.
Not estimated: the propagation (mixing_propagate: `memory_budget_mb` and per layer B n^2
float64 norms), the views, and the sink card's intervention states (the whole corpus's
state at one layer, [N, n, d] float32, and its edited copies).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from attnscope.architectures import architecture
from attnscope.core.layer_selection import whole_model
from attnscope.core.lm_head import CHUNK_BYTES
from attnscope.model.disk_space import readable
from attnscope.model.sources import local_model_config
from attnscope.pipeline.disk_estimate import corpus_readers, model_shape
from attnscope.pipeline.outputs import Family
from attnscope.pipeline.user_config import corpus_for_model, cut_to_context

FLOAT = 4  # bytes: the analyses decompose in float32
MB = 2**20
ATTEND_WEIGHTINGS = 7  # the attended keys and an encoder's 6 key classes (`lift.key_weights`)
ATTEND_FIXED = 16 * MB  # the attend pass's cost at any size (its first sequence's calls)
HEAD_ARCHITECTURES = ("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForPreTraining")
ONE_LAYER_STREAMED = ("weights_distances", "weights_gradients")  # L = 1 layer-streamed


@dataclass(frozen=True)
class JobMemory:
    model: str
    corpus: str
    job: str
    bytes: int  # working memory beside the model's weights


@dataclass(frozen=True)
class Sizes:
    """What a job's working memory depends on: B sequences per batch of n pieces, L layers
    (those held at once), H heads, width d, V pieces of the vocabulary (0: no LM head) and
    the attend family's `component_window`."""

    B: int
    n: int
    L: int
    H: int
    d: int
    V: int = 0
    window: int = 0


def vocabulary_bytes(positions: int, V: int) -> int:
    """The logits of `positions` positions over V pieces, a chunk at a time (module
    docstring's W)."""
    return 3 * min(CHUNK_BYTES, positions * V * FLOAT)


def job_bytes(job: str, size: Sizes, budget_mb: float) -> int:
    """The working memory of one model job (the module docstring's formulas)."""
    B, n, L, H, d = size.B, size.n, size.L, size.H, size.d
    A, M = B * H * n * n * FLOAT, B * n * n * FLOAT
    budget = int(budget_mb * MB)
    vocabulary = vocabulary_bytes(B * n, size.V)
    extract = 2 * A + M + B * (L + 1) * n * d * FLOAT
    components = 2 + (min(L, size.window + 1) if size.window else L) * (H + 1)
    return {
        "extract_hidden_states": extract,
        "weights_stats": A + 4 * M,
        "weights_distances": L * A + 2 * M,
        "weights_gradients": (2 * L + 5) * A + 12 * L * B * n * d * FLOAT + vocabulary,
        "norms_compute": A + 4 * M + B * H * n * d * FLOAT + min(budget, 6 * A),
        "norms_sink_card": max(extract, vocabulary),
        "mixing_compute": A + 10 * M + min(budget, 4 * M * d),
        "attend_compute": 5 * components * n * d * FLOAT
        + 3 * H * ATTEND_WEIGHTINGS * n * n * FLOAT
        + ATTEND_FIXED,
    }[job]


def family_jobs(config: dict, family: str) -> dict[str, int]:
    """{job: sequences per batch} of the estimated jobs of one family."""
    settings, batch = config["analyses"][family], config["batch_size"]
    return {
        "weights": {
            "weights_stats": batch,
            "weights_distances": settings.get("distance_batch_size", batch),
            "weights_gradients": batch,
        },
        "norms": {"norms_compute": batch, "norms_sink_card": batch},
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
        V = vocabulary(model_config)
        streamed = config["loading"] == "layer-streamed"
        window = config["analyses"]["attend"].get("component_window", 0)
        for corpus, jobs in readers.items():
            n = cut_to_context(corpus_for_model(config, model, corpus), limit)["max_length"]
            jobs = {"extract_hidden_states": config["batch_size"]} | jobs
            if not whole_model(config.get("layers"), L):
                for job in ("weights_distances", "weights_gradients"):  # every layer's
                    jobs.pop(job, None)
            if not V:
                jobs.pop("weights_gradients", None)  # "not applicable": no LM head
            sizes = {}
            for job, B in jobs.items():
                depth = 1 if streamed and job in ONE_LAYER_STREAMED else L
                shape = Sizes(B, n, depth, H, d, V, window)
                sizes[job] = job_bytes(job, shape, config["memory_budget_mb"])
            job = max(sizes, key=sizes.get)
            largest.append(JobMemory(model, corpus, job, sizes[job]))
    return largest


def vocabulary(model_config: dict) -> int:
    """The vocabulary size of a model with a language-model head (config.json's
    `architectures` names one, or names none), else 0."""
    names = model_config.get("architectures") or []
    if names and not any(name.endswith(HEAD_ARCHITECTURES) for name in names):
        return 0
    return int(model_config.get("vocab_size") or 0)


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
