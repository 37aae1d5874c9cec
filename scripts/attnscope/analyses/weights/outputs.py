"""Outputs of the attention-weight analyses (Clark et al. 2019)."""

from attnscope.pipeline.outputs import Family, Figure, ModelShape


def part_bytes(
    settings: dict, shape: ModelShape, n_sequences: int, length: int, layers: int
) -> int:
    """A shard's `StatisticsAccumulator`: a float64 sum and count per head statistic (under
    16), layer and head."""
    return 8 * (2 * 16 * shape.n_layers * shape.n_heads + 2)


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
)
