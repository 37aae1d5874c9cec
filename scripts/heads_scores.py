"""The heads family's pass over the repeated corpus: induction, duplicate-token and
previous-token scores per head, the in-context loss (a causal LM), and the atlas cards'
small attention patterns on it and on the natural corpus."""

import json

from attnscope.analyses.heads.patterns import natural_pattern, repeated_pattern
from attnscope.analyses.heads.repeat_scores import in_context_loss, role_scores
from attnscope.analyses.heads.settings import ScoresSettings
from attnscope.core import applicability
from attnscope.core.files import write_table, write_text
from attnscope.core.store import HiddenStates
from attnscope.core.tables import layer_rows, not_applicable
from attnscope.core.tokens import piece_labels
from attnscope.pipeline.job import Job

job = Job(snakemake)
log, settings, output = job.log, job.settings(ScoresSettings), job.output
causal = job.manifest["lm_head"] == "causal"  # the head is loaded for the loss alone
loaded = job.model(with_head=causal)
no_loss = applicability.reason("heads.in_context_loss", loaded.weights, loaded.lm_head)
tokenizer = job.tokenizer()


def labels(ids):
    return piece_labels(tokenizer, ids)


with HiddenStates(job.input.hidden_states) as store:
    scores = role_scores(store, loaded.weights, settings.batch_size, settings.device)
    write_table(layer_rows(scores, [l + 1 for l in store.layers]), output.role_scores)
    if no_loss is not None:
        loss = not_applicable(no_loss)
    elif not store.stores(store.n_layers):
        loss = not_applicable("layers: leaves out the last layer, whose output the head reads")
    else:
        loss = in_context_loss(
            store, loaded.head, loaded.weights.final_ln, settings.batch_size, settings.device
        )
    write_table(loss, output.in_context_loss)
    repeated = repeated_pattern(store, loaded.weights, settings.pattern_pieces, labels)
with HiddenStates(job.input.natural_states) as store:
    natural = natural_pattern(store, loaded.weights, settings.pattern_pieces, labels)
write_text(json.dumps({"natural": natural, "repeated": repeated}), output.patterns)
log.info("wrote the role scores of %s", job.wildcards.model)
