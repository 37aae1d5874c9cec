"""Outputs of the views: one folder of self-contained HTML pages per model and corpus."""

from attnscope.pipeline.outputs import Family, Needs


def problems(settings: dict):
    for corpus in settings["sequences"]:
        if corpus not in settings["corpora"]:
            yield f"sequences names corpus {corpus!r}, which views corpora does not list"
        indices = settings["sequences"][corpus]
        repeated = sorted({i for i in indices if indices.count(i) > 1})
        if repeated:
            yield f"sequences.{corpus} lists sequence(s) {repeated} more than once"


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
)
