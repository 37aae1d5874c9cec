# Attention-weight analyses and head clustering (Clark et al. 2019, sections 3 and 6).
# Outputs are declared in scripts/attnscope/analyses/weights/outputs.py.

WEIGHTS = config["analyses"]["weights"]
WEIGHTS_OUT = FAMILIES["weights"]


# With shards: S > 1, S weights_shard jobs analyse a block of layers each and weights_stats
# gathers them from the folder collect_shards moves them to (rules/shards.smk).
rule weights_shard:
    input:
        manifest=manifest,
        hidden_states=hidden_states,
    output:
        part=temp(WEIGHTS_OUT.shard_file("pkl")),
    log:
        "results/{model}/{corpus}/logs/weights_shard_{shard}.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/weights_shard_{shard}.tsv"
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gpu_count,
        slurm_partition=partition,
    params:
        **settings_params("weights", "StatisticsSettings"),
        shards=SHARDS,
    script:
        "../scripts/weights_stats.py"


rule weights_stats:
    input:
        layer_kinds=layer_kinds,
        manifest=manifest,
        hidden_states=hidden_states,
        shards=WEIGHTS_OUT.collected_shards(),
    output:
        heads=WEIGHTS_OUT.table("heads.tsv"),
        layers=WEIGHTS_OUT.table("layers.tsv"),
    log:
        "results/{model}/{corpus}/logs/weights_stats.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/weights_stats.tsv"
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gather_gpu_count,
        slurm_partition=gather_partition,
    params:
        **settings_params("weights", "StatisticsSettings"),
    script:
        "../scripts/weights_stats.py"


rule weights_distances:
    input:
        layer_kinds=layer_kinds,
        manifest=manifest,
        hidden_states=hidden_states,
        heads=WEIGHTS_OUT.table("heads.tsv"),
    output:
        distances=WEIGHTS_OUT.table("head_distances.tsv"),
        head_map=WEIGHTS_OUT.table("head_map.tsv"),
        linkage=WEIGHTS_OUT.table("linkage.tsv"),
    log:
        "results/{model}/{corpus}/logs/weights_distances.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/weights_distances.tsv"
    priority: PRIORITY_LONG_JOB
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gpu_count,
        slurm_partition=partition,
    params:
        **settings_params("weights", "DistanceSettings"),
    script:
        "../scripts/weights_distances.py"


rule weights_gradients:
    input:
        layer_kinds=layer_kinds,
        manifest=manifest,
        hidden_states=hidden_states,
    output:
        WEIGHTS_OUT.table("gradients.tsv"),
    log:
        "results/{model}/{corpus}/logs/weights_gradients.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/weights_gradients.tsv"
    priority: PRIORITY_LONG_JOB
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gpu_count,
        slurm_partition=partition,
    params:
        **settings_params("weights", "GradientSettings"),
    script:
        "../scripts/weights_gradients.py"
