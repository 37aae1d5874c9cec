"""Outputs of the attend family: why heads attend where they do, the attention logit split
into query-side x key-side components (`maps.attend`) and aggregated over a corpus (`lift`),
and grouped by block, upstream head and residual direction (`groups`)."""

from attnscope.pipeline.outputs import Family, Figure, Needs

TABLES = (
    "lift.tsv",
    "key_classes.tsv",
    "bands.tsv",
    "trt_terms.tsv",
    "decomposition_check.tsv",
    "groups.tsv",
)


def norms_tables(settings: dict) -> tuple[str, ...]:
    """The norms family's massive dimensions, where the key side is split along them."""
    return ("massive_dimensions.tsv",) if settings["massive_directions"] else ()


FAMILY = Family(
    name="attend",
    title="Why heads attend (logit split by component)",
    tables={"corpus": TABLES},
    figures=(
        Figure("lift_pairs", "corpus", ("lift.tsv", "key_classes.tsv"), ("figure_heads",)),
        Figure("trt_terms", "corpus", ("trt_terms.tsv",), ("figure_heads",)),
    ),
    # the massive dimensions of the direction split (the sink card: every layer's states)
    needs=(Needs("norms", tables=norms_tables),),
)
