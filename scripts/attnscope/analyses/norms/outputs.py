"""Outputs of the norm-based analysis (Kobayashi et al. 2020), with attention sinks (Xiao et
al. 2023, Gu et al. 2024) and massive activations (Sun et al. 2024) from the same pass, and
the attention-sink card (`SINK_CARD`, the rule norms_sink_card: `sink_card.py`)."""

from attnscope.maps.storage import map_bytes as stored_map_bytes
from attnscope.pipeline.job_memory import FLOAT, Memory, Sizes, budget_bytes
from attnscope.pipeline.outputs import Family, Figure, ModelShape
from attnscope.pipeline.user_config import corpus_for_model

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


def compute_bytes(size: Sizes, budget_mb: float, settings: dict) -> int:
    """A + 4 M + B H n d 4 + min(budget, 3 B H n^2 8): alpha, f(x), the norm chunks (the
    float64 quadratic form, a query chunk of memory_budget_mb at most)."""
    norms = size.B * size.H * size.n * size.d * FLOAT
    chunks = min(budget_bytes(budget_mb), 6 * size.attn_weights)
    return size.attn_weights + 4 * size.one_map + norms + chunks


def sink_card_bytes(size: Sizes, budget_mb: float, settings: dict) -> int:
    """max(the extraction's, W): the repeated-token control's forward, then the next-token
    loss of the massive-activation intervention (a causal LM). Not counted: the
    intervention's states (the whole corpus's state at one layer, [N, n, d] float32, and its
    edited copies)."""
    return max(size.states, size.logits)


def sink_positions(config: dict):
    """Every norms corpus, as each model reads it, is at least `sink_positions` pieces long
    (`max_length`): Gu et al.'s Sink^eps reads each sequence's first that many pieces, and
    leaves shorter sequences out."""
    norms = config["analyses"]["norms"]
    if not norms.get("enabled", True):
        return
    positions = norms.get("sink_positions", 64)
    for corpus in norms.get("corpora", []):
        if corpus not in config["corpora"]:
            continue  # named by the corpus checks
        for model in config["models"]:
            length = corpus_for_model(config, model, corpus)["max_length"]
            if length < positions:
                yield (
                    f"analyses.norms.sink_positions is {positions}, but corpora.{corpus}."
                    f"max_length is {length} for model {model!r}: Sink^eps reads each "
                    "sequence's first sink_positions pieces; lower sink_positions or raise "
                    "max_length"
                )


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
    jobs={
        "norms_affine": Memory(unestimated="no formula yet (the model's weights, no batch)"),
        "norms_shard": Memory(unestimated="a layer shard's part of norms_compute"),
        "norms_compute": Memory(compute_bytes),
        "norms_sink_card": Memory(sink_card_bytes),
    },
    # Sink^eps's length: after every other setting's, so that it never hides another error
    last_checks=sink_positions,
)
