"""Run the model over an encoded corpus and store the hidden states of every layer (or of the
`layers:` setting's), by the whole model per batch or one layer at a time (`loading`)."""

import sys

from attnscope.model.extract import ExtractSettings
from attnscope.model.sources import manifest_attrs
from attnscope.pipeline.job import Job

job = Job(snakemake)
settings = job.settings(ExtractSettings)
loaded = job.model(dtype=settings.compute_dtype)
attrs = manifest_attrs(loaded.manifest)
summary = loaded.extract_states(job.input.encoded, job.output[0], settings, attrs, sys.stderr)
job.log.info("stored %s", summary)
