"""k-means over the tr_t(A) vectors: cluster shares per head and cluster centres."""

import pandas as pd

from attnscope.analyses.position.diagonals import cluster_profiles
from attnscope.core.files import write_table
from attnscope.pipeline import runlog

log = runlog.start(snakemake)
params = snakemake.params
trt = pd.read_csv(snakemake.input.trt, sep="\t")
shares, centres = cluster_profiles(trt, params.n_clusters, params.seed)
log.info("%d vectors in %d clusters", len(trt) // trt["t"].nunique(), centres["cluster"].max())
write_table(shares, snakemake.output.shares)
write_table(centres, snakemake.output.centres)
