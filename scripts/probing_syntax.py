"""Dependency heads per source, layer and head on UD EWT, and the probe's word-level features."""

from attnscope.analyses.probing.corpus_pass import syntax_pass
from attnscope.core.files import write_table
from attnscope.core.store import HiddenStates, atomic_h5, read_meta
from attnscope.pipeline.job import Job

job = Job(snakemake)
log, params, output = job.log, job.params, job.output
loaded = job.model()
metas = read_meta(job.input.encoded)
with (
    HiddenStates(job.input.hidden_states) as store,
    job.optional_h5("mixing_maps") as mixing,
    atomic_h5(output.features) as features,
):
    heads, best = syntax_pass(
        store,
        loaded.weights,
        metas,
        list(params.sources),
        features,
        batch_size=params.batch_size,
        device=loaded.device,
        mode=params.word_mode,
        mixing=mixing,
        log=log,
    )
write_table(heads, output.heads)
write_table(best, output.best)
log.info("wrote %s (%d rows), %s and %s", output.heads, len(heads), output.best, output.features)
