"""Rotary models: the logits split by frequency band (`analyses.position.rotary`), their
offset profiles and positional shares, and which bands carry the positional heads' preference;
"not applicable" tables for models with learned position embeddings."""

import pandas as pd

from attnscope.analyses.position import rotary
from attnscope.analyses.position.settings import RotarySettings
from attnscope.core import applicability, checks
from attnscope.core.layer_kinds import read_layer_kinds, with_layer_kinds
from attnscope.core.store import HiddenStates
from attnscope.core.tables import layer_rows, not_applicable
from attnscope.pipeline.job import Job

job = Job(snakemake)
log, settings, output = job.log, job.settings(RotarySettings), job.output
loaded = job.model()
weights = loaded.weights
reason = applicability.reason("position.rotary", weights)
if reason is not None:
    log.info("%s has learned position embeddings: no rotary bands", loaded.manifest["name"])
    skipped = not_applicable(reason)
    for path in output:
        job.write_table(skipped, path)
else:
    with HiddenStates(job.input.hidden_states) as store:
        result = rotary.rotary_pass(
            store,
            weights,
            t_max=settings.t_max,
            batch_size=settings.batch_size,
            device=loaded.device,
        )
        lengths = store.lengths
    residuals = checks.ResidualLog(rotary.BOUND, log, "rotary")
    chosen = [l + 1 for l in store.layers]  # the tables' rows: the layers the store was made for
    for layer in chosen:
        worst = result.residual_abs[layer - 1], result.residual[layer - 1]
        residuals.record(layer, "bands", *map(float, worst))
    job.write_table(residuals.table(), output.check)
    offsets = layer_rows(rotary.offset_table(result), chosen)
    kinds = read_layer_kinds(job.input.layer_kinds)
    bands = with_layer_kinds(layer_rows(rotary.band_table(result), chosen), kinds)
    job.write_table(bands, output.bands)
    job.write_table(rotary.band_ranking(bands), output.ranking)
    job.write_table(offsets, output.offsets)
    heads = rotary.positional_heads(pd.read_csv(job.input.trt, sep="\t"), lengths)
    log.info("positional heads (layer, head, behaviour): %s", heads.to_numpy().tolist())
    pairs = list(heads[["layer", "head"]].itertuples(index=False, name=None))
    if pairs:
        by_band = rotary.positional_heads_by_band(offsets, pairs)
        table = heads.merge(by_band, on=["layer", "head"])
    else:
        table = not_applicable("no head puts over half its attention on the previous token or self")
    job.write_table(table, output.heads)
