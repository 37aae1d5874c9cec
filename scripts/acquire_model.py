"""Resolve a configured model to a local folder and write its manifest."""

from attnscope.pipeline import runlog
from attnscope.pipeline.models import build_manifest, write_manifest

log = runlog.start(snakemake)  # noqa: F821
manifest = build_manifest(
    snakemake.wildcards.model,  # noqa: F821
    snakemake.params.spec,  # noqa: F821
    mirror=snakemake.params.mirror,  # noqa: F821
)
log.info(
    "model %s: %s %s at %s",
    manifest["name"],
    manifest["id"],
    manifest["revision"],
    manifest["path"],
)
write_manifest(snakemake.output[0], manifest)  # noqa: F821
