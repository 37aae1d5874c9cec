"""Singular values of every head's affine map f on [x, 1] (Kobayashi et al. 2020, Fig. 2)."""

from attnscope.analyses.norms.affine import affine_singular_value_table
from attnscope.core.files import write_table
from attnscope.pipeline import runlog
from attnscope.pipeline.models import open_model

log = runlog.start(snakemake)
loaded = open_model(
    snakemake.input.manifest, snakemake.config["device"], log, loading=snakemake.config["loading"]
)
table = affine_singular_value_table(loaded.weights)
write_table(table, snakemake.output[0])
log.info("wrote %d singular values", len(table))
