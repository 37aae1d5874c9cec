"""The decomposition carried from the input tokens through the whole depth, rollout baselines
and the prediction's attribution, of one model on one corpus."""

from attnscope.analyses.mixing.depth_pass import depth_pass
from attnscope.analyses.mixing.settings import MixingSettings
from attnscope.core.store import HiddenStates, atomic_h5, open_store
from attnscope.pipeline.job import Job

job = Job(snakemake)
log, settings, output = job.log, job.settings(MixingSettings), job.output
loaded = job.model(with_head=True)
tokenizer = job.tokenizer()
prediction = loaded.prediction(tokenizer, settings.contrast)
log.info("prediction head: %s", "none" if prediction.head is None else loaded.manifest["lm_head"])
with (
    HiddenStates(job.input.hidden_states) as store,
    open_store(job.input.maps, "mixing_compute") as layer_maps,
    atomic_h5(output.propagated, chunk_cache=False) as propagated,
):
    result = depth_pass(store, loaded, propagated, layer_maps, prediction, settings, log)
job.write_table(result.mixing, output.propagated_mixing)
job.write_table(result.rollout, output.rollout)
job.write_table(result.prediction, output.prediction)
job.write_table(result.check, output.propagation_check)
log.info("wrote the propagation tables and %s", output.propagated)
