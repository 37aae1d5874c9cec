"""Outputs of the probing analyses (Clark et al. 2019, sections 4-5).

Syntax and the probe run on the corpus `syntax_corpus` (UD EWT), coreference on `coref_corpus`
(GAP); each corpus gets only its own tables and figures.
"""

from attnscope.maps.scopes import SCOPES
from attnscope.pipeline.job_memory import Memory
from attnscope.pipeline.outputs import Family, Figure, Needs

MODEL_SOURCES = ("weights", "norms")
# The universal dependency relations of UD v2 (subtypes are folded into them), root excluded:
# heads are scored on arcs between words; `all` pools every relation.
UD_RELATIONS = (
    "acl advcl advmod amod appos aux case cc ccomp clf compound conj cop csubj dep det "
    "discourse dislocated expl fixed flat goeswith iobj list mark nmod nsubj nummod obj obl "
    "orphan parataxis punct reparandum vocative xcomp"
).split()

SYNTAX = (
    "syntax_heads.tsv",
    "syntax_best.tsv",
    "probe_features.h5",
    "probe.tsv",
    "probe_learning_curve.tsv",
)
COREF = ("coref_heads.tsv", "coref_best.tsv")


def problems(settings: dict):
    if not settings["sources"]:
        yield "sources must name at least one map source"
    if settings["syntax_corpus"] == settings["coref_corpus"]:
        yield "syntax_corpus and coref_corpus must be different corpora (ewt and gap kinds)"
    if len(set(settings["sources"])) != len(settings["sources"]):
        yield "sources must not repeat a name"
    if any(not 0 < f <= 1 for f in settings["learning_curve"]):
        yield "learning_curve fractions must lie in (0, 1]"
    known = (*MODEL_SOURCES, *SCOPES)
    for source in settings["sources"]:
        if source not in known:
            yield f"sources names {source!r}, which is none of {', '.join(known)}"
    for relation in settings["heatmap_relations"]:
        if relation not in (*UD_RELATIONS, "all"):
            yield (
                f"heatmap_relations names {relation!r}, which is no universal dependency "
                f"relation (one of {', '.join(UD_RELATIONS)}, or all)"
            )


def mixing_tables(settings: dict) -> tuple[str, ...]:
    """The mixing family's maps.h5 when `sources` names whole-layer scopes."""
    return ("maps.h5",) if any(source in SCOPES for source in settings["sources"]) else ()


FAMILY = Family(
    name="probing",
    title="Syntax, coreference and probes (Clark et al. 2019)",
    tables={"corpus": SYNTAX + COREF},
    figures=(
        Figure("syntax_best", "corpus", ("syntax_best.tsv",)),
        Figure("syntax_heatmaps", "corpus", ("syntax_heads.tsv",), ("heatmap_relations",)),
        Figure("probe_uas", "corpus", ("probe.tsv", "probe_learning_curve.tsv")),
        Figure("coref_heads", "corpus", ("coref_heads.tsv", "coref_best.tsv")),
    ),
    problems=problems,
    corpus_kinds={"syntax_corpus": ("ewt",), "coref_corpus": ("gap",)},
    corpus_roles={
        "syntax_corpus": SYNTAX + ("syntax_best", "syntax_heatmaps", "probe_uas"),
        "coref_corpus": COREF + ("coref_heads",),
    },
    needs=(Needs("mixing", tables=mixing_tables),),
    every_layer=SYNTAX + COREF,  # every head of every layer is a candidate and a feature
    jobs={
        "probing_syntax": Memory(unestimated="no formula yet"),
        "probing_probe": Memory(unestimated="a probe fitted on probe_features.h5, no model"),
        "probing_coref": Memory(unestimated="no formula yet"),
    },
)
