"""Attention probes (Clark et al. 2019, section 5): trained on EWT dev, UAS on EWT test."""

from attnscope.analyses.probing.probe import ProbeTraining, probe_tables
from attnscope.core.store import read_meta
from attnscope.pipeline.job import Job

job = Job(snakemake)
log, params, output = job.log, job.params, job.output
probe, curve = probe_tables(
    job.input.features,
    read_meta(job.input.encoded),
    list(params.sources),
    ProbeTraining(params.seed, params.epochs, params.learning_rate, tuple(params.learning_curve)),
    log=log,
)
job.write_table(probe, output.probe)
job.write_table(curve, output.curve)
log.info("wrote %s and %s", output.probe, output.curve)
