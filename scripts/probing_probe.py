"""Attention probes (Clark et al. 2019, section 5): trained on EWT dev, UAS on EWT test."""

from attnscope.analyses.probing.probe import ProbeTraining, probe_tables
from attnscope.analyses.probing.settings import ProbeSettings
from attnscope.core.store import read_meta
from attnscope.pipeline.job import Job

job = Job(snakemake)
log, settings, output = job.log, job.settings(ProbeSettings), job.output
training = (settings.seed, settings.epochs, settings.learning_rate, settings.learning_curve)
probe, curve = probe_tables(
    job.input.features,
    read_meta(job.input.encoded),
    list(settings.sources),
    ProbeTraining(*training[:3], tuple(training[3])),
    log=log,
)
job.write_table(probe, output.probe)
job.write_table(curve, output.curve)
log.info("wrote %s and %s", output.probe, output.curve)
