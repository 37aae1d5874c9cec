"""||x||, ||f(x)||, alpha vs ||f(x)|| and the head-summed norm maps of one model on one corpus:
all layers in one job, one layer shard's (rule norms_shard), or the shards gathered."""

from attnscope.analyses.norms.corpus_pass import corpus_pass
from attnscope.analyses.norms.settings import NormsSettings
from attnscope.core.store import analysed_layers
from attnscope.core.tables import layer_rows
from attnscope.pipeline.job import Job
from attnscope.pipeline.shards import sharded_analysis

job = Job(snakemake)
settings = job.settings(NormsSettings, besides=("shards",))


def analyse(loaded, store, maps, layers):
    return corpus_pass(store, loaded, maps, settings, job.log, layers)


result = sharded_analysis(job, analyse)
if result is not None:
    accumulator, residual = result
    tables = accumulator.tables(settings.sample_rate, settings.scatter_max_points)
    tables["decomposition_check"] = residual
    layers = analysed_layers(job.input.hidden_states)
    for name, table in tables.items():
        if name == "massive_activations":  # its rows are states (0: the embeddings): those read
            table = table[table["n_sequences"] > 0]
        else:
            table = layer_rows(table, layers)
        job.write_table(table, job.output[name])
    job.log.info("wrote %d tables and %s", len(tables), job.output.maps)
