"""Encode one configured corpus for one model's tokenizer into encoded.h5."""

from attnscope.architectures import architecture
from attnscope.core.store import write_encoded
from attnscope.data.corpora import encode_corpus
from attnscope.data.corpus_settings import cut_to_context
from attnscope.pipeline.job import Job

job = Job(snakemake)
manifest = job.manifest
limit = architecture(manifest["model_type"]).max_positions(manifest["config"])
settings = cut_to_context(dict(job.params.settings), limit)
if settings != dict(job.params.settings):
    job.log.info("max_length cut to the model's %d positions (cut_to_context)", limit)
kind = settings["kind"]
corpus = encode_corpus(kind, list(job.input.data), job.tokenizer(), settings)
write_encoded(job.output[0], corpus)
lengths = corpus.attention_mask.sum(axis=1)
job.log.info(
    "corpus %s (kind %s): %d sequences, mean real length %.1f (max %d), %d dropped as too long",
    job.wildcards.corpus,
    kind,
    len(corpus.meta),
    lengths.mean(),
    lengths.max(),
    corpus.dropped,
)
