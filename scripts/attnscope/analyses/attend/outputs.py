"""Outputs of the attend family: why heads attend where they do, the attention logit split
into query-side x key-side components (`maps.attend`) and aggregated over a corpus (`lift`),
and grouped by block, upstream head and residual direction (`groups`)."""

from attnscope.pipeline.job_memory import FLOAT, MB, Memory, Sizes
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


WEIGHTINGS = 7  # the attended keys and an encoder's 6 key classes (`lift.key_weights`)
FIXED = 16 * MB  # the pass's cost at any size (its first sequence's calls)


def compute_bytes(size: Sizes, budget_mb: float, settings: dict) -> int:
    """5 C n d 4 + 3 H K n^2 4 + 16 MiB, C = 2 + L (H + 1), K = 7: one sequence's split, its
    normed copy, the queries and keys of every head by component and one weighting's key
    difference (each [C, n, d]); the K weightings of every head [H, K, n, n]; the pass's
    fixed cost (a `component_window` w > 0: C = 2 + min(L, w + 1) (H + 1))."""
    window = settings.get("component_window", 0)
    layers = min(size.L, window + 1) if window else size.L
    components = 2 + layers * (size.H + 1)
    n, d = size.n, size.d
    return 5 * components * n * d * FLOAT + 3 * size.H * WEIGHTINGS * n * n * FLOAT + FIXED


def one_sequence(config: dict, settings: dict) -> int:
    return 1


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
    jobs={"attend_compute": Memory(compute_bytes, batch=one_sequence)},
)
