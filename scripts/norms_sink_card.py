"""The attention-sink card of one model on one corpus (`analyses/norms/sink_card.py`): Gu et
al.'s Sink^eps on the corpus's first pieces and on the repeated-token inputs (one more forward
of the model, whole or layer by layer), the first position's weight along the stream,
Kobayashi's view summarised, Sun et al.'s massive dimensions and, for a causal LM, the loss
and perplexity when those that carry the sink are zeroed or set to their mean."""

from pathlib import Path

import h5py
import numpy as np
import pandas as pd

from attnscope.analyses.norms.massive_activations import massive_dimensions
from attnscope.analyses.norms.massive_intervention import massive_intervention
from attnscope.analyses.norms.settings import SinkCardSettings
from attnscope.analyses.norms.sink_card import (
    INPUTS,
    first_key_importance,
    kobayashi_summary,
    sink_epsilon,
    sink_heads,
    sink_inputs,
    sink_stream,
    stream_attention,
)
from attnscope.core import applicability, files
from attnscope.core.layer_kinds import kind_summary, read_layer_kinds, with_layer_kinds
from attnscope.core.store import TOKEN_ARRAYS, HiddenStates
from attnscope.core.tables import not_applicable
from attnscope.model.extract import ExtractSettings
from attnscope.pipeline.job import Job

job = Job(snakemake)
settings = job.settings(SinkCardSettings)
log, output = job.log, job.output
loaded = job.model(with_head=True)
weights, device, T = loaded.weights, loaded.device, settings.sink_positions
batch_size = settings.batch_size
tokenizer = job.tokenizer()
with HiddenStates(job.input.hidden_states) as store:
    limit = settings.sink_sequences or store.n_sequences
    tokens = {name: getattr(store, name)[:limit] for name in TOKEN_ARRAYS}
    inputs = sink_inputs(tokens, T)
    M = int(inputs.pop("kept").sum())
    log.info(
        "Sink^eps: %d of the first %d sequences have %d pieces", M, len(tokens["input_ids"]), T
    )
    if M == 0:
        reason = f"no sequence of at least sink_positions = {T} pieces"
        heads = epsilon = not_applicable(reason)
    else:
        with files.scratch_folder(Path(output.heads).parent, "sink-inputs-") as scratch:
            encoded, states = scratch / "encoded.h5", scratch / "states.h5"
            with h5py.File(encoded, "w") as f:
                for name, values in inputs.items():
                    f[name] = values
            loaded.extract_states(encoded, states, ExtractSettings(batch_size))
            log.info("Sink^eps inputs extracted on the %s route", loaded.route)
            with HiddenStates(states) as sink_store:
                found = first_key_importance(sink_store, weights, batch_size, device)
        importance = dict(zip(INPUTS, np.split(found, len(INPUTS)), strict=True))
        heads = sink_heads(importance, settings.sink_epsilon)
        epsilon = sink_epsilon(heads, settings.sink_epsilon, T)
    job.write_table(heads, output.heads)
    job.write_table(epsilon, output.epsilon)
    stream = sink_stream(stream_attention(store, weights, batch_size, device, limit), store.length)
    job.write_table(stream, output.stream)
    sinks = pd.read_csv(job.input.attention_sinks, sep="\t")
    job.write_table(kobayashi_summary(sinks), output.kobayashi)
    # local (sliding) and global layers apart (`core.layer_kinds.kind_summary`)
    kinds = read_layer_kinds(job.input.layer_kinds)
    if M == 0:
        job.write_table(heads, output.kinds)
    else:
        rates = [f"{name}_{input}" for input in INPUTS[1:] for name in ("importance", "sink_rate")]
        columns = ["importance", "sink_rate", "sink_pooled", *rates]
        job.write_table(kind_summary(with_layer_kinds(heads, kinds), columns), output.kinds)
    by_bin = ("bin", "position_from", "position_to")
    stream_kinds = kind_summary(with_layer_kinds(stream, kinds), ["alpha_first"], by_bin)
    job.write_table(stream_kinds, output.stream_kinds)

    hidden = ((s, store.hidden(s, 0, limit)) for s in range(weights.n_layers + 1))
    massive = massive_dimensions(
        hidden, tokens, tokenizer.convert_ids_to_tokens, settings.criterion
    )
    job.write_table(massive, output.massive)
    log.info("%d massive entries in %d states", len(massive), massive["state"].nunique())
    no_head = applicability.reason("norms.intervention", weights, loaded.lm_head)
    if no_head is not None:
        intervention = not_applicable(no_head)
    else:
        intervention = massive_intervention(
            store, massive, weights, loaded.head, batch_size, device, limit
        )
    job.write_table(intervention, output.intervention)
log.info("wrote the sink card of %s", job.wildcards.model)
