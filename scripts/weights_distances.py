"""JS distances between all heads, their MDS map, clustering and behaviour (Clark 2019): one
batch of every layer's attention at a time, or with `loading: layer-streamed` the layers walked
in order (one layer's weights in memory), every layer's attention entries in a float32 scratch
file beside the output, removed afterwards."""

from pathlib import Path

import pandas as pd

from attnscope.analyses.weights import head_distances as hd
from attnscope.analyses.weights.behaviours import behaviour
from attnscope.core.files import write_table
from attnscope.core.store import HiddenStates
from attnscope.pipeline.job import Job

job = Job(snakemake)
log, params, output = job.log, job.params, job.output
loaded = job.model()
weights, device = loaded.weights, loaded.device
L, H = weights.n_layers, weights.n_heads
with HiddenStates(job.input.hidden_states) as store:
    limit = params.n_sequences or None
    if loaded.route == "whole-model":
        D = hd.head_distances(store, weights, params.batch_size, device, limit, log)
    else:
        folder = Path(output.distances).parent
        D = hd.head_distances_in_scratch(
            store, weights, params.batch_size, folder, device, limit, log
        )
embedding = hd.mds_embedding(D, params.seed, params.mds_n_init, params.mds_max_iter)
clusters, Z = hd.cluster_heads(D, params.cluster_method, params.n_clusters)
heads = pd.read_csv(job.input.heads, sep="\t")
labels = behaviour(heads, params.broad_entropy, params.special_mass, params.position_mass)
write_table(hd.distance_table(D, L, H), output.distances)
write_table(hd.head_map_table(embedding, clusters, labels, L, H), output.head_map)
write_table(hd.linkage_table(Z), output.linkage)
log.info("wrote %s, %s and %s", output.distances, output.head_map, output.linkage)
