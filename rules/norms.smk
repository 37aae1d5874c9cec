# Norm-based analysis of attention (Kobayashi et al., EMNLP 2020, "Attention is Not
# Only a Weight").
# Outputs are declared in scripts/attnscope/analyses/norms/outputs.py.

NORMS = config["analyses"]["norms"]
NORMS_OUT = FAMILIES["norms"]
SINK_CARD = NORMS_OUT.every_layer


rule norms_affine:
    input:
        layer_kinds=layer_kinds,
        manifest=manifest,
    output:
        NORMS_OUT.table("affine_singular_values.tsv", "model"),
    log:
        "results/{model}/logs/norms_affine.log",
    benchmark:
        "results/{model}/benchmarks/norms_affine.tsv"
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gpu_count,
        slurm_partition=partition,
    script:
        "../scripts/norms_affine.py"


# With shards: S > 1, S norms_shard jobs analyse a block of layers each and norms_compute
# gathers them from the folder collect_shards moves them to (rules/shards.smk).
rule norms_shard:
    input:
        manifest=manifest,
        hidden_states=hidden_states,
    output:
        part=temp(NORMS_OUT.shard_file("pkl")),
        maps=temp(NORMS_OUT.shard_file("h5")),
    log:
        "results/{model}/{corpus}/logs/norms_shard_{shard}.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/norms_shard_{shard}.tsv"
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gpu_count,
        slurm_partition=partition,
    params:
        **settings_params("norms", "NormsSettings"),
        shards=SHARDS,
    script:
        "../scripts/norms_compute.py"


rule norms_compute:
    input:
        layer_kinds=layer_kinds,
        manifest=manifest,
        hidden_states=hidden_states,
        shards=NORMS_OUT.collected_shards(),
    output:
        **{
            file.split(".")[0]: NORMS_OUT.table(file)
            for file in NORMS_OUT.tables["corpus"]
            if file.endswith(".tsv") and file not in SINK_CARD
        },
        maps=NORMS_OUT.table("attn_n_maps.h5"),
    log:
        "results/{model}/{corpus}/logs/norms_compute.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/norms_compute.tsv"
    priority: PRIORITY_LONG_JOB
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gather_gpu_count,
        slurm_partition=gather_partition,
    params:
        **settings_params("norms", "NormsSettings"),
    script:
        "../scripts/norms_compute.py"


# The attention-sink card (analyses/norms/sink_card.py): Gu et al.'s Sink^eps with the
# repeated-token inputs, the first position's weight along the stream, Kobayashi's view
# summarised, Sun et al.'s massive dimensions and, for a causal LM, the loss and perplexity
# with those that carry the sink zeroed or at their mean.
rule norms_sink_card:
    input:
        layer_kinds=layer_kinds,
        manifest=manifest,
        hidden_states=hidden_states,
        attention_sinks=NORMS_OUT.table("attention_sinks.tsv"),
    output:
        heads=NORMS_OUT.table("sink_heads.tsv"),
        epsilon=NORMS_OUT.table("sink_epsilon.tsv"),
        stream=NORMS_OUT.table("sink_stream.tsv"),
        kobayashi=NORMS_OUT.table("sink_kobayashi.tsv"),
        massive=NORMS_OUT.table("massive_dimensions.tsv"),
        intervention=NORMS_OUT.table("massive_intervention.tsv"),
        kinds=NORMS_OUT.table("sink_kinds.tsv"),
        stream_kinds=NORMS_OUT.table("sink_stream_kinds.tsv"),
    log:
        "results/{model}/{corpus}/logs/norms_sink_card.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/norms_sink_card.tsv"
    priority: PRIORITY_LONG_JOB
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gpu_count,
        slurm_partition=partition,
    params:
        **settings_params("norms", "SinkCardSettings"),
    script:
        "../scripts/norms_sink_card.py"
