# Why heads attend where they do (issue #36): each head's attention logits split exactly into
# query-side x key-side components (analyses/attend), summed over the first sequences.
# Outputs are declared in scripts/attnscope/analyses/attend/outputs.py.

ATTEND = config["analyses"]["attend"]
ATTEND_OUT = FAMILIES["attend"]


rule attend_compute:
    input:
        unpack(attend_needs),
        layer_kinds=layer_kinds,
        manifest=manifest,
        hidden_states=hidden_states,
    output:
        lift=ATTEND_OUT.table("lift.tsv"),
        key_classes=ATTEND_OUT.table("key_classes.tsv"),
        bands=ATTEND_OUT.table("bands.tsv"),
        trt_terms=ATTEND_OUT.table("trt_terms.tsv"),
        decomposition_check=ATTEND_OUT.table("decomposition_check.tsv"),
        groups=ATTEND_OUT.table("groups.tsv"),
    log:
        "results/{model}/{corpus}/logs/attend_compute.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/attend_compute.tsv"
    priority: PRIORITY_LONG_JOB
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gpu_count,
        slurm_partition=partition,
    params:
        **settings_params("attend", "AttendSettings"),
    script:
        "../scripts/attend_compute.py"
