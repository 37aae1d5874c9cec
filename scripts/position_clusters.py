"""k-means over the tr_t(A) vectors: cluster shares per head and cluster centres."""

import pandas as pd

from attnscope.analyses.position.diagonals import cluster_profiles
from attnscope.pipeline import runlog

log = runlog.start(snakemake)  # noqa: F821
params = snakemake.params  # noqa: F821
trt = pd.read_csv(snakemake.input.trt, sep="\t")  # noqa: F821
shares, centres = cluster_profiles(trt, params.n_clusters, params.seed)
log.info("%d vectors in %d clusters", len(trt) // trt["t"].nunique(), centres["cluster"].max())
shares.to_csv(snakemake.output.shares, sep="\t", index=False)  # noqa: F821
centres.to_csv(snakemake.output.centres, sep="\t", index=False)  # noqa: F821
