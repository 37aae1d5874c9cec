"""||x||, ||f(x)||, alpha vs ||f(x)|| and the head-summed norm maps of one model on one corpus:
all layers in one job, one layer shard's (rule norms_shard), or the shards gathered."""

from attnscope.analyses.norms.corpus_pass import corpus_pass
from attnscope.core.files import write_table
from attnscope.core.tables import layer_rows
from attnscope.pipeline import runlog
from attnscope.pipeline.shards import sharded_analysis

log = runlog.start(snakemake)
params = snakemake.params
LAYERS = snakemake.config["layers"]  # the tables' rows: these layers' (all: every)


def analyse(loaded, store, maps, layers):
    return corpus_pass(
        store,
        loaded.weights,
        loaded.model,
        maps,
        batch_size=params.batch_size,
        device=loaded.device,
        sample_size=params.spearman_sample_size,
        seed=params.seed,
        max_rel_residual=snakemake.config["analyses"]["norms"]["max_rel_residual"],  # a bound
        maps_dtype=params.maps_dtype,
        log=log,
        layers=layers,
    )


result = sharded_analysis(snakemake, log, analyse)
if result is not None:
    accumulator, residual = result
    tables = accumulator.tables(params.sample_rate, params.scatter_max_points)
    tables["decomposition_check"] = residual
    massive = tables["massive_activations"]  # by state (0: the embeddings): those read
    tables["massive_activations"] = massive[massive["n_sequences"] > 0]
    for name, table in tables.items():
        rows = table if name == "massive_activations" else layer_rows(table, LAYERS)
        write_table(rows, snakemake.output[name])
    log.info("wrote %d tables and %s", len(tables), snakemake.output.maps)
