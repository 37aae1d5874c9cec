"""Run the model over an encoded corpus and store every layer's hidden state, by the whole
model per batch or one layer at a time (`loading` setting)."""

import sys

from attnscope.pipeline import runlog
from attnscope.pipeline.extract import extract, extract_streamed, manifest_attrs
from attnscope.pipeline.layer_stream import loading_route
from attnscope.pipeline.models import check_model_unchanged, open_model, pick_device, read_manifest

log = runlog.start(snakemake)
manifest = read_manifest(snakemake.input.manifest)
check_model_unchanged(manifest, snakemake.input.manifest)
device = pick_device(snakemake.config["device"])
route = loading_route(snakemake.config["loading"], manifest["path"], device)
log.info("extraction route: %s, on %s", route, device)
settings = dict(
    encoded_path=snakemake.input.encoded,
    out_path=snakemake.output[0],
    batch_size=snakemake.params.batch_size,
    device=device,
    dtype=snakemake.params.dtype,
    attrs=manifest_attrs(manifest),
    log=sys.stderr,
)
if route == "layer-streamed":
    summary = extract_streamed(manifest["path"], **settings)
else:
    summary = extract(open_model(snakemake.input.manifest, device, log).model, **settings)
log.info("stored %s", summary)
