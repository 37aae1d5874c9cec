"""Outputs of the heads family: the atlas of head roles, from its own pass over the repeated
corpus (kind repeated_random) and the tables the other families make for the same model."""

from attnscope.analyses.heads.roles import threshold_problems
from attnscope.pipeline.job_memory import Memory
from attnscope.pipeline.outputs import Family, Figure, Needs

SCORES = ("role_scores.tsv", "in_context_loss.tsv", "patterns.json")
ROLE_TABLES = ("head_roles.tsv", "role_rules.tsv", "circuits.tsv", "atlas.html")


def problems(settings: dict):
    yield from threshold_problems(settings.get("thresholds", {}))
    if not 0 < settings.get("min_share", 0.1) <= 1:
        yield f"min_share is {settings.get('min_share')}, out of its range (0, 1]"


def tables_corpus(own: dict, other: dict) -> str:
    """The corpus whose weights, norms and attend tables the roles read."""
    return own["tables_corpus"]


FAMILY = Family(
    name="heads",
    title="Head roles (the atlas)",
    tables={"corpus": SCORES + ROLE_TABLES},
    run_pages=("results/heads_overview.html",),
    figures=(Figure("role_grid", "corpus", ("head_roles.tsv", "role_rules.tsv")),),
    problems=problems,
    corpus_kinds={"corpus": ("repeated_random",)},
    # each role reads its family's table where the run makes it (optional: else not judged)
    needs=(
        Needs("weights", tables=lambda s: ("heads.tsv",), corpus=tables_corpus, optional=True),
        Needs("norms", tables=lambda s: ("sink_heads.tsv",), corpus=tables_corpus, optional=True),
        Needs(
            "probing",
            tables=lambda s: ("syntax_heads.tsv", "syntax_best.tsv"),
            corpus=lambda own, other: other["syntax_corpus"],
            optional=True,
        ),
        Needs(
            "probing",
            tables=lambda s: ("coref_heads.tsv", "coref_best.tsv"),
            corpus=lambda own, other: other["coref_corpus"],
            optional=True,
        ),
        Needs(
            "position",
            tables=lambda s: ("rotary_positional_heads.tsv",),
            corpus=lambda own, other: other["corpus"],
            optional=True,
        ),
        Needs("attend", tables=lambda s: ("groups.tsv",), corpus=tables_corpus, optional=True),
    ),
    jobs={
        "heads_scores": Memory(unestimated="no formula yet"),
        "heads_roles": Memory(unestimated="joins the families' tables, no model"),
    },
    local_rules=("heads_overview",),  # one page over the models' tables
)
