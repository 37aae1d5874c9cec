# Helpers shared by every .smk file: model and corpus look-ups, input functions, targets.
# All functions live here: `snakemake --lint` asks that files of rules hold no functions.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "scripts"))

from attnscope.data.datasets import files_for_kind  # noqa: E402

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
            raise ValueError(
                f"config: corpora.{wildcards.corpus}.path is required for kind clark"
            )
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


# Attention weights


def weights_figure(name, suffix):
    path = f"results/{{model}}/{{corpus}}/weights/figures/{name}.{suffix}"
    if suffix != "svg":
        return path
    return report(
        path,
        caption=f"../report/weights/{name}.rst",
        category="Attention weights (Clark et al. 2019)",
        subcategory="{model} / {corpus}",
    )


def weights_figure_outputs(rule_name):
    return {
        f"{name}_{suffix}": weights_figure(name, suffix)
        for name in WEIGHTS_FIGURES[rule_name]
        for suffix in ("svg", "png")
    }


def weights_targets():
    """Every table and figure of the analysis, for every model and configured corpus."""
    files = [f"weights/{name}.tsv" for name in WEIGHTS_TABLES]
    files += [
        f"weights/figures/{name}.{suffix}"
        for names in WEIGHTS_FIGURES.values()
        for name in names
        for suffix in ("svg", "png")
    ]
    return expand(
        "results/{model}/{corpus}/{file}",
        model=MODELS,
        corpus=WEIGHTS["corpora"],
        file=files,
    )


# Vector norms


def norms_figure(name, suffix):
    path = f"results/{{model}}/{{corpus}}/norms/figures/{name}.{suffix}"
    if suffix != "svg":
        return path
    return report(
        path,
        caption=f"../report/norms/{name}.rst",
        category="Vector norms (Kobayashi et al. 2020)",
        subcategory="{model} / {corpus}",
    )


def norms_targets():
    """Every table and figure of the analysis, for every model and configured corpus."""
    corpus_files = [f"norms/{name}.tsv" for name in NORMS_TABLES]
    corpus_files.append("norms/attn_n_maps.h5")
    corpus_files += [
        f"norms/figures/{name}.{suffix}"
        for name in NORMS_FIGURES
        for suffix in ("svg", "png")
    ]
    model_files = ["model/affine_singular_values.tsv"] + [
        f"model/figures/affine_singular_values.{suffix}" for suffix in ("svg", "png")
    ]
    return expand(
        "results/{model}/{corpus}/{file}",
        model=MODELS,
        corpus=NORMS["corpora"],
        file=corpus_files,
    ) + expand("results/{model}/{file}", model=MODELS, file=model_files)


# Position


def position_encoded(wildcards):
    """The position corpus encoded for this model: its first full sequence is the control."""
    return f"results/{wildcards.model}/{POSITION['corpus']}/encoded.h5"


def position_title(wildcards):
    """Figure title: the model, and the corpus for corpus-level figures."""
    corpus = wildcards.get("corpus")
    return {"title": wildcards.model + (f" / {corpus}" if corpus else "")}


def position_targets():
    """Every position table and figure, for every model, on the configured position corpus."""
    model_tables = ["pe_spectrum", "pe_pca", "wa_singular_values", "rotation_angles"]
    targets = expand(
        "results/{model}/model/{table}.tsv", model=MODELS, table=model_tables
    )
    targets += expand(
        "results/{model}/model/figures/{figure}.{ext}",
        model=MODELS,
        figure=POSITION_MODEL_FIGURES,
        ext=["svg", "png"],
    )
    targets += expand(
        "results/{model}/{corpus}/position/{table}",
        model=MODELS,
        corpus=POSITION["corpus"],
        table=POSITION_CORPUS_TABLES,
    )
    targets += expand(
        "results/{model}/{corpus}/position/figures/{figure}.{ext}",
        model=MODELS,
        corpus=POSITION["corpus"],
        figure=POSITION_CORPUS_FIGURES,
        ext=["svg", "png"],
    )
    return targets + expand(
        "results/position_pe_spectra_models.{ext}", ext=["svg", "png"]
    )


# Report


def report_targets():
    return ["results/software/versions.tsv", "results/software/config.yaml"]
