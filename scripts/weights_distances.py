"""JS distances between all heads, their MDS map, clustering and behaviour (Clark 2019)."""

import pandas as pd

from attnscope.analyses.weights import head_distances as hd
from attnscope.analyses.weights.statistics import behaviour
from attnscope.core.store import HiddenStates
from attnscope.pipeline import runlog
from attnscope.pipeline.models import open_model

log = runlog.start(snakemake)  # noqa: F821
params = snakemake.params  # noqa: F821
output = snakemake.output  # noqa: F821
loaded = open_model(snakemake.input.manifest, params.device, log)  # noqa: F821
weights, device = loaded.weights, loaded.device
L, H = weights.n_layers, weights.n_heads
with HiddenStates(snakemake.input.hidden_states) as store:  # noqa: F821
    limit = params.n_sequences or None
    D = hd.head_distances(store, weights, params.batch_size, device, limit, log)
embedding = hd.mds_embedding(D, params.seed, params.mds_n_init, params.mds_max_iter)
clusters, Z = hd.cluster_heads(D, params.cluster_method, params.n_clusters)
heads = pd.read_csv(snakemake.input.heads, sep="\t")  # noqa: F821
labels = behaviour(heads, params.broad_entropy, params.special_mass, params.position_mass)
hd.distance_table(D, L, H).to_csv(output.distances, sep="\t", index=False)
hd.head_map_table(embedding, clusters, labels, L, H).to_csv(output.head_map, sep="\t", index=False)
hd.linkage_table(Z).to_csv(output.linkage, sep="\t", index=False)
log.info("wrote %s, %s and %s", output.distances, output.head_map, output.linkage)
