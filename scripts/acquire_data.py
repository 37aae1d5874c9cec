"""Copy a data file from the mirror or download it, and verify its SHA-256."""

from attnscope.data.datasets import acquire
from attnscope.pipeline import runlog

log = runlog.start(snakemake)
origin = acquire(snakemake.params.relpath, snakemake.output[0], snakemake.config["mirror"])
log.info("%s from %s: SHA-256 verified", snakemake.params.relpath, origin)
