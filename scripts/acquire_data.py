"""Copy a data file from the mirror or download it, and verify its SHA-256."""

from attnscope.data.datasets import acquire
from attnscope.pipeline.job import Job

job = Job(snakemake)
origin = acquire(job.params.relpath, job.output[0], job.config["mirror"])
job.log.info("%s from %s: SHA-256 verified", job.params.relpath, origin)
