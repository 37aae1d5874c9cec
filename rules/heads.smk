# Head roles, the atlas (issue: the atlas): a pass over the repeated corpus (induction,
# duplicate-token, previous-token scores, the in-context loss), joined with the other
# families' per-head tables into head_roles.tsv, circuits.tsv and one HTML page per model.
# Outputs are declared in scripts/attnscope/analyses/heads/outputs.py.

HEADS = config["analyses"]["heads"]
HEADS_OUT = FAMILIES["heads"]


rule heads_scores:
    input:
        manifest=manifest,
        hidden_states=hidden_states,
        natural_states=heads_natural_states,
    output:
        role_scores=HEADS_OUT.table("role_scores.tsv"),
        in_context_loss=HEADS_OUT.table("in_context_loss.tsv"),
        patterns=HEADS_OUT.table("patterns.json"),
    log:
        "results/{model}/{corpus}/logs/heads_scores.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/heads_scores.tsv"
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gpu_count,
        slurm_partition=partition,
    params:
        **settings_params("heads", "ScoresSettings"),
    script:
        "../scripts/heads_scores.py"


rule heads_roles:
    input:
        unpack(needed_tables("heads")),
        role_scores=HEADS_OUT.table("role_scores.tsv"),
        in_context_loss=HEADS_OUT.table("in_context_loss.tsv"),
        patterns=HEADS_OUT.table("patterns.json"),
    output:
        head_roles=HEADS_OUT.table("head_roles.tsv"),
        role_rules=HEADS_OUT.table("role_rules.tsv"),
        circuits=HEADS_OUT.table("circuits.tsv"),
        atlas=report(
            HEADS_OUT.table("atlas.html"),
            caption="../report/heads/atlas.rst",
            category=HEADS_OUT.title,
            subcategory="{model} / {corpus}",
        ),
    log:
        "results/{model}/{corpus}/logs/heads_roles.log",
    conda:
        "../envs/plots.yaml"
    params:
        **settings_params("heads", "RolesSettings"),
        links=heads_links,
    script:
        "../scripts/heads_roles.py"


rule heads_overview:
    input:
        roles=heads_model_tables("head_roles.tsv"),
        atlases=heads_model_tables("atlas.html"),
    output:
        report(
            HEADS_OUT.run_pages[0],
            caption="../report/heads/overview.rst",
            category=HEADS_OUT.title,
            subcategory="all models",
        ),
    log:
        "results/logs/heads_overview.log",
    conda:
        "../envs/plots.yaml"
    params:
        models=MODELS,
    script:
        "../scripts/heads_overview.py"
