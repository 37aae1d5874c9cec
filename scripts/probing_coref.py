"""Coreference heads per source, layer and head on GAP, with the baselines."""

from attnscope.analyses.probing.corpus_pass import coref_pass
from attnscope.core.files import write_table
from attnscope.core.store import HiddenStates, read_meta
from attnscope.pipeline.job import Job

job = Job(snakemake)
log, params, output = job.log, job.params, job.output
loaded = job.model()
metas = read_meta(job.input.encoded)
with (
    HiddenStates(job.input.hidden_states) as store,
    job.optional_h5("mixing_maps") as mixing,
):
    heads, best = coref_pass(
        store,
        loaded.weights,
        metas,
        list(params.sources),
        batch_size=params.batch_size,
        device=loaded.device,
        mode=params.word_mode,
        mixing=mixing,
        log=log,
    )
write_table(heads, output.heads)
write_table(best, output.best)
log.info("wrote %s (%d rows) and %s", output.heads, len(heads), output.best)
