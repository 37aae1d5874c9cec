"""Run the model over an encoded corpus and store the hidden states of every layer (or of the
`layers:` setting's), by the whole model per batch or one layer at a time (`loading`)."""

import sys

from attnscope.pipeline.job import Job
from attnscope.pipeline.models import manifest_attrs

job = Job(snakemake)
params = job.params
loaded = job.model(dtype=params.compute_dtype)
summary = loaded.extract_states(
    job.input.encoded,
    job.output[0],
    params.batch_size,
    dtype=params.dtype,
    compute_dtype=params.compute_dtype,
    attrs=manifest_attrs(loaded.manifest),
    log=sys.stderr,
    layers=params.layers,
)
job.log.info("stored %s", summary)
