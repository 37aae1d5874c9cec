"""Coreference heads per source, layer and head on GAP, with the baselines."""

from attnscope.analyses.probing.corpus_pass import coref_pass
from attnscope.analyses.probing.settings import ProbingSettings
from attnscope.core.store import HiddenStates, read_meta
from attnscope.pipeline.job import Job

job = Job(snakemake)
settings, output, loaded = job.settings(ProbingSettings), job.output, job.model()
with HiddenStates(job.input.hidden_states) as store, job.optional_h5("mixing_maps") as mixing:
    metas = read_meta(job.input.encoded)
    heads, best = coref_pass(store, loaded.weights, metas, settings, mixing, job.log)
job.write_table(heads, output.heads)
job.write_table(best, output.best)
job.log.info("wrote %s (%d rows) and %s", output.heads, len(heads), output.best)
