"""Syntax heads (rule probing_syntax: dependency heads per source, layer and head on UD EWT,
and the probe's word-level features) or coreference heads (rule probing_coref: on GAP, with
the baselines), whichever tables the rule asks for."""

from contextlib import nullcontext

from attnscope.analyses.probing.corpus_pass import coref_pass, syntax_pass
from attnscope.analyses.probing.settings import ProbingSettings
from attnscope.core.files import write_table
from attnscope.core.store import HiddenStates, atomic_h5, read_meta
from attnscope.pipeline.job import Job

job = Job(snakemake)
settings, output = job.settings(ProbingSettings), job.output
loaded = job.model()
syntax = "features" in output.keys()  # only the syntax rule writes the probe's features
with (
    HiddenStates(job.input.hidden_states) as store,
    job.optional_h5("mixing_maps") as mixing,
    atomic_h5(output.features) if syntax else nullcontext() as features,
):
    metas, stream = read_meta(job.input.encoded), dict(mixing=mixing, log=job.log)
    if syntax:
        heads, best = syntax_pass(store, loaded.weights, metas, settings, features, **stream)
    else:
        heads, best = coref_pass(store, loaded.weights, metas, settings, **stream)
write_table(heads, output.heads)
write_table(best, output.best)
job.log.info("wrote %s (%d rows) and %s", output.heads, len(heads), output.best)
