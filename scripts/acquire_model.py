"""Resolve a configured model to a local folder and write its manifest."""

from attnscope.pipeline import runlog
from attnscope.pipeline.models import build_manifest, write_manifest

log = runlog.start(snakemake)
manifest = build_manifest(
    snakemake.wildcards.model,
    snakemake.params.spec,
    mirror=snakemake.config["mirror"],
)
log.info(
    "model %s: %s %s at %s",
    manifest["name"],
    manifest["id"],
    manifest["revision"],
    manifest["path"],
)
write_manifest(snakemake.output[0], manifest)
