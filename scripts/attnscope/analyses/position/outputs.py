"""Outputs of the position analyses (Yamamoto & Matsuzaki)."""

from attnscope.pipeline.outputs import Family, Figure

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
)
