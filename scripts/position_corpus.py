"""The corpus-level position analyses: tr_t(A), spectra of X/Q/K, eigen-waves, xcov/xcorr, and
the identity checks, in one streaming pass over the stored layer inputs: all layers in one job,
one layer shard's (rule position_shard), or the shards gathered. On a rotary model only
tr_t(A) applies (the rest analyse the bilinear form x W^A x^T): its other tables say so."""

from attnscope.analyses.position import corpus_pass as position_pass
from attnscope.analyses.position.diagonals import select_heads
from attnscope.analyses.position.settings import PositionSettings
from attnscope.core import applicability, checks
from attnscope.core.store import analysed_layers
from attnscope.core.tables import layer_rows, not_applicable
from attnscope.pipeline.job import Job
from attnscope.pipeline.shards import sharded_analysis

job = Job(snakemake)
log, settings, output = job.log, job.settings(PositionSettings, besides=("shards",)), job.output
offsets = list(range(-settings.t_max, settings.t_max + 1))


table_layers = analysed_layers(job.input.hidden_states)  # the rows the tables keep


def write(table, path):
    """Write a table with the rows of the layers the store was made for."""
    job.write_table(layer_rows(table, table_layers), path)


def analyse(loaded, store, maps, layers):
    if not applicability.applies("position.corpus", loaded.weights):  # tr_t(A): [N, L, H, T]
        return position_pass.trt_pass(store, loaded.weights, settings, layers)
    return position_pass.corpus_pass(store, loaded.weights, settings, log, layers)


result = sharded_analysis(job, analyse)
if isinstance(result, position_pass.PassResult):
    heads = select_heads(position_pass.mean_trt(result), result.offsets, settings.heads)
    log.info("heads for g(f, theta) and xcorr (layer, head): %s", heads)
    write(position_pass.identity_table(result), output.identity)
    write(position_pass.xcov_sum_table(result), output.xcov_sum)
    name, worst = result.worst_identity()
    log.info("largest relative identity residual: %s %.3g", name, worst)
    checks.require(f"position identity {name} (relative)", worst, position_pass.IDENTITY_TOLERANCE)
    write(position_pass.spectra_table(result), output.spectra)
    write(position_pass.shifts_table(result), output.shifts)
    write(position_pass.g_map_table(result, heads), output.g_map)
    write(position_pass.xcorr_table(result, heads), output.xcorr)
    write(position_pass.trt_table(result.trt, offsets), output.trt)
elif result is not None:
    log.info("rotary model: only tr_t(A) applies")
    skipped = not_applicable(applicability.REASONS["position.corpus"])
    for name in ("identity", "xcov_sum", "spectra", "shifts", "g_map", "xcorr"):
        write(skipped, output[name])
    write(position_pass.trt_table(result, offsets), output.trt)
