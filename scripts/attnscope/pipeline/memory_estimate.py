"""The working memory of a run's model jobs, estimated before any job and printed.

Per model and corpus, the largest job's working memory beside the model's weights (the whole
model, or one layer on the layer-streamed route) and the process (torch, the libraries:
about 0.6 GB), from config.json and the configured lengths and batch sizes. Each family
declares how every job of `rules/<family>.smk` counts (`Family.jobs`: a formula in the terms
of `pipeline.job_memory`, or why it has none); the extraction is counted here:

    extract_hidden_states  2 A + M + B (L + 1) n d 4   eager scores and weights, the states

and a family job without a declaration stops the workflow at parse time
(`check_declared_jobs`). Without a language-model head (config.json's `architectures` names
none) the jobs that touch the vocabulary have nothing to compute there: W = 0, and a job
declared `lm_head` is not counted; under a subset of `layers:` an `every_layer` job is not.

Against the peaks measured above each step's start (`tests/test_memory_estimate.py`, fresh
processes, `--allocator release`): four steps of `benchmarks/bench_length.py` at a small
width, the vocabulary steps of `benchmarks/bench_vocabulary.py` (V up to 262,144) and the
attend pass of `benchmarks/bench_attend.py` (SmolLM2's shape, 4 layers), each within a third.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from attnscope.architectures import architecture
from attnscope.core.layer_selection import whole_model
from attnscope.pipeline import outputs
from attnscope.pipeline.disk_estimate import corpus_readers, model_shape, readable
from attnscope.pipeline.job_memory import Memory, Sizes, vocabulary_bytes
from attnscope.pipeline.models import local_model_config
from attnscope.pipeline.outputs import Family
from attnscope.pipeline.user_config import corpus_for_model, cut_to_context

__all__ = ["Sizes", "job_bytes", "vocabulary_bytes"]

HEAD_ARCHITECTURES = ("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForPreTraining")
EXTRACT = "extract_hidden_states"
EXTRACTION = Memory(lambda size, budget_mb, settings: size.states)


class UndeclaredJobError(ValueError):
    """A family's rule has no memory declaration, or a declaration names no rule."""


@dataclass(frozen=True)
class JobMemory:
    model: str
    corpus: str
    job: str
    bytes: int  # working memory beside the model's weights


def declared(job: str) -> Memory:
    """The Memory of a job: the extraction's, or as its family declares it; KeyError if none."""
    if job == EXTRACT:
        return EXTRACTION
    for family in outputs.families().values():
        if job in family.jobs:
            return family.jobs[job]
    raise KeyError(f"job {job!r}: no family declares its memory")


def job_bytes(job: str, size: Sizes, budget_mb: float, settings: dict | None = None) -> int:
    """The working memory of one model job (its family's formula, with the family's
    `settings`); ValueError for a job declared without one."""
    memory = declared(job)
    if memory.bytes is None:
        raise ValueError(f"job {job!r} is not estimated: {memory.unestimated}")
    return memory.bytes(size, budget_mb, settings or {})


def check_declared_jobs(families: dict[str, Family], rules: dict[str, str]) -> None:
    """Every rule {name: the stem of the rules file it is in} of a family's rules file
    (`rules/<family>.smk`) but its local ones has a Memory in the family's `jobs`, and every
    declared job is such a rule; UndeclaredJobError naming the file to edit otherwise."""
    for name, family in families.items():
        own = {rule for rule, stem in rules.items() if stem == name}
        undeclared = sorted(own - set(family.jobs) - set(family.localrules()))
        if undeclared:
            raise UndeclaredJobError(
                f"rules/{name}.smk: rule(s) {', '.join(undeclared)} have no memory "
                f"declaration: give each a Memory in the jobs of "
                f"scripts/attnscope/analyses/{name}/outputs.py (a formula, or unestimated= "
                "saying why it has none)"
            )
        stale = sorted(set(family.jobs) - own)
        if stale:
            raise UndeclaredJobError(
                f"scripts/attnscope/analyses/{name}/outputs.py declares the memory of "
                f"{', '.join(stale)}, which rules/{name}.smk does not define"
            )


def estimate(config: dict, families: dict[str, Family]) -> list[JobMemory]:
    """The largest estimated job of every model with a local folder and every corpus read."""
    readers = {  # {corpus: {job: (Memory, the family's settings)}}
        corpus: {
            job: (memory, config["analyses"][f.name])
            for f in read_by
            for job, memory in f.jobs.items()
            if memory.bytes is not None
        }
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
        every_layer = whole_model(config.get("layers"), L)
        for corpus, jobs in readers.items():
            n = cut_to_context(corpus_for_model(config, model, corpus), limit)["max_length"]
            jobs = {EXTRACT: (EXTRACTION, {})} | jobs
            sizes = {}
            for job, (memory, settings) in jobs.items():
                if (memory.every_layer and not every_layer) or (memory.lm_head and not V):
                    continue  # not made: a layer subset, or "not applicable" (no LM head)
                depth = 1 if streamed and memory.streamed else L
                shape = Sizes(memory.batch(config, settings), n, depth, H, d, V)
                sizes[job] = memory.bytes(shape, config["memory_budget_mb"], settings)
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
