"""Run the model over an encoded corpus and store every layer's hidden state."""

import sys

from attnscope.pipeline import runlog
from attnscope.pipeline.extract import extract, manifest_attrs
from attnscope.pipeline.models import open_model

log = runlog.start(snakemake)  # noqa: F821
loaded = open_model(snakemake.input.manifest, snakemake.params.device, log)  # noqa: F821
manifest, model, device = loaded.manifest, loaded.model, loaded.device
summary = extract(
    model,
    snakemake.input.encoded,  # noqa: F821
    snakemake.output[0],  # noqa: F821
    batch_size=snakemake.params.batch_size,  # noqa: F821
    device=device,
    dtype=snakemake.params.dtype,  # noqa: F821
    attrs=manifest_attrs(manifest),
    log=sys.stderr,
)
log.info("stored %s", summary)
