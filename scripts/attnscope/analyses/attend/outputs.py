"""Outputs of the attend family: why heads attend where they do, the attention logit split
into query-side x key-side components (`maps.attend`) and aggregated over a corpus (`lift`)."""

from attnscope.pipeline.outputs import Family, Figure

TABLES = ("lift.tsv", "key_classes.tsv", "bands.tsv", "trt_terms.tsv", "decomposition_check.tsv")

FAMILY = Family(
    name="attend",
    title="Why heads attend (logit split by component)",
    tables={"corpus": TABLES},
    figures=(
        Figure("lift_pairs", "corpus", ("lift.tsv", "key_classes.tsv"), ("figure_heads",)),
        Figure("trt_terms", "corpus", ("trt_terms.tsv",), ("figure_heads",)),
    ),
)
