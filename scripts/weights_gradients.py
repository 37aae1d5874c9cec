"""Gradient importance of attention per layer and category, or a "not applicable" table."""

from attnscope.analyses.weights.gradients import gradient_importance, not_applicable
from attnscope.architectures import load_model
from attnscope.core.files import write_table
from attnscope.core.store import HiddenStates
from attnscope.pipeline import runlog
from attnscope.pipeline.extract import check_store_weights
from attnscope.pipeline.models import check_model_unchanged, pick_device, read_manifest

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

        log.info("model %s with its %s LM head on %s", manifest["name"], head, device)
        model = load_model(manifest["path"], device, head=head)
        mask_token_id = None  # causal LM: the next-token loss, nothing masked
        if head == "masked":
            mask_token_id = AutoTokenizer.from_pretrained(manifest["path"]).mask_token_id
        table = gradient_importance(
            model,
            store,
            mask_token_id,
            params.mask_rate,
            params.seed,
            params.batch_size,
            device,
            params.n_sequences or None,
            log,
        )
write_table(table, snakemake.output[0])
log.info("wrote %s", snakemake.output[0])
