"""Run the model over an encoded corpus and store every layer's hidden state."""

import sys

from attnscope import runlog
from attnscope.adapters import load_model, pick_device
from attnscope.extract import extract, manifest_attrs
from attnscope.models import read_manifest

log = runlog.start(snakemake)  # noqa: F821
manifest = read_manifest(snakemake.input.manifest)  # noqa: F821
device = pick_device(snakemake.params.device)  # noqa: F821
log.info("model %s on %s", manifest["name"], device)
model = load_model(manifest["path"], device)
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
