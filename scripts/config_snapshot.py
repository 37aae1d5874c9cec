"""Write the effective configuration (schema defaults filled in), for the report."""

import yaml

from attnscope.pipeline.job import Job

job = Job(snakemake)
with open(job.output[0], "w") as f:
    yaml.safe_dump(dict(job.params.config), f, sort_keys=False)
