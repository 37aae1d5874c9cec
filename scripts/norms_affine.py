"""Singular values of every head's affine map f on [x, 1] (Kobayashi et al. 2020, Fig. 2)."""

from attnscope import runlog
from attnscope.adapters import canonical_weights, load_model, pick_device
from attnscope.affine import singular_value_table
from attnscope.models import read_manifest

log = runlog.start(snakemake)  # noqa: F821
manifest = read_manifest(snakemake.input.manifest)  # noqa: F821
device = pick_device(snakemake.params.device)  # noqa: F821
log.info("model %s on %s", manifest["name"], device)
weights = canonical_weights(load_model(manifest["path"], device))
table = singular_value_table(weights)
table.to_csv(snakemake.output[0], sep="\t", index=False)  # noqa: F821
log.info("wrote %d singular values", len(table))
