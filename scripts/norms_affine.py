"""Singular values of every head's affine map f on [x, 1] (Kobayashi et al. 2020, Fig. 2)."""

from attnscope.analyses.norms.affine import singular_value_table
from attnscope.pipeline import runlog
from attnscope.pipeline.models import open_model

log = runlog.start(snakemake)  # noqa: F821
loaded = open_model(snakemake.input.manifest, snakemake.params.device, log)  # noqa: F821
table = singular_value_table(loaded.weights)
table.to_csv(snakemake.output[0], sep="\t", index=False)  # noqa: F821
log.info("wrote %d singular values", len(table))
