"""The attention-sink card of one model on one corpus (`analyses/norms/sink_card.py`): Sink^eps
with its repeated-token control (a second forward of the model, whole or layer by layer), the
first position's weight along the stream, Kobayashi's view summarised, Sun et al.'s massive
dimensions and, for a causal LM, the loss when they are zeroed or set to their mean."""

from pathlib import Path

import h5py
import pandas as pd

from attnscope.analyses.norms.massive_activations import massive_dimensions
from attnscope.analyses.norms.massive_intervention import massive_intervention
from attnscope.analyses.norms.sink_card import (
    kobayashi_summary,
    repeated_token_ids,
    sink_attention,
    sink_epsilon,
    sink_heads,
    sink_stream,
)
from attnscope.core import files
from attnscope.core.layer_kinds import kind_summary, read_layer_kinds, with_layer_kinds
from attnscope.core.store import TOKEN_ARRAYS, HiddenStates
from attnscope.core.tables import not_applicable
from attnscope.pipeline.extract import ExtractSettings
from attnscope.pipeline.job import Job

job = Job(snakemake)
log, params, output = job.log, job.params, job.output
loaded = job.model(with_head=True)
weights, device, batch_size = loaded.weights, loaded.device, params.batch_size
tokenizer = job.tokenizer()
with HiddenStates(job.input.hidden_states) as store:
    limit = params.sink_sequences or len(store.lengths)
    found = sink_attention(store, weights, params.sink_positions, batch_size, device, limit)
    with files.scratch_folder(Path(output.heads).parent, "sink-control-") as scratch:
        encoded, states = scratch / "encoded.h5", scratch / "states.h5"
        with h5py.File(encoded, "w") as f:
            for name in TOKEN_ARRAYS:
                f[name] = getattr(store, name)[:limit]
            f["input_ids"][...] = repeated_token_ids(f["input_ids"][...], f["category"][...])
        loaded.extract_states(encoded, states, ExtractSettings(batch_size))
        log.info("repeated-token control extracted on the %s route", loaded.route)
        with HiddenStates(states) as control_store:
            control = sink_attention(
                control_store, weights, params.sink_positions, batch_size, device
            )
    heads = sink_heads(found, control, params.sink_epsilon)
    job.write_table(heads, output.heads)
    job.write_table(sink_epsilon(heads, params.sink_epsilon, params.sink_positions), output.epsilon)
    stream = sink_stream(found, store.length)
    job.write_table(stream, output.stream)
    sinks = pd.read_csv(job.input.attention_sinks, sep="\t")
    job.write_table(kobayashi_summary(sinks), output.kobayashi)
    # local (sliding) and global layers apart (`core.layer_kinds.kind_summary`)
    kinds = read_layer_kinds(job.input.layer_kinds)
    columns = ["alpha_first", "sink", "alpha_first_control", "sink_control"]
    job.write_table(kind_summary(with_layer_kinds(heads, kinds), columns), output.kinds)
    by_bin = ("bin", "position_from", "position_to")
    stream_kinds = kind_summary(with_layer_kinds(stream, kinds), ["alpha_first"], by_bin)
    job.write_table(stream_kinds, output.stream_kinds)

    hidden = ((s, store.hidden(s)) for s in range(weights.n_layers + 1))
    massive = massive_dimensions(
        hidden, store.attention_mask, store.input_ids, tokenizer.convert_ids_to_tokens
    )
    job.write_table(massive, output.massive)
    log.info("%d massive entries in %d states", len(massive), massive["state"].nunique())
    if loaded.manifest.get("lm_head") != "causal" or loaded.head is None:
        intervention = not_applicable("no causal LM head")
    else:
        intervention = massive_intervention(
            store, massive, weights, loaded.head, batch_size, device
        )
    job.write_table(intervention, output.intervention)
log.info("wrote the sink card of %s", job.wildcards.model)
