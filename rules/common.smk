# Helpers shared by every rule file: model and corpus look-ups, input functions, targets.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "scripts"))

from attnscope.datasets import files_for_kind  # noqa: E402

MODELS = list(config["models"])
CORPORA = list(config["corpora"])
NAME = "[A-Za-z0-9][A-Za-z0-9_.-]*"


wildcard_constraints:
    model="|".join(MODELS),
    corpus="|".join(CORPORA),


def check_corpus_references():
    """Every analysis names corpora that `corpora:` defines (the schema cannot say this)."""
    analyses = config.get("analyses", {})
    named = [
        (f"analyses.{a}.corpora", c)
        for a in ("weights", "norms")
        for c in analyses.get(a, {}).get("corpora", [])
    ]
    named.append(
        ("analyses.position.corpus", analyses.get("position", {}).get("corpus"))
    )
    for key, corpus in named:
        if corpus not in config["corpora"]:
            raise ValueError(
                f"config: {key} names corpus {corpus!r}, which is not defined under "
                f"corpora: (defined: {', '.join(CORPORA)})"
            )


check_corpus_references()


def corpus_settings(wildcards):
    """The corpus block of the config with schema defaults, as a plain dict."""
    return dict(config["corpora"][wildcards.corpus])


def model_settings(wildcards):
    return dict(config["models"][wildcards.model])


def corpus_data_files(wildcards):
    """The files a corpus is built from: acquired data, or the user's file (kind clark)."""
    settings = config["corpora"][wildcards.corpus]
    if settings["kind"] == "clark":
        if not settings.get("path"):
            raise ValueError(f"config: corpora.{wildcards.corpus}.path is required for kind clark")
        return [settings["path"]]
    return [f"resources/data/{f.relpath}" for f in files_for_kind(settings["kind"])]


def gpu_count(wildcards=None):
    """GPUs a model job asks the scheduler for: 1 only with device: cuda."""
    return 1 if config["device"] == "cuda" else 0


def manifest(wildcards):
    return f"results/{wildcards.model}/model/manifest.json"


def hidden_states(wildcards):
    return f"results/{wildcards.model}/{wildcards.corpus}/hidden_states.h5"


def foundation_targets():
    """Every corpus encoded for every model; hidden states where an analysis reads them."""
    corpora_used = set(config["analyses"]["weights"]["corpora"])
    corpora_used |= set(config["analyses"]["norms"]["corpora"])
    corpora_used.add(config["analyses"]["position"]["corpus"])
    return (
        expand("results/{model}/model/manifest.json", model=MODELS)
        + expand("results/{model}/{corpus}/encoded.h5", model=MODELS, corpus=CORPORA)
        + expand(
            "results/{model}/{corpus}/hidden_states.h5",
            model=MODELS,
            corpus=sorted(corpora_used),
        )
    )
