"""Which layers attend globally and which through a sliding window, with their rotary base
(`attnscope.core.layer_kinds`): the model's layer_kinds.tsv, whose columns every per-layer
table repeats."""

from attnscope.core.files import write_table
from attnscope.core.layer_kinds import layer_kinds
from attnscope.pipeline.job import Job

job = Job(snakemake)
table = layer_kinds(job.model(on_cpu=True).weights)
write_table(table, job.output[0])
job.log.info("layer kinds: %s", table.to_dict("list"))
