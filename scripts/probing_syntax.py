"""Dependency heads per source, layer and head on UD EWT, and the probe's word-level features."""

import h5py

from attnscope.analyses.probing.corpus_pass import syntax_pass
from attnscope.core.files import write_table
from attnscope.core.store import HiddenStates, atomic_h5, read_meta
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
metas = read_meta(snakemake.input.encoded)
mixing_path = snakemake.input.get("mixing_maps")
mixing = h5py.File(mixing_path, "r") if mixing_path else None
with HiddenStates(snakemake.input.hidden_states) as store, atomic_h5(output.features) as features:
    heads, best = syntax_pass(
        store,
        loaded.weights,
        metas,
        list(params.sources),
        features,
        batch_size=params.batch_size,
        device=loaded.device,
        mode=params.word_mode,
        mixing=mixing,
        log=log,
    )
if mixing is not None:
    mixing.close()
write_table(heads, output.heads)
write_table(best, output.best)
log.info("wrote %s (%d rows), %s and %s", output.heads, len(heads), output.best, output.features)
