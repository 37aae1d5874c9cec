"""Whole-layer mixing maps, ratios, RSA and decomposition checks of one model on one corpus:
all layers in one job, one layer shard's (rule mixing_shard), or the shards gathered."""

from attnscope.analyses.mixing.corpus_pass import corpus_pass
from attnscope.analyses.mixing.settings import MixingSettings
from attnscope.core.store import analysed_layers
from attnscope.core.tables import layer_rows
from attnscope.pipeline.job import Job
from attnscope.pipeline.shards import sharded_analysis

job = Job(snakemake)
unread = MixingSettings.propagation  # mixing_propagate's
settings = job.settings(MixingSettings, unread=unread, besides=("shards",))
output = job.output


def analyse(loaded, store, maps, layers):
    return corpus_pass(store, loaded, maps, settings, job.log, layers)


result = sharded_analysis(job, analyse)
if result is not None:
    layers = analysed_layers(job.input.hidden_states)
    job.write_table(layer_rows(result.ratios.table(), layers), output.mixing_ratio)
    job.write_table(layer_rows(result.rsa.table(), layers), output.rsa)
    job.write_table(result.check, output.decomposition_check)
    job.log.info("wrote the mixing tables and %s", output.maps)
