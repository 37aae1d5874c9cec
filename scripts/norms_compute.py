"""||x||, ||f(x)||, alpha vs ||f(x)|| and the head-summed norm maps of one model on one corpus."""

from attnscope.analyses.norms.corpus import analyse_corpus
from attnscope.core.files import write_table
from attnscope.core.store import HiddenStates, atomic_h5
from attnscope.pipeline import runlog
from attnscope.pipeline.models import open_model

log = runlog.start(snakemake)
params = snakemake.params
output = snakemake.output
loaded = open_model(
    snakemake.input.manifest,
    snakemake.config["device"],
    log,
    hidden_states=snakemake.input.hidden_states,
    loading=snakemake.config["loading"],
)
model, weights, device = loaded.model, loaded.weights, loaded.device
with HiddenStates(snakemake.input.hidden_states) as store, atomic_h5(output.maps) as maps:
    log.info("%d sequences of at most %d pieces", store.n_sequences, store.length)
    accumulator, residual = analyse_corpus(
        store,
        weights,
        model,
        maps,
        batch_size=params.batch_size,
        device=device,
        sample_size=params.spearman_sample_size,
        seed=params.seed,
        max_rel_residual=snakemake.config["analyses"]["norms"]["max_rel_residual"],  # a bound
        maps_dtype=params.maps_dtype,
        log=log,
    )
tables = accumulator.tables(params.sample_rate, params.scatter_max_points)
tables["decomposition_check"] = residual
for name, table in tables.items():
    write_table(table, output[name])
log.info("wrote %d tables and %s", len(tables), output.maps)
