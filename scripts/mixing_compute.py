"""Whole-layer mixing maps, ratios, RSA and decomposition checks of one model on one corpus."""

from attnscope.analyses.mixing.corpus import analyse_corpus
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
with HiddenStates(snakemake.input.hidden_states) as store, atomic_h5(output.maps) as maps:
    log.info("%d sequences of at most %d pieces", store.n_sequences, store.length)
    result = analyse_corpus(
        store,
        loaded.weights,
        loaded.model,
        maps,
        batch_size=params.batch_size,
        device=loaded.device,
        ig_steps=params.ig_steps,
        # a check bound, not a parameter: changing it reruns nothing (the table holds residuals)
        max_rel_residual=snakemake.config["analyses"]["mixing"]["max_rel_residual"],
        maps_dtype=params.maps_dtype,
        log=log,
    )
write_table(result.ratios.table(), output.mixing_ratio)
write_table(result.rsa.table(), output.rsa)
write_table(result.check, output.decomposition_check)
log.info("wrote the mixing tables and %s", output.maps)
