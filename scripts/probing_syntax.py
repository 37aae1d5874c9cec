"""Dependency heads per source, layer and head on UD EWT, and the probe's word-level features."""

from attnscope.analyses.probing.corpus_pass import syntax_pass
from attnscope.analyses.probing.settings import ProbingSettings
from attnscope.core.store import HiddenStates, atomic_h5, read_meta
from attnscope.pipeline.job import Job

job = Job(snakemake)
settings, output, loaded = job.settings(ProbingSettings), job.output, job.model()
with (
    HiddenStates(job.input.hidden_states) as store,
    job.optional_h5("mixing_maps") as mixing,
    atomic_h5(output.features) as features,
):
    metas = read_meta(job.input.encoded)
    heads, best = syntax_pass(store, loaded.weights, metas, settings, features, mixing, job.log)
job.write_table(heads, output.heads)
job.write_table(best, output.best)
job.log.info(
    "wrote %s (%d rows), %s and %s", output.heads, len(heads), output.best, output.features
)
