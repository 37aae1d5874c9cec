# Whole-layer token mixing (Kobayashi et al., EMNLP 2021 and ICLR 2024).
# Outputs are declared in scripts/attnscope/analyses/mixing/outputs.py.

MIXING = config["analyses"]["mixing"]
MIXING_OUT = FAMILIES["mixing"]


# With shards: S > 1, S mixing_shard jobs analyse a block of layers each and mixing_compute
# gathers them from the folder collect_shards moves them to (rules/shards.smk).
rule mixing_shard:
    input:
        manifest=manifest,
        hidden_states=hidden_states,
    output:
        part=temp(MIXING_OUT.shard_file("pkl")),
        maps=temp(MIXING_OUT.shard_file("h5")),
    log:
        "results/{model}/{corpus}/logs/mixing_shard_{shard}.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/mixing_shard_{shard}.tsv"
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gpu_count,
        slurm_partition=partition,
    params:
        **settings_params("mixing", "MixingSettings", "propagation"),
        shards=SHARDS,
    script:
        "../scripts/mixing_compute.py"


rule mixing_compute:
    input:
        layer_kinds=layer_kinds,
        manifest=manifest,
        hidden_states=hidden_states,
        shards=MIXING_OUT.collected_shards(),
    output:
        **{
            file.split(".")[0]: MIXING_OUT.table(file)
            for file in ("mixing_ratio.tsv", "rsa.tsv", "decomposition_check.tsv")
        },
        maps=MIXING_OUT.table("maps.h5"),
    log:
        "results/{model}/{corpus}/logs/mixing_compute.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/mixing_compute.tsv"
    priority: PRIORITY_LONG_CHAIN
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gather_gpu_count,
        slurm_partition=gather_partition,
    params:
        **settings_params("mixing", "MixingSettings", "propagation"),
    script:
        "../scripts/mixing_compute.py"


# Presentation tables read back from maps.h5: their settings rerun only this step.
rule mixing_tables:
    input:
        layer_kinds=layer_kinds,
        manifest=manifest,
        encoded="results/{model}/{corpus}/encoded.h5",
        maps=MIXING_OUT.table("maps.h5"),
    output:
        ff_pairs=MIXING_OUT.table("ff_pairs.tsv"),
        example_maps=MIXING_OUT.table("example_maps.tsv"),
    log:
        "results/{model}/{corpus}/logs/mixing_tables.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/mixing_tables.tsv"
    conda:
        "../envs/model.yaml"
    params:
        **settings_params("mixing", "MixingTablesSettings"),
    script:
        "../scripts/mixing_tables.py"


# The decomposition carried through the whole depth; rollouts of the per-layer maps above.
rule mixing_propagate:
    input:
        layer_kinds=layer_kinds,
        manifest=manifest,
        hidden_states=hidden_states,
        maps=MIXING_OUT.table("maps.h5"),
    output:
        **{
            file.split(".")[0]: MIXING_OUT.table(file)
            for file in (
                "propagated.h5",
                "propagated_mixing.tsv",
                "rollout.tsv",
                "prediction.tsv",
                "propagation_check.tsv",
            )
        },
    log:
        "results/{model}/{corpus}/logs/mixing_propagate.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/mixing_propagate.tsv"
    priority: PRIORITY_LONG_CHAIN
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gpu_count,
        slurm_partition=partition,
    params:
        **settings_params("mixing", "MixingSettings"),
    script:
        "../scripts/mixing_propagate.py"
