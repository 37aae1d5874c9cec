"""k-means over the tr_t(A) vectors: cluster shares per head and cluster centres."""

import pandas as pd

from attnscope.analyses.position.diagonals import cluster_profiles
from attnscope.pipeline.job import Job

job = Job(snakemake)
params = job.params
trt = pd.read_csv(job.input.trt, sep="\t")
shares, centres = cluster_profiles(trt, params.n_clusters, params.seed)
job.log.info("%d vectors in %d clusters", len(trt) // trt["t"].nunique(), centres["cluster"].max())
job.write_table(shares, job.output.shares)
job.write_table(centres, job.output.centres)
