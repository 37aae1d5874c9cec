"""Singular values of W^A = W^Q (W^K)^T and eigen-angles of R = (U^Q)^T U^K for every head; on
a rotary model the singular values of each band's form W_Q^b (W_K^b)^T, and a "not applicable"
eigen-angle table (its scores are not x W^A x^T)."""

import pandas as pd

from attnscope.analyses.position.bilinear import (
    bilinear_form,
    rotation_table,
    wa_singular_value_table,
)
from attnscope.analyses.position.rotary import band_singular_value_table
from attnscope.analyses.position.settings import BilinearSettings
from attnscope.core import applicability
from attnscope.core.tables import not_applicable
from attnscope.pipeline.job import Job

job = Job(snakemake)
log, include_bias = job.log, job.settings(BilinearSettings).include_bias
weights = job.model(on_cpu=True).weights  # weights only
reason = applicability.reason("position.angles", weights)
if reason is not None:
    log.info("rotary model: W^A per band; no eigen-angles (scores are not x W^A x^T)")
    singular = band_singular_value_table(weights)
    angles = not_applicable(reason)
else:
    singular, angles = [], []
    for l, layer in enumerate(weights.layers):
        form = bilinear_form(layer, include_bias)
        singular.append(wa_singular_value_table(form, l + 1))
        angles.append(rotation_table(form, l + 1))
        log.info("layer %d: largest singular value %.4g", l + 1, float(form.S.max()))
    singular, angles = pd.concat(singular), pd.concat(angles)
job.write_table(singular, job.output.singular_values)
job.write_table(angles, job.output.angles)
