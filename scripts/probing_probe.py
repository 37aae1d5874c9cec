"""Attention probes (Clark et al. 2019, section 5): trained on EWT dev, UAS on EWT test."""

from attnscope.analyses.probing.probe import probe_tables
from attnscope.core.files import write_table
from attnscope.core.store import read_meta
from attnscope.pipeline import runlog

log = runlog.start(snakemake)
params = snakemake.params
output = snakemake.output
probe, curve = probe_tables(
    snakemake.input.features,
    read_meta(snakemake.input.encoded),
    list(params.sources),
    seed=params.seed,
    epochs=params.epochs,
    learning_rate=params.learning_rate,
    fractions=list(params.learning_curve),
    log=log,
)
write_table(probe, output.probe)
write_table(curve, output.curve)
log.info("wrote %s and %s", output.probe, output.curve)
