"""Outputs of the attention-weight analyses (Clark et al. 2019)."""

from attnscope.pipeline.job_memory import FLOAT, Memory, Sizes
from attnscope.pipeline.outputs import Family, Figure, ModelShape


def part_bytes(
    settings: dict, shape: ModelShape, n_sequences: int, length: int, layers: int
) -> int:
    """A shard's `StatisticsAccumulator`: a float64 sum and count per head statistic (under
    16), layer and head."""
    return 8 * (2 * 16 * shape.n_layers * shape.n_heads + 2)


def stats_bytes(size: Sizes, budget_mb: float, settings: dict) -> int:
    """A + 4 M: alpha, its mask, one head's temporaries."""
    return size.attn_weights + 4 * size.one_map


def distances_bytes(size: Sizes, budget_mb: float, settings: dict) -> int:
    """L A + 2 M: every layer's attention of one batch of `distance_batch_size` (one
    layer's on the layer-streamed route)."""
    return size.L * size.attn_weights + 2 * size.one_map


def gradients_bytes(size: Sizes, budget_mb: float, settings: dict) -> int:
    """(2 L + 5) A + 12 L B n d 4 + W: every layer's attention and its gradient kept for the
    backward, the layers' activations, the importance sums in float64, the loss (one layer
    on the layer-streamed route)."""
    activations = 12 * size.L * size.B * size.n * size.d * FLOAT
    return (2 * size.L + 5) * size.attn_weights + activations + size.logits


def distance_batch(config: dict, settings: dict) -> int:
    return settings.get("distance_batch_size", config["batch_size"])


SHARD = "a layer shard's part of weights_stats: at most its estimate"

FAMILY = Family(
    name="weights",
    title="Attention weights (Clark et al. 2019)",
    tables={
        "corpus": (
            "heads.tsv",
            "layers.tsv",
            "gradients.tsv",
            "head_distances.tsv",
            "head_map.tsv",
            "linkage.tsv",
        )
    },
    figures=(
        Figure("relative_position", "corpus", ("heads.tsv",)),
        Figure("special_tokens", "corpus", ("heads.tsv", "layers.tsv")),
        Figure("entropy", "corpus", ("heads.tsv", "layers.tsv")),
        Figure("gradients", "corpus", ("gradients.tsv",)),
        Figure("head_map", "corpus", ("head_map.tsv",)),
        Figure("dendrogram", "corpus", ("head_map.tsv", "linkage.tsv")),
    ),
    part_bytes=part_bytes,
    # the backward pass runs through every layer; the distances compare every head at once
    every_layer=("gradients.tsv", "head_distances.tsv", "head_map.tsv", "linkage.tsv"),
    jobs={
        "weights_shard": Memory(unestimated=SHARD),
        "weights_stats": Memory(stats_bytes),
        "weights_distances": Memory(
            distances_bytes, batch=distance_batch, streamed=True, every_layer=True
        ),
        "weights_gradients": Memory(gradients_bytes, streamed=True, every_layer=True, lm_head=True),
    },
)
