"""Outputs of the views: one folder of self-contained HTML pages per model and corpus."""

from attnscope.pipeline.job_memory import Memory
from attnscope.pipeline.outputs import Family, Needs
from attnscope.pipeline.user_config import corpus_for_model


def problems(settings: dict):
    for corpus in settings["sequences"]:
        if corpus not in settings["corpora"]:
            yield f"sequences names corpus {corpus!r}, which views corpora does not list"
        indices = settings["sequences"][corpus]
        repeated = sorted({i for i in indices if indices.count(i) > 1})
        if repeated:
            yield f"sequences.{corpus} lists sequence(s) {repeated} more than once"


def sequences_exist(config: dict):
    """The sequences `analyses.views.sequences` names exist where the config tells: below the
    number of texts of a texts corpus, below `n_sequences` (when not 0) of another."""
    views = config["analyses"]["views"]
    if not views.get("enabled", True):
        return
    for corpus, indices in views.get("sequences", {}).items():
        if corpus not in config["corpora"]:
            continue  # named by the family's own problems
        for model in config["models"]:
            settings = corpus_for_model(config, model, corpus)
            if settings["kind"] == "texts":
                count, what = len(settings.get("texts") or []), "texts"
            else:
                count, what = settings.get("n_sequences", 0), "sequences at most (n_sequences)"
            beyond = sorted(i for i in indices if count and i >= count)
            if beyond:
                yield (
                    f"analyses.views.sequences.{corpus} names sequences {beyond}, but corpus "
                    f"{corpus!r} has {count} {what} for model {model!r} (0-based: "
                    f"0..{count - 1})"
                )


FAMILY = Family(
    name="views",
    title="Interactive views (head, model and neuron views)",
    tables={"corpus": ("index.html",)},
    problems=problems,
    folder=True,
    # the prediction row's contrast and the decomposition's bound are the mixing family's
    needs=(
        Needs("mixing", settings=("contrast",), bounds=("max_rel_residual", "depth_rel_residual")),
    ),
    every_layer=("index.html",),  # every layer's maps, and the prediction through them
    jobs={"views_pages": Memory(unestimated="no formula yet: one sequence's pages at a time")},
    checks=sequences_exist,
)
