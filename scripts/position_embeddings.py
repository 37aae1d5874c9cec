"""Spectra and PCA of a model's position embeddings, with the word-embedding control
("not applicable" tables for a rotary model, which has none)."""

import h5py

from attnscope.analyses.position.embeddings import (
    embedding_spectra,
    first_full_input,
    pca_cumulative_variance,
)
from attnscope.core import applicability
from attnscope.core.tables import not_applicable
from attnscope.pipeline.job import Job

job = Job(snakemake)
log, loaded = job.log, job.model(on_cpu=True)  # weights only
manifest, weights = loaded.manifest, loaded.weights
reason = applicability.reason("position.embeddings", weights)
if reason is not None:
    log.info("%s is a rotary model: no position embeddings", manifest["name"])
    spectra = pca = not_applicable(reason)
else:
    with h5py.File(job.input.encoded, "r") as f:
        pieces = first_full_input(f["input_ids"][()], f["attention_mask"][()])
    log.info(
        "%s: position embeddings %s, control input of %d pieces",
        manifest["name"],
        tuple(weights.position_embeddings.shape),
        len(pieces),
    )
    spectra = embedding_spectra(weights.position_embeddings, weights.word_embeddings, pieces)
    pca = pca_cumulative_variance(weights.position_embeddings)
    for k in (4, 12):
        if k <= len(pca):
            log.info(
                "cumulative variance at %d components: %.4f", k, pca.cumulative_variance[k - 1]
            )
job.write_table(spectra, job.output.spectrum)
job.write_table(pca, job.output.pca)
