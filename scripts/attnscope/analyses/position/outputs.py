"""Outputs of the position analyses (Yamamoto & Matsuzaki)."""

from attnscope.pipeline.job_memory import Memory
from attnscope.pipeline.outputs import Family, Figure, ModelShape


def part_bytes(
    settings: dict, shape: ModelShape, n_sequences: int, length: int, layers: int
) -> int:
    """A shard's `PassResult` (`corpus_pass.PassResult.zeros`), float64: tr_t(A) of every
    sequence [N, L, H, 2 t_max + 1] and, per layer and head, the spectra (window at most the
    length), eigenvalues (complex), eigen-waves, singular values and xcov/xcorr of r = d_head
    components over 2 xcorr_t_max + 1 offsets."""
    L, H, r = shape.n_layers, shape.n_heads, shape.d_head
    T, X = 2 * settings["t_max"] + 1, 2 * settings["xcorr_t_max"] + 1
    per_head = r * (2 + 2 * length + 1 + 2 * X) + X + 4
    return 8 * (n_sequences * L * H * T + 3 * L * (length // 2 + 1) + L * H * per_head)


def heads_exist(config: dict, model):
    """The [layer, head] pairs (1-based) of `analyses.position.heads` exist in `model` and
    lie in its analysed layers (`model.layers`, 0-based)."""
    position = config.get("analyses", {}).get("position", {})
    if not position.get("enabled", True):
        return
    n_layers, n_heads, name = model.n_layers, model.n_heads, model.name
    for layer, head in position.get("heads", []):
        if not 1 <= layer <= n_layers:
            yield (
                f"analyses.position.heads names layer {layer} (head {head}), but model "
                f"{name!r} has {n_layers} layers (1 to {n_layers})"
            )
        if not 1 <= head <= n_heads:
            yield (
                f"analyses.position.heads names head {head} of layer {layer}, but model "
                f"{name!r} has {n_heads} heads per layer (1 to {n_heads})"
            )
        if layer - 1 not in model.layers:
            yield (
                f"analyses.position.heads names layer {layer} (head {head}), which "
                f"layers: {config['layers']} leaves out"
            )


NO_FORMULA = "no formula yet"

FAMILY = Family(
    name="position",
    title="Position (Yamamoto & Matsuzaki)",
    tables={
        "model": (
            "pe_spectrum.tsv",
            "pe_pca.tsv",
            "wa_singular_values.tsv",
            "rotation_angles.tsv",
        ),
        "corpus": (
            "trt.tsv.gz",
            "trt_clusters.tsv",
            "trt_centres.tsv",
            "spectra.tsv",
            "shifts.tsv",
            "g_map.tsv",
            "xcorr.tsv",
            "xcov_sum.tsv",
            "identity_check.tsv",
            "rotary_bands.tsv",
            "rotary_band_ranking.tsv",
            "rotary_offsets.tsv",
            "rotary_positional_heads.tsv",
            "decomposition_check.tsv",
        ),
    },
    figures=(
        Figure("pe_spectrum", "model", ("pe_spectrum.tsv",)),
        Figure("pe_pca", "model", ("pe_pca.tsv",)),
        Figure("wa_singular_values", "model", ("wa_singular_values.tsv",)),
        Figure("rotation_angles", "model", ("rotation_angles.tsv",)),
        Figure("trt_clusters", "corpus", ("trt_clusters.tsv",)),
        Figure("trt_centres", "corpus", ("trt_centres.tsv",)),
        Figure("spectra", "corpus", ("spectra.tsv",)),
        Figure("g_map", "corpus", ("g_map.tsv",)),
        Figure("xcorr", "corpus", ("xcorr.tsv", "xcov_sum.tsv")),
        Figure("pe_spectra_models", "all", ("pe_spectrum.tsv",)),
        Figure("rotary_positional_share", "corpus", ("rotary_bands.tsv",)),
        Figure("rotary_offsets", "corpus", ("rotary_offsets.tsv", "rotary_positional_heads.tsv")),
        Figure("rotary_norms", "corpus", ("rotary_bands.tsv",)),
    ),
    part_bytes=part_bytes,
    jobs={
        "position_embeddings": Memory(unestimated=f"{NO_FORMULA} (the model's weights, no batch)"),
        "position_svd": Memory(unestimated=f"{NO_FORMULA} (the model's weights, no batch)"),
        "position_shard": Memory(unestimated="a layer shard's part of position_corpus"),
        "position_corpus": Memory(unestimated=NO_FORMULA),
        "position_clusters": Memory(unestimated="k-means on the corpus tables, no model"),
        "position_rotary": Memory(unestimated=NO_FORMULA),
    },
    model_checks=heads_exist,
)
