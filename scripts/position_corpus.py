"""The corpus-level position analyses: tr_t(A), spectra of X/Q/K, eigen-waves, xcov/xcorr, and
the identity checks, in one streaming pass over the stored layer inputs."""

from attnscope.analyses.position import scan as position_scan
from attnscope.analyses.position.diagonals import select_heads
from attnscope.core.store import HiddenStates
from attnscope.pipeline import runlog
from attnscope.pipeline.models import open_model

log = runlog.start(snakemake)  # noqa: F821
params = snakemake.params  # noqa: F821
output = snakemake.output  # noqa: F821
loaded = open_model(snakemake.input.manifest, params.device, log)  # noqa: F821
manifest, weights, device = loaded.manifest, loaded.weights, loaded.device
with HiddenStates(snakemake.input.hidden_states) as store:  # noqa: F821
    log.info("%s: %d sequences on %s", manifest["name"], store.n_sequences, device)
    result = position_scan.scan(
        store,
        weights,
        t_max=params.t_max,
        xcorr_t_max=params.xcorr_t_max,
        include_bias=params.include_bias,
        batch_size=params.batch_size,
        device=device,
        log=log,
    )
heads = select_heads(position_scan.mean_trt(result), result.offsets, params.heads)
log.info("heads for g(f, theta) and xcorr (layer, head): %s", heads)
position_scan.identity_table(result).to_csv(output.identity, sep="\t", index=False)
position_scan.xcov_sum_table(result).to_csv(output.xcov_sum, sep="\t", index=False)
name, worst = result.worst_identity()
log.info("largest relative identity residual: %s %.3g", name, worst)
if worst > position_scan.IDENTITY_TOLERANCE:
    raise RuntimeError(f"identity {name} fails: relative residual {worst:.3g}")
position_scan.trt_table(result).to_csv(output.trt, sep="\t", index=False)
position_scan.spectra_table(result).to_csv(output.spectra, sep="\t", index=False)
position_scan.shifts_table(result).to_csv(output.shifts, sep="\t", index=False)
position_scan.g_map_table(result, heads).to_csv(output.g_map, sep="\t", index=False)
position_scan.xcorr_table(result, heads).to_csv(output.xcorr, sep="\t", index=False)
