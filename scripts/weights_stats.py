"""Per-head and per-layer attention-weight statistics of one model on one corpus (Clark 2019)."""

from attnscope import runlog
from attnscope.adapters import canonical_weights, load_model, pick_device
from attnscope.models import read_manifest
from attnscope.store import HiddenStates
from attnscope.weights import attention_statistics

log = runlog.start(snakemake)  # noqa: F821
params = snakemake.params  # noqa: F821
output = snakemake.output  # noqa: F821
manifest = read_manifest(snakemake.input.manifest)  # noqa: F821
device = pick_device(params.device)
log.info("model %s on %s", manifest["name"], device)
weights = canonical_weights(load_model(manifest["path"], device))
with HiddenStates(snakemake.input.hidden_states) as store:  # noqa: F821
    log.info("%d sequences of at most %d pieces", store.n_sequences, store.length)
    heads, layers = attention_statistics(store, weights, params.batch_size, device)
heads.to_csv(output.heads, sep="\t", index=False)
layers.to_csv(output.layers, sep="\t", index=False)
log.info("wrote %s and %s", output.heads, output.layers)
