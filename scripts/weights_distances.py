"""JS distances between all heads, their MDS map, clustering and behaviour (Clark 2019), from
every layer's attention one batch at a time (walked as the loading route allows:
`LoadedModel.layer_blocks`)."""

from pathlib import Path

import pandas as pd

from attnscope.analyses.weights import head_distances as hd
from attnscope.analyses.weights.behaviours import behaviour
from attnscope.analyses.weights.settings import DistanceSettings
from attnscope.core.store import HiddenStates
from attnscope.pipeline.job import Job

job = Job(snakemake)
log, settings, output = job.log, job.settings(DistanceSettings), job.output
loaded = job.model()
L, H = loaded.weights.n_layers, loaded.weights.n_heads
with HiddenStates(job.input.hidden_states) as store:
    limit, batch_size = settings.limit, settings.batch_size
    columns = hd.entries_columns(store, batch_size, loaded.weights.causal, limit)
    scratch = Path(output.distances).parent  # the layer-streamed route's spool
    entries = loaded.layer_blocks(
        store, batch_size, hd.attention_entries, columns, scratch, limit, log
    )
    D = hd.head_distances(entries, log)
embedding = hd.mds_embedding(D, settings.seed, settings.mds_n_init, settings.mds_max_iter)
clusters, Z = hd.cluster_heads(D, settings.cluster_method, settings.n_clusters)
heads = pd.read_csv(job.input.heads, sep="\t")
labels = behaviour(heads, settings.broad_entropy, settings.special_mass, settings.position_mass)
job.write_table(hd.distance_table(D, L, H), output.distances)
job.write_table(hd.head_map_table(embedding, clusters, labels, L, H), output.head_map)
job.write_table(hd.linkage_table(Z), output.linkage)
log.info("wrote %s, %s and %s", output.distances, output.head_map, output.linkage)
