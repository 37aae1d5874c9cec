"""The FF block's piece pairs and one sequence's scope maps, read back from maps.h5."""

from transformers import AutoTokenizer

from attnscope.analyses.mixing.tables import example_maps_table, ff_pairs_table
from attnscope.core.files import write_table
from attnscope.core.store import open_store
from attnscope.pipeline import runlog
from attnscope.pipeline.models import read_manifest

log = runlog.start(snakemake)
params = snakemake.params
manifest = read_manifest(snakemake.input.manifest)
token_of = AutoTokenizer.from_pretrained(manifest["path"]).convert_ids_to_tokens
with open_store(snakemake.input.encoded, "encode_corpus") as encoded:
    input_ids, attention_mask = encoded["input_ids"][()], encoded["attention_mask"][()]
with open_store(snakemake.input.maps, "mixing_compute") as maps:
    pairs = ff_pairs_table(
        maps, input_ids, attention_mask, params.batch_size, params.ff_pairs_top_k, token_of
    )
    example = example_maps_table(
        maps, input_ids, attention_mask, params.example_sequence, params.example_tokens, token_of
    )
write_table(pairs, snakemake.output.ff_pairs)
write_table(example, snakemake.output.example_maps)
log.info("wrote %s and %s", snakemake.output.ff_pairs, snakemake.output.example_maps)
