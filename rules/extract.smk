# Run each model over each corpus once; every analysis reads the stored hidden states.


rule extract_hidden_states:
    input:
        manifest=manifest,
        encoded="results/{model}/{corpus}/encoded.h5",
    output:
        "results/{model}/{corpus}/hidden_states.h5",
    log:
        "results/{model}/{corpus}/logs/extract_hidden_states.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/extract_hidden_states.tsv"
    priority: PRIORITY_STATES
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gpu_count,
        slurm_partition=partition,
    params:
        batch_size=config["batch_size"],
        dtype=config["dtype"],
        compute_dtype=config["compute_dtype"],
        layers=extraction_layers,
    script:
        "../scripts/extract_hidden_states.py"
