"""Singular values of W^A = W^Q (W^K)^T and eigen-angles of R = (U^Q)^T U^K for every head."""

import pandas as pd

from attnscope.analyses.position.bilinear import bilinear_form, rotation_table, singular_value_table
from attnscope.pipeline import runlog
from attnscope.pipeline.models import open_model

log = runlog.start(snakemake)  # noqa: F821
include_bias = snakemake.params.include_bias  # noqa: F821
weights = open_model(snakemake.input.manifest, log=log).weights  # noqa: F821
singular, angles = [], []
for l, layer in enumerate(weights.layers):
    form = bilinear_form(layer, include_bias)
    singular.append(singular_value_table(form, l + 1))
    angles.append(rotation_table(form, l + 1))
    log.info("layer %d: largest singular value %.4g", l + 1, float(form.S.max()))
pd.concat(singular).to_csv(snakemake.output.singular_values, sep="\t", index=False)  # noqa: F821
pd.concat(angles).to_csv(snakemake.output.angles, sep="\t", index=False)  # noqa: F821
