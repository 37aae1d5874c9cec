"""Per-head and per-layer attention-weight statistics of one model on one corpus (Clark 2019)."""

from attnscope.analyses.weights.statistics import attention_statistics
from attnscope.core.files import write_table
from attnscope.core.store import HiddenStates
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
weights, device = loaded.weights, loaded.device
with HiddenStates(snakemake.input.hidden_states) as store:
    log.info("%d sequences of at most %d pieces", store.n_sequences, store.length)
    heads, layers = attention_statistics(store, weights, params.batch_size, device)
write_table(heads, output.heads)
write_table(layers, output.layers)
log.info("wrote %s and %s", output.heads, output.layers)
