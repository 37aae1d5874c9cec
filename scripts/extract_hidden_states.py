"""Run the model over an encoded corpus and store the hidden states of every layer (or of the
`layers:` setting's), by the whole model per batch or one layer at a time (`loading`)."""

import sys

from attnscope.pipeline import runlog
from attnscope.pipeline.extract import extract, extract_streamed
from attnscope.pipeline.layer_stream import loading_route
from attnscope.pipeline.models import (
    check_compute_dtype,
    check_model_unchanged,
    manifest_attrs,
    open_model,
    pick_device,
    read_manifest,
)

log = runlog.start(snakemake)
manifest = read_manifest(snakemake.input.manifest)
check_model_unchanged(manifest, snakemake.input.manifest)
device = pick_device(snakemake.config["device"])
compute_dtype = snakemake.params.compute_dtype
check_compute_dtype(compute_dtype, device)
itemsize = 4 if compute_dtype == "float32" else 2
route = loading_route(snakemake.config["loading"], manifest["path"], device, itemsize)
log.info("extraction route: %s, on %s in %s", route, device, compute_dtype)
settings = dict(
    encoded_path=snakemake.input.encoded,
    out_path=snakemake.output[0],
    batch_size=snakemake.params.batch_size,
    device=device,
    dtype=snakemake.params.dtype,
    compute_dtype=compute_dtype,
    attrs=manifest_attrs(manifest),
    log=sys.stderr,
    layers=snakemake.params.layers,
)
if route == "layer-streamed":
    runlog.release_freed_memory()  # a freed layer goes back before the next is read
    summary = extract_streamed(manifest["path"], **settings)
else:
    loaded = open_model(snakemake.input.manifest, device, log, dtype=compute_dtype)
    summary = extract(loaded.model, **settings)
log.info("stored %s", summary)
