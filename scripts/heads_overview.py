"""The overview of a run's head roles: every model's role counts per layer, side by side."""

import os

import pandas as pd

from attnscope.analyses.heads.atlas import overview
from attnscope.core.files import write_text
from attnscope.pipeline.job import Job

job = Job(snakemake)
out = job.output[0]
models = job.params.models
roles = {m: pd.read_csv(p, sep="\t") for m, p in zip(models, job.input.roles, strict=True)}
folder = os.path.dirname(out)
atlases = {m: os.path.relpath(p, folder) for m, p in zip(models, job.input.atlases, strict=True)}
write_text(overview(roles, atlases), out)
job.log.info("wrote %s", out)
