"""k-means over the tr_t(A) vectors: cluster shares per head and cluster centres."""

import pandas as pd

from attnscope.analyses.position.diagonals import cluster_profiles
from attnscope.analyses.position.settings import ClusterSettings
from attnscope.pipeline.job import Job

job = Job(snakemake)
settings = job.settings(ClusterSettings)
trt = pd.read_csv(job.input.trt, sep="\t")
shares, centres = cluster_profiles(trt, settings.n_clusters, settings.seed)
job.log.info("%d vectors in %d clusters", len(trt) // trt["t"].nunique(), centres["cluster"].max())
job.write_table(shares, job.output.shares)
job.write_table(centres, job.output.centres)
