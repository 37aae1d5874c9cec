"""Spectra and PCA of a model's position embeddings, with the word-embedding control."""

import h5py

from attnscope.analyses.position.embeddings import (
    embedding_spectra,
    first_full_input,
    pca_cumulative_variance,
)
from attnscope.pipeline import runlog
from attnscope.pipeline.models import open_model

log = runlog.start(snakemake)  # noqa: F821
loaded = open_model(snakemake.input.manifest)  # noqa: F821
manifest, weights = loaded.manifest, loaded.weights
with h5py.File(snakemake.input.encoded, "r") as f:  # noqa: F821
    pieces = first_full_input(f["input_ids"][()], f["attention_mask"][()])
log.info(
    "%s: position embeddings %s, control input of %d pieces",
    manifest["name"],
    tuple(weights.position_embeddings.shape),
    len(pieces),
)
spectra = embedding_spectra(weights.position_embeddings, weights.word_embeddings, pieces)
spectra.to_csv(snakemake.output.spectrum, sep="\t", index=False)  # noqa: F821
pca = pca_cumulative_variance(weights.position_embeddings)
pca.to_csv(snakemake.output.pca, sep="\t", index=False)  # noqa: F821
for k in (4, 12):
    if k <= len(pca):
        log.info("cumulative variance at %d components: %.4f", k, pca.cumulative_variance[k - 1])
