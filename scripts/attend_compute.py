"""Why heads attend where they do, on the first sequences of one corpus (`analyses/attend`):
what lifts the attended keys and the named key classes, per component pair and rotary band,
and grouped by block, upstream head and (where the norms family found massive dimensions)
residual direction."""

import pandas as pd

from attnscope.analyses.attend.corpus_pass import corpus_pass
from attnscope.analyses.attend.groups import groups_table
from attnscope.analyses.attend.settings import AttendSettings
from attnscope.core import applicability
from attnscope.core.store import HiddenStates
from attnscope.core.tables import not_applicable
from attnscope.pipeline.job import Job

job = Job(snakemake)
log, settings, output = job.log, job.settings(AttendSettings), job.output
directions = ()
massive = job.input.get("norms_massive_dimensions")
if massive is not None:  # the rule gives none with a layer subset (the sink card needs all)
    directions = tuple(sorted(set(pd.read_csv(massive, sep="\t")["dim"].astype(int))))
    log.info("key side split along the massive dimensions %s", list(directions) or "(none)")
loaded = job.model()
with HiddenStates(job.input.hidden_states) as store:
    sums, check = corpus_pass(store, loaded, settings, log, directions)
job.write_table(sums.lift_table(settings.top_k, classes=False), output.lift)
job.write_table(sums.lift_table(settings.top_k, classes=True), output.key_classes)
no_bands = applicability.reason("attend.bands", loaded.weights)
bands = sums.band_table() if no_bands is None else not_applicable(no_bands)
job.write_table(bands, output.bands)
no_trt = applicability.reason("attend.trt_terms", loaded.weights)
trt = sums.trt_table() if no_trt is None else not_applicable(no_trt)
job.write_table(trt, output.trt_terms)
groups, groups_check = groups_table(sums, settings.max_rel_residual)
job.write_table(groups, output.groups)
job.write_table(pd.concat([check, groups_check], ignore_index=True), output.decomposition_check)
log.info("wrote the attend tables of %s", job.wildcards.model)
