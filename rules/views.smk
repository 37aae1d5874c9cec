# Offline interactive views: head, model and neuron views of weights, norms and whole-layer
# scopes (seed 004, BertViz-style). Outputs are declared in scripts/attnscope/analyses/views/.

VIEWS = config["analyses"]["views"]
VIEWS_OUT = FAMILIES["views"]


rule views_pages:
    input:
        manifest=manifest,
        hidden_states=hidden_states,
    # update: Snakemake keeps the previous pages while the job runs and restores them if it
    # fails (the job replaces the folder only once every page is written).
    output:
        report(
            update(directory(VIEWS_OUT.folder_path())),
            htmlindex="index.html",
            caption="../report/views/pages.rst",
            category=VIEWS_OUT.title,
            subcategory="{model} / {corpus}",
        ),
    log:
        "results/{model}/{corpus}/logs/views_pages.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/views_pages.tsv"
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gpu_count,
        slurm_partition=partition,
    params:
        **settings_params("views", "ViewsSettings"),
        **needed_settings("views"),
        sequences=view_sequences,
    script:
        "../scripts/views_pages.py"
