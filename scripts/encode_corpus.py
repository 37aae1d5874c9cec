"""Encode one configured corpus for one model's tokenizer into encoded.h5."""

from attnscope.core.store import write_encoded
from attnscope.data.corpora import encode_corpus
from attnscope.pipeline.job import Job

job = Job(snakemake)
settings = dict(job.params.settings)
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
