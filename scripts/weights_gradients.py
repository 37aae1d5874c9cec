"""Gradient importance of attention per layer and category, or a "not applicable" table: by a
whole-model backward, or with `loading: layer-streamed` layer by layer (one layer in memory)."""

from pathlib import Path

from attnscope.analyses.weights.gradients import gradient_importance, not_applicable
from attnscope.architectures import load_model
from attnscope.core.files import write_table
from attnscope.core.store import HiddenStates
from attnscope.pipeline import runlog
from attnscope.pipeline.layer_stream import loading_route
from attnscope.pipeline.models import (
    check_model_unchanged,
    check_store_weights,
    pick_device,
    read_manifest,
)

log = runlog.start(snakemake)
params = snakemake.params
manifest = read_manifest(snakemake.input.manifest)
check_model_unchanged(manifest, snakemake.input.manifest)
check_store_weights(snakemake.input.hidden_states, manifest)
device = pick_device(snakemake.config["device"])
head = manifest.get("lm_head", "masked" if manifest["has_mlm_head"] else None)
with HiddenStates(snakemake.input.hidden_states) as store:
    if head is None:
        log.info("model %s has no language-model head: not applicable", manifest["name"])
        table = not_applicable(store.n_layers)
    else:
        from transformers import AutoTokenizer

        mask_token_id = None  # causal LM: the next-token loss, nothing masked
        if head == "masked":
            mask_token_id = AutoTokenizer.from_pretrained(manifest["path"]).mask_token_id
        route = loading_route(snakemake.config["loading"], manifest["path"], device)
        log.info(
            "model %s with its %s LM head on %s, route %s", manifest["name"], head, device, route
        )
        settings = dict(
            mask_token_id=mask_token_id,
            rate=params.mask_rate,
            seed=params.seed,
            batch_size=params.batch_size,
            device=device,
            limit=params.n_sequences or None,
            log=log,
        )
        if route == "layer-streamed":
            from attnscope.analyses.weights.streamed_backward import streamed_gradient_importance

            runlog.release_freed_memory()
            scratch = Path(snakemake.output[0]).parent
            table = streamed_gradient_importance(
                manifest["path"], store, head, scratch_folder=scratch, **settings
            )
        else:
            model = load_model(manifest["path"], device, head=head)
            table = gradient_importance(model, store, **settings)
write_table(table, snakemake.output[0])
log.info("wrote %s", snakemake.output[0])
