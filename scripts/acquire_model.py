"""Resolve a configured model to a local folder and write its manifest."""

from attnscope.model.sources import build_manifest, write_manifest
from attnscope.pipeline.job import Job

job = Job(snakemake)
manifest = build_manifest(job.wildcards.model, job.params.spec, mirror=job.config["mirror"])
job.log.info(
    "model %s: %s %s at %s",
    manifest["name"],
    manifest["id"],
    manifest["revision"],
    manifest["path"],
)
write_manifest(job.output[0], manifest)
