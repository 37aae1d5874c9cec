# Syntax and coreference heads and attention probes (Clark et al. 2019, sections 4-5).
# Outputs are declared in scripts/attnscope/analyses/probing/outputs.py.

PROBING = config["analyses"]["probing"]
PROBING_OUT = FAMILIES["probing"]


rule probing_syntax:
    input:
        unpack(needed_tables("probing")),
        layer_kinds=layer_kinds,
        manifest=manifest,
        hidden_states=hidden_states,
        encoded="results/{model}/{corpus}/encoded.h5",
    output:
        heads=PROBING_OUT.table("syntax_heads.tsv"),
        best=PROBING_OUT.table("syntax_best.tsv"),
        features=PROBING_OUT.table("probe_features.h5"),
    log:
        "results/{model}/{corpus}/logs/probing_syntax.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/probing_syntax.tsv"
    priority: PRIORITY_LONG_CHAIN
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gpu_count,
        slurm_partition=partition,
    params:
        **settings_params("probing", "ProbingSettings"),
    script:
        "../scripts/probing_syntax.py"


rule probing_probe:
    input:
        layer_kinds=layer_kinds,
        features=PROBING_OUT.table("probe_features.h5"),
        encoded="results/{model}/{corpus}/encoded.h5",
    output:
        probe=PROBING_OUT.table("probe.tsv"),
        curve=PROBING_OUT.table("probe_learning_curve.tsv"),
    log:
        "results/{model}/{corpus}/logs/probing_probe.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/probing_probe.tsv"
    priority: PRIORITY_LONG_CHAIN
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    params:
        **settings_params("probing", "ProbeSettings"),
    script:
        "../scripts/probing_probe.py"


rule probing_coref:
    input:
        unpack(needed_tables("probing")),
        layer_kinds=layer_kinds,
        manifest=manifest,
        hidden_states=hidden_states,
        encoded="results/{model}/{corpus}/encoded.h5",
    output:
        heads=PROBING_OUT.table("coref_heads.tsv"),
        best=PROBING_OUT.table("coref_best.tsv"),
    log:
        "results/{model}/{corpus}/logs/probing_coref.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/probing_coref.tsv"
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gpu_count,
        slurm_partition=partition,
    params:
        **settings_params("probing", "ProbingSettings"),
    script:
        "../scripts/probing_coref.py"
