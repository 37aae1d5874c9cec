"""Outputs of the norm-based analysis (Kobayashi et al. 2020), with attention sinks (Xiao et
al. 2023, Gu et al. 2024) and massive activations (Sun et al. 2024) from the same pass, and
the attention-sink card (`SINK_CARD`, the rule norms_sink_card: `sink_card.py`)."""

from attnscope.maps.storage import map_bytes as stored_map_bytes
from attnscope.pipeline.outputs import Family, Figure, ModelShape

SINK_CARD = (
    "sink_heads.tsv",
    "sink_epsilon.tsv",
    "sink_stream.tsv",
    "sink_kobayashi.tsv",
    "massive_dimensions.tsv",
    "massive_intervention.tsv",
    "sink_kinds.tsv",
    "sink_stream_kinds.tsv",
)
"""The sink card's tables: the rule norms_sink_card's, not norms_compute's; they need every
layer (Sink^eps counts every head, the control and the intervention run the whole depth)."""


def map_bytes(settings: dict, n_layers: int, n_sequences: int, length: int) -> dict[str, int]:
    """attn_n_maps.h5: one [N, L, L] map per layer (each row's top k with `maps_top_k`)."""
    top_k = settings.get("maps_top_k", 0)
    return {
        "attn_n_maps.h5": n_layers
        * stored_map_bytes(n_sequences, length, settings["maps_dtype"], top_k)
    }


def part_bytes(
    settings: dict, shape: ModelShape, n_sequences: int, length: int, layers: int
) -> int:
    """A shard's `NormsAccumulator` for its `layers` of the model's `shape.n_layers`: per
    category (4), a Spearman sample (`BottomKSample`) of at most `spearman_sample_size` rows
    and fewer than a quarter of that buffered, of 4 float64 fields and a float64 key, in all
    no more rows than the shard's pairs (N x layers x H x length^2); the whole model's moments
    (under 48 float64 per layer and head, 32 per layer), and the massive activations' counts
    per dimension (at most the width per state)."""
    L, H = shape.n_layers, shape.n_heads
    size = settings["spearman_sample_size"]
    rows = min(4 * (size + size // 4), n_sequences * layers * H * length**2)
    return 8 * (rows * (4 + 1) + 48 * L * H + 32 * L + (L + 1) * (shape.d_model + 16))


def problems(settings: dict):
    if settings["scatter_max_points"] > settings["spearman_sample_size"]:
        yield "scatter_max_points must not exceed spearman_sample_size"


FAMILY = Family(
    name="norms",
    title="Vector norms (Kobayashi et al. 2020)",
    tables={
        "corpus": (
            "x_dispersion.tsv",
            "fx_dispersion.tsv",
            "x_summary.tsv",
            "fx_summary.tsv",
            "alpha_fx_spearman.tsv",
            "alpha_fx_sample.tsv",
            "sep_heads.tsv",
            "token_class_layer.tsv",
            "attention_sinks.tsv",
            "massive_activations.tsv",
            "decomposition_check.tsv",
            "attn_n_maps.h5",
            *SINK_CARD,
        ),
        "model": ("affine_singular_values.tsv",),
    },
    figures=(
        Figure("alpha_fx_scatter", "corpus", ("alpha_fx_sample.tsv", "alpha_fx_spearman.tsv")),
        Figure("sep_heads", "corpus", ("sep_heads.tsv",)),
        Figure("token_class_layer", "corpus", ("token_class_layer.tsv",)),
        Figure("attention_sinks", "corpus", ("attention_sinks.tsv",)),
        Figure("massive_activations", "corpus", ("massive_activations.tsv",)),
        Figure(
            "sink_card",
            "corpus",
            ("sink_epsilon.tsv", "sink_stream.tsv", "sink_kobayashi.tsv"),
        ),
        Figure("affine_singular_values", "model", ("affine_singular_values.tsv",), ("seed",)),
    ),
    problems=problems,
    map_bytes=map_bytes,
    part_bytes=part_bytes,
    shard_maps=("attn_n_maps.h5",),
    every_layer=SINK_CARD,
)
