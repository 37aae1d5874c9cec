"""Encode one configured corpus for one model's tokenizer into encoded.h5."""

from transformers import AutoTokenizer

from attnscope.core.store import write_encoded
from attnscope.data.corpora import encode_corpus
from attnscope.pipeline import runlog
from attnscope.pipeline.models import check_model_unchanged, read_manifest

log = runlog.start(snakemake)
settings = dict(snakemake.params.settings)
kind = settings["kind"]
manifest = read_manifest(snakemake.input.manifest)
check_model_unchanged(manifest, snakemake.input.manifest)
tokenizer = AutoTokenizer.from_pretrained(manifest["path"])
corpus = encode_corpus(kind, list(snakemake.input.data), tokenizer, settings)
write_encoded(snakemake.output[0], corpus)
lengths = corpus.attention_mask.sum(axis=1)
log.info(
    "corpus %s (kind %s): %d sequences, mean real length %.1f (max %d), %d dropped as too long",
    snakemake.wildcards.corpus,
    kind,
    len(corpus.meta),
    lengths.mean(),
    lengths.max(),
    corpus.dropped,
)
