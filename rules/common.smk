# Helpers shared by every .smk file: config checks, look-ups, input functions and targets.
# All functions live here: `snakemake --lint` asks that files of rules hold no functions.
import importlib  # noqa: E402

from snakemake.exceptions import WorkflowError  # noqa: E402

from attnscope.core.settings import rule_params  # noqa: E402
from attnscope.data.corpora import KINDS as CORPUS_KINDS  # noqa: E402
from attnscope.core.layer_selection import layer_setting  # noqa: E402
from attnscope.pipeline.config_checks import check_config, model_depths  # noqa: E402
from attnscope.model.sources import local_model_files  # noqa: E402
from attnscope.analyses.family import families, figure_paths  # noqa: E402
from attnscope.data.corpus_settings import corpus_for_model  # noqa: E402

FAMILIES = families()
check_config(config, FAMILIES)  # every cross-field check, before any job
MODELS = list(config["models"])
# Each model's `layers:` in one spelling: all, or its layers sorted (a list naming every
# layer is all), so that equal selections run and rerun alike.
LAYERS = {
    model: layer_setting(config["layers"], n_layers)
    for model, n_layers in model_depths(config).items()
}
CORPORA = list(config["corpora"])
SHARDS = config["shards"]


def model_job_threads(most=4):
    """Threads of each model job: half the cores Snakemake was given, so that two jobs run
    at a time (one-thread jobs spend much of their time outside torch's kernels), at most
    `most`; `most` where no core count is given (a cluster: each job asks for its own).
    """
    try:
        cores = workflow.cores
    except WorkflowError:
        return most
    return max(1, min(most, cores // 2))


MODEL_THREADS = model_job_threads()
# Which ready job starts first (Snakemake's `priority:`, default 0): the stored states, which
# every analysis reads; then the steps of the longest chains (probing's, mixing's); then the
# other long analyses. Short jobs and figures fill the cores at the end, rather than one long
# job running alone on the last core.
PRIORITY_STATES = 3
PRIORITY_LONG_CHAIN = 2
PRIORITY_LONG_JOB = 1


wildcard_constraints:
    model="|".join(MODELS),
    corpus="|".join(CORPORA),
    family="|".join(FAMILIES),
    figure="[A-Za-z0-9_]+",
    shard="[0-9]+",


def settings_params(family, name, unread=None):
    """The params of a rule whose script reads `Job.settings` of the settings class `name` of
    `family` (`analyses/<family>/settings.py`): the settings the job's outputs depend on,
    declared once by the class (`core.settings.rule_params`), so that changing one of them
    reruns the job and changing another does not; `unread`: the name of the class attribute
    listing settings this job does not read."""
    found = importlib.import_module(f"attnscope.analyses.{family}.settings")
    kind = getattr(found, name)
    return rule_params(kind, config, getattr(kind, unread) if unread else ())


def canonical(value):
    """A config block with its keys sorted at every level: as a rule parameter it then
    compares equal however the config file orders its keys."""
    if isinstance(value, dict):
        return {key: canonical(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [canonical(item) for item in value]
    return value


def corpus_settings(wildcards):
    """The corpus block of the config with schema defaults, and the model's own settings
    for it (`models.<model>.corpora`) in their place, keys sorted."""
    return canonical(corpus_for_model(config, wildcards.model, wildcards.corpus))


def model_settings(wildcards):
    """The model block of the config without its corpora (they are the corpus jobs'
    params: changing one reruns that corpus, not the acquisition), keys sorted."""
    spec = config["models"][wildcards.model]
    return canonical({key: value for key, value in spec.items() if key != "corpora"})


def model_source_files(wildcards):
    """A local model's config, weights and tokenizer files, or its GGUF file: when one
    changes, everything reruns from acquisition ([] for a hub model to download)."""
    spec = config["models"][wildcards.model]
    return local_model_files(wildcards.model, spec, config["mirror"])


def corpus_data_files(wildcards):
    """The files a corpus is built from: the user's file its kind names (clark: path), and
    the acquired data files."""
    settings = config["corpora"][wildcards.corpus]
    own = CORPUS_KINDS[settings["kind"]].own_files(settings)
    return own + [
        f"resources/data/{f.relpath}" for f in CORPUS_KINDS[settings["kind"]].data_files
    ]


def gpu_count(wildcards=None):
    """GPUs a model job asks the scheduler for: 1 only with device: cuda (or cuda:N)."""
    return 1 if config["device"].startswith("cuda") else 0


def partition(wildcards=None):
    """The cluster partition of a job: the GPU partition exactly when it asks for a GPU."""
    return config["cluster"]["gpu_partition" if gpu_count() else "cpu_partition"]


def shard_files(wildcards):
    """Every file the layer shards of one family write (`{shard}.pkl` accumulators, with
    `{shard}.h5` maps where the family writes maps): what `collect_shards` moves into the
    folder its gathering job reads (none with one shard)."""
    patterns = getattr(rules, f"{wildcards.family}_shard").output
    shards = range(1, SHARDS + 1) if SHARDS > 1 else []
    return [p.format(**wildcards, shard=k) for k in shards for p in patterns]


def shard_records():
    """The paths of the shards' files and collected folders of this run, whose Snakemake
    records `forget_shard_records` deletes when the run ends."""
    defined = {rule.name for rule in workflow.rules}
    sharded = [name for name in FAMILIES if f"{name}_shard" in defined]
    paths = []
    for name in sharded:
        patterns = [FAMILIES[name].collected_shards()]
        patterns += [str(p) for p in getattr(rules, f"{name}_shard").output]
        for corpus in family_corpora(name):
            for model in MODELS:
                for k in range(1, SHARDS + 1):
                    paths += [
                        p.format(model=model, corpus=corpus, shard=k) for p in patterns
                    ]
    return sorted(set(paths))


def forget_records(workflow, paths):
    """Delete Snakemake's records (.snakemake/metadata) of those `paths` that no longer
    exist, where there are any."""
    from snakemake.io import IOFile

    for path in paths:
        if not Path(path).exists():
            workflow.persistence.cleanup_metadata(IOFile(path))


def gather_gpu_count(wildcards=None):
    """GPUs of the jobs that gather layer shards (norms_compute, mixing_compute, weights_stats,
    position_corpus): none when there are shards to merge."""
    return 0 if SHARDS > 1 else gpu_count()


def gather_partition(wildcards=None):
    return config["cluster"]["gpu_partition" if gather_gpu_count() else "cpu_partition"]


def manifest(wildcards):
    return f"results/{wildcards.model}/model/manifest.json"


def layer_kinds(wildcards):
    """The model's `layer_kinds.tsv`, written by model_layer_kinds: the kind columns of every
    per-layer table."""
    return f"results/{wildcards.model}/model/layer_kinds.tsv"


def hidden_states(wildcards):
    return f"results/{wildcards.model}/{wildcards.corpus}/hidden_states.h5"


def family_corpora(name):
    """The corpora an enabled analysis family reads ([] when it is switched off)."""
    settings = config["analyses"][name]
    return FAMILIES[name].corpora(settings) if settings["enabled"] else []


def family_targets(name):
    """Every table and figure of one family (`snakemake <family>` builds them); for a model
    analysed at a subset of its layers, none of those that need every layer."""
    settings = config["analyses"][name]
    targets = [
        target
        for model in MODELS
        for target in FAMILIES[name].targets(settings, [model], LAYERS[model] == "all")
    ]
    return list(dict.fromkeys(targets))


def extraction_layers(wildcards):
    """The `layers:` param of a model's extraction: all, or its 1-based layers, sorted."""
    return LAYERS[wildcards.model]


def foundation_targets():
    """Every corpus encoded for every model; hidden states where an analysis reads them."""
    corpora_read = sorted({c for name in FAMILIES for c in family_corpora(name)})
    return (
        expand("results/{model}/model/manifest.json", model=MODELS)
        + expand("results/{model}/model/layer_kinds.tsv", model=MODELS)
        + expand("results/{model}/{corpus}/encoded.h5", model=MODELS, corpus=CORPORA)
        + expand(
            "results/{model}/{corpus}/hidden_states.h5",
            model=MODELS,
            corpus=corpora_read,
        )
    )


def config_record():
    """results/software/configs/<hash>.yaml: the effective configuration of this run, named by
    the first 12 hex digits of the SHA-256 of its canonical JSON, so that a run on another
    configuration in the same results folder adds its own record beside the earlier ones.
    """
    import hashlib
    import json

    text = json.dumps(canonical(config), sort_keys=True)
    return f"results/software/configs/{hashlib.sha256(text.encode()).hexdigest()[:12]}.yaml"


def report_targets():
    """The software and configuration records: every run, and every family's part (`snakemake
    norms`), makes them, and its report (`make report`) carries them."""
    return ["results/software/versions.tsv", config_record()]


# Figures: one rule per group of figures (`FigureGroup`, rules/figures.smk).

FIGURE_SUBCATEGORIES = {
    "corpus": "{model} / {corpus}",
    "model": "{model} / model",
    "all": "all models",
}


def figure_tables(family, figure):
    """{table stem: path pattern} of a figure's tables (a list over models for an `all`
    figure)."""
    if figure.scope == "all":
        return {
            file.split(".")[0]: expand(family.table(file, "model"), model=MODELS)
            for file in figure.tables
        }
    return {
        file.split(".")[0]: family.table(file, figure.scope) for file in figure.tables
    }


def group_tables(family, group):
    """{table stem: path pattern} of every table a group's figures read."""
    return {
        stem: path
        for figure in group.figures
        for stem, path in figure_tables(family, figure).items()
    }


def group_figures(family, group):
    """{<figure>_svg, <figure>_png: path pattern} of a group's figures, each SVG a report
    entry."""
    out = {}
    for figure in group.figures:
        svg, png = figure_paths(family, figure)
        out[f"{figure.name}_svg"] = report(
            svg,
            caption=f"../report/{family.name}/{figure.name}.rst",
            category=family.title,
            subcategory=FIGURE_SUBCATEGORIES[figure.scope],
        )
        out[f"{figure.name}_png"] = png
    return out


def figure_log(family, group):
    """The log of a figure group's job, in the logs folder of its scope."""
    logs = {
        "corpus": "results/{model}/{corpus}/logs",
        "model": "results/{model}/logs",
        "all": "results/logs",
    }
    return f"{logs[group.scope]}/{group.name}.log"


def group_settings(family, group):
    """Params function: {figure: (its table stems, its settings)} for each figure of a
    group; the settings come from its family's config block, with its title (model /
    corpus, model, or all models)."""

    def settings(wildcards):
        if group.scope == "all":
            place = {"models": MODELS, "title": "all models"}
        else:
            shown = [wildcards.model] + (
                [wildcards.corpus] if group.scope == "corpus" else []
            )
            place = {"title": " / ".join(shown)}
        own = config["analyses"][family.name]
        return {
            figure.name: {
                "tables": [file.split(".")[0] for file in figure.tables],
                "settings": {key: own[key] for key in figure.settings} | place,
            }
            for figure in group.figures
        }

    return settings


def position_encoded(wildcards):
    """The position corpus encoded for this model: its first full sequence is the control."""
    corpus = config["analyses"]["position"]["corpus"]
    return f"results/{wildcards.model}/{corpus}/encoded.h5"


def needed_tables(family_name):
    """Input function: {<family>_<stem>: path} of the other families' tables that the jobs
    of `family_name` read for this model and corpus (`Family.needs`; a need's `corpus` names
    another corpus); a clear error when that family is switched off or does not read the
    corpus, unless the need is optional (then the table is left out)."""

    def tables(wildcards):
        found = {}
        own = config["analyses"][family_name]
        every_layer = LAYERS[wildcards.model] == "all"
        for need in FAMILIES[family_name].needs:
            other = FAMILIES[need.family]
            files = need.tables(own)
            corpus = wildcards.corpus
            if need.corpus is not None:
                corpus = need.corpus(own, config["analyses"][need.family])
            if files and corpus not in family_corpora(need.family):
                if need.optional:
                    continue
                raise ValueError(
                    f"analyses.{family_name} reads the {need.family} family's "
                    f"{', '.join(files)} (its settings ask for it), but the {need.family} "
                    f"family is not enabled for corpus {corpus!r}"
                )
            for file in files:
                made = file in other.tables.get("corpus", ()) and (
                    every_layer or file not in other.every_layer
                )
                if need.optional and not made:
                    continue
                path = other.table(file).format(model=wildcards.model, corpus=corpus)
                found[f"{need.family}_{file.split('.')[0]}"] = path
        return found

    return tables


def attend_needs(wildcards):
    """The norms family's massive dimensions (`massive_directions`), but for a layer subset
    (the sink card that finds them needs every layer): then no direction split."""
    if LAYERS[wildcards.model] != "all":
        return {}
    return needed_tables("attend")(wildcards)


def needed_settings(family_name):
    """{key: value} of the other families' settings that the jobs of `family_name` read
    (`Family.needs`), passed to them as params."""
    return {
        key: config["analyses"][need.family][key]
        for need in FAMILIES[family_name].needs
        for key in need.settings
    }


def view_sequences(wildcards):
    """The sequences (0-based) whose views a corpus gets; None: its first max_pages."""
    return config["analyses"]["views"]["sequences"].get(wildcards.corpus)


# The heads family (rules/heads.smk).


def heads_natural_states(wildcards):
    """The hidden states of the heads family's tables_corpus: the atlas's natural pattern."""
    corpus = config["analyses"]["heads"]["tables_corpus"]
    return f"results/{wildcards.model}/{corpus}/hidden_states.h5"


def heads_links(wildcards):
    """(label, href) of the model's other pages, relative to its atlas: its views' index
    pages and the heads figure."""
    up = "../.."
    links = [("role grid (figure)", "figures/role_grid.svg")]
    views = config["analyses"]["views"]
    if views["enabled"] and LAYERS[wildcards.model] == "all":
        links += [
            (f"views: {corpus}", f"{up}/{corpus}/views/index.html")
            for corpus in views["corpora"]
        ]
    links.append(("overview of every model", f"{up}/../heads_overview.html"))
    return links


def heads_model_tables(file):
    """One table of the heads family per model (its corpus), for the overview."""
    corpus = config["analyses"]["heads"]["corpus"]
    return [
        FAMILIES["heads"].table(file).format(model=model, corpus=corpus)
        for model in MODELS
    ]
