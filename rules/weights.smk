# Attention-weight analyses and head clustering (Clark et al. 2019; ANALYSES.md section 1).

WEIGHTS = config["analyses"]["weights"]
WEIGHTS_TABLES = [
    "heads",
    "layers",
    "gradients",
    "head_distances",
    "head_map",
    "linkage",
]
WEIGHTS_FIGURES = {
    "weights_figures_stats": ["relative_position", "special_tokens", "entropy"],
    "weights_figure_gradients": ["gradients"],
    "weights_figures_map": ["head_map", "dendrogram"],
}


rule weights_stats:
    input:
        manifest=manifest,
        hidden_states=hidden_states,
    output:
        heads="results/{model}/{corpus}/weights/heads.tsv",
        layers="results/{model}/{corpus}/weights/layers.tsv",
    log:
        "results/{model}/{corpus}/logs/weights_stats.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/weights_stats.tsv"
    conda:
        "../envs/model.yaml"
    threads: 4
    resources:
        gpu=gpu_count,
    params:
        device=config["device"],
        batch_size=config["batch_size"],
    script:
        "../scripts/weights_stats.py"


rule weights_distances:
    input:
        manifest=manifest,
        hidden_states=hidden_states,
        heads="results/{model}/{corpus}/weights/heads.tsv",
    output:
        distances="results/{model}/{corpus}/weights/head_distances.tsv",
        head_map="results/{model}/{corpus}/weights/head_map.tsv",
        linkage="results/{model}/{corpus}/weights/linkage.tsv",
    log:
        "results/{model}/{corpus}/logs/weights_distances.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/weights_distances.tsv"
    conda:
        "../envs/model.yaml"
    threads: 4
    resources:
        gpu=gpu_count,
    params:
        device=config["device"],
        batch_size=WEIGHTS["distance_batch_size"],
        n_sequences=WEIGHTS["distance_sequences"],
        seed=WEIGHTS["seed"],
        mds_n_init=WEIGHTS["mds_n_init"],
        mds_max_iter=WEIGHTS["mds_max_iter"],
        cluster_method=WEIGHTS["cluster_method"],
        n_clusters=WEIGHTS["n_clusters"],
        broad_entropy=WEIGHTS["broad_entropy"],
        special_mass=WEIGHTS["special_mass"],
        position_mass=WEIGHTS["position_mass"],
    script:
        "../scripts/weights_distances.py"


rule weights_gradients:
    input:
        manifest=manifest,
        hidden_states=hidden_states,
    output:
        "results/{model}/{corpus}/weights/gradients.tsv",
    log:
        "results/{model}/{corpus}/logs/weights_gradients.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/weights_gradients.tsv"
    conda:
        "../envs/model.yaml"
    threads: 4
    resources:
        gpu=gpu_count,
    params:
        device=config["device"],
        batch_size=config["batch_size"],
        mask_rate=WEIGHTS["gradient_mask_rate"],
        n_sequences=WEIGHTS["gradient_sequences"],
        seed=WEIGHTS["seed"],
    script:
        "../scripts/weights_gradients.py"


rule weights_figures_stats:
    input:
        heads="results/{model}/{corpus}/weights/heads.tsv",
        layers="results/{model}/{corpus}/weights/layers.tsv",
    output:
        **weights_figure_outputs("weights_figures_stats"),
    log:
        "results/{model}/{corpus}/logs/weights_figures_stats.log",
    conda:
        "../envs/plots.yaml"
    script:
        "../scripts/weights_figures.py"


rule weights_figure_gradients:
    input:
        gradients="results/{model}/{corpus}/weights/gradients.tsv",
    output:
        **weights_figure_outputs("weights_figure_gradients"),
    log:
        "results/{model}/{corpus}/logs/weights_figure_gradients.log",
    conda:
        "../envs/plots.yaml"
    script:
        "../scripts/weights_figures.py"


rule weights_figures_map:
    input:
        head_map="results/{model}/{corpus}/weights/head_map.tsv",
        linkage="results/{model}/{corpus}/weights/linkage.tsv",
    output:
        **weights_figure_outputs("weights_figures_map"),
    log:
        "results/{model}/{corpus}/logs/weights_figures_map.log",
    conda:
        "../envs/plots.yaml"
    script:
        "../scripts/weights_figures.py"
