"""Why heads attend where they do, on the first sequences of one corpus (`analyses/attend`):
what lifts the attended keys and the named key classes, per component pair and rotary band,
and grouped by block, upstream head and (where the norms family found massive dimensions)
residual direction."""

import pandas as pd

from attnscope.analyses.attend.corpus_pass import corpus_pass
from attnscope.analyses.attend.groups import groups_table
from attnscope.analyses.attend.settings import AttendSettings
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
rotary = any(layer.rotary is not None for layer in loaded.weights.outline)  # no layer read
bands = sums.band_table() if rotary else not_applicable("no rotary embedding")
job.write_table(bands, output.bands)
learned = bool(sums.trt)  # the split has embed.position: learned absolute positions
trt = sums.trt_table() if learned else not_applicable("no learned position embeddings")
job.write_table(trt, output.trt_terms)
groups, groups_check = groups_table(sums, settings.max_rel_residual)
job.write_table(groups, output.groups)
job.write_table(pd.concat([check, groups_check], ignore_index=True), output.decomposition_check)
log.info("wrote the attend tables of %s", job.wildcards.model)
