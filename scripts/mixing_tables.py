"""The FF block's piece pairs and one sequence's scope maps, read back from maps.h5."""

from attnscope.analyses.mixing.settings import MixingTablesSettings
from attnscope.analyses.mixing.tables import example_maps_table, ff_pairs_table
from attnscope.core.store import open_store
from attnscope.pipeline.job import Job

job = Job(snakemake)
settings = job.settings(MixingTablesSettings)
token_of = job.tokenizer().convert_ids_to_tokens
with open_store(job.input.encoded, "encode_corpus") as encoded:
    input_ids, attention_mask = encoded["input_ids"][()], encoded["attention_mask"][()]
with open_store(job.input.maps, "mixing_compute") as maps:
    pairs = ff_pairs_table(
        maps, input_ids, attention_mask, settings.batch_size, settings.ff_pairs_top_k, token_of
    )
    chosen = settings.example_sequence, settings.example_tokens
    example = example_maps_table(maps, input_ids, attention_mask, *chosen, token_of)
job.write_table(pairs, job.output.ff_pairs)
job.write_table(example, job.output.example_maps)
job.log.info("wrote %s and %s", job.output.ff_pairs, job.output.example_maps)
