"""Singular values of every head's affine map f on [x, 1] (Kobayashi et al. 2020, Fig. 2)."""

from attnscope.analyses.norms.affine import affine_singular_value_table
from attnscope.pipeline.job import Job

job = Job(snakemake)
table = affine_singular_value_table(job.model().weights)
job.write_table(table, job.output[0])
job.log.info("wrote %d singular values", len(table))
