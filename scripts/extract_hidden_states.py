"""Run the model over an encoded corpus and store every layer's hidden state."""

import sys

from attnscope.pipeline import runlog
from attnscope.pipeline.extract import extract, manifest_attrs
from attnscope.pipeline.models import open_model

log = runlog.start(snakemake)
loaded = open_model(snakemake.input.manifest, snakemake.config["device"], log)
manifest, model, device = loaded.manifest, loaded.model, loaded.device
summary = extract(
    model,
    snakemake.input.encoded,
    snakemake.output[0],
    batch_size=snakemake.params.batch_size,
    device=device,
    dtype=snakemake.params.dtype,
    attrs=manifest_attrs(manifest),
    log=sys.stderr,
)
log.info("stored %s", summary)
