"""Whole-layer mixing maps, ratios, RSA and FF word pairs of one model on one corpus."""

from transformers import AutoTokenizer

from attnscope.analyses.mixing.corpus import analyse_corpus
from attnscope.core.files import write_table
from attnscope.core.store import HiddenStates, atomic_h5
from attnscope.pipeline import runlog
from attnscope.pipeline.models import open_model

log = runlog.start(snakemake)
params = snakemake.params
output = snakemake.output
loaded = open_model(snakemake.input.manifest, params.device, log)
tokenizer = AutoTokenizer.from_pretrained(loaded.manifest["path"])
token_of = tokenizer.convert_ids_to_tokens
with HiddenStates(snakemake.input.hidden_states) as store, atomic_h5(output.maps) as maps:
    log.info("%d sequences of at most %d pieces", store.n_sequences, store.length)
    result = analyse_corpus(
        store,
        loaded.weights,
        loaded.model,
        maps,
        batch_size=params.batch_size,
        device=loaded.device,
        ig_steps=params.ig_steps,
        max_rel_residual=params.max_rel_residual,
        maps_dtype=params.maps_dtype,
        example_sequence=params.example_sequence,
        example_tokens=params.example_tokens,
        token_of=token_of,
        log=log,
    )
write_table(result.ratios.table(), output.mixing_ratio)
write_table(result.rsa.table(), output.rsa)
write_table(result.ff_pairs.table(params.ff_pairs_top_k, token_of), output.ff_pairs)
write_table(result.example, output.example_maps)
write_table(result.check, output.decomposition_check)
log.info("wrote the mixing tables and %s", output.maps)
