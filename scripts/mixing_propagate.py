"""The decomposition carried from the input tokens through the whole depth, rollout baselines
and the prediction's attribution, of one model on one corpus."""

from attnscope.analyses.mixing.depth_pass import depth_pass
from attnscope.core.files import write_table
from attnscope.core.store import HiddenStates, atomic_h5, open_store
from attnscope.pipeline.job import Job

job = Job(snakemake)
log, params, output = job.log, job.params, job.output
loaded = job.model(with_head=True)
tokenizer = job.tokenizer()
prediction = loaded.prediction(tokenizer, params.contrast)
log.info("prediction head: %s", "none" if prediction.head is None else loaded.manifest["lm_head"])
with (
    HiddenStates(job.input.hidden_states) as store,
    open_store(job.input.maps, "mixing_compute") as layer_maps,
    atomic_h5(output.propagated) as propagated,
):
    result = depth_pass(
        store,
        loaded.weights,
        loaded.model,
        propagated,
        layer_maps,
        prediction,
        batch_size=params.batch_size,
        device=loaded.device,
        ig_steps=params.ig_steps,
        max_rel_residual=job.bound("mixing"),
        maps_dtype=params.maps_dtype,
        maps_top_k=params.propagated_top_k,
        rollout_scopes=tuple(params.rollout_scopes),
        log=log,
        memory_budget_mb=job.config["memory_budget_mb"],  # working memory: same tables
    )
write_table(result.mixing, output.propagated_mixing)
write_table(result.rollout, output.rollout)
write_table(result.prediction, output.prediction)
write_table(result.check, output.propagation_check)
log.info("wrote the propagation tables and %s", output.propagated)
