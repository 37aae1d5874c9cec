"""Per-head and per-layer attention-weight statistics of one model on one corpus (Clark 2019):
all layers in one job, one layer shard's (rule weights_shard), or the shards gathered."""

from attnscope.analyses.weights.settings import StatisticsSettings
from attnscope.analyses.weights.statistics import accumulate_statistics
from attnscope.core.store import analysed_layers
from attnscope.core.tables import layer_rows
from attnscope.pipeline.job import Job
from attnscope.pipeline.shards import sharded_analysis

job = Job(snakemake)
log, output = job.log, job.output
settings = job.settings(StatisticsSettings, besides=("shards",))


def analyse(loaded, store, maps, layers):
    batch_size, device = settings.batch_size, loaded.device
    return accumulate_statistics(store, loaded.weights, batch_size, device, layers=layers)


accumulator = sharded_analysis(job, analyse)
if accumulator is not None:
    heads, layers = accumulator.tables()
    chosen = analysed_layers(job.input.hidden_states)
    job.write_table(layer_rows(heads, chosen), output.heads)
    job.write_table(layer_rows(layers, chosen), output.layers)
    log.info("wrote %s and %s", output.heads, output.layers)
