"""Per-head and per-layer attention-weight statistics of one model on one corpus (Clark 2019)."""

from attnscope.analyses.weights.statistics import attention_statistics
from attnscope.core.store import HiddenStates
from attnscope.pipeline import runlog
from attnscope.pipeline.models import open_model

log = runlog.start(snakemake)  # noqa: F821
params = snakemake.params  # noqa: F821
output = snakemake.output  # noqa: F821
loaded = open_model(snakemake.input.manifest, params.device, log)  # noqa: F821
weights, device = loaded.weights, loaded.device
with HiddenStates(snakemake.input.hidden_states) as store:  # noqa: F821
    log.info("%d sequences of at most %d pieces", store.n_sequences, store.length)
    heads, layers = attention_statistics(store, weights, params.batch_size, device)
heads.to_csv(output.heads, sep="\t", index=False)
layers.to_csv(output.layers, sep="\t", index=False)
log.info("wrote %s and %s", output.heads, output.layers)
