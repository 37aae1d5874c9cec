"""Gradient importance of attention per layer and category by the model's LM head
(`gradient_table.model_gradient_importance`), or a "not applicable" table for a model
without one."""

from pathlib import Path

from attnscope.analyses.weights.gradient_table import model_gradient_importance
from attnscope.analyses.weights.gradients import not_applicable
from attnscope.analyses.weights.settings import GradientSettings
from attnscope.core import applicability
from attnscope.core.store import HiddenStates
from attnscope.pipeline.job import Job

job = Job(snakemake)
log, settings, out = job.log, job.settings(GradientSettings), job.output[0]
with HiddenStates(job.input.hidden_states) as store:
    if not applicability.applies("weights.gradients", None, job.manifest["lm_head"]):
        log.info("model %s has no language-model head: not applicable", job.manifest["name"])
        table = not_applicable(store.n_layers)
    else:
        loaded = job.model(with_head=True)
        table = model_gradient_importance(loaded, store, Path(out).parent, settings, log)
job.write_table(table, out)
log.info("wrote %s", out)
