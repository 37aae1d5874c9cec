# Norm-based analysis of attention (Kobayashi et al. 2020; ANALYSES.md section 2).

NORMS = config["analyses"]["norms"]
NORMS_TABLES = [
    "x_dispersion",
    "fx_dispersion",
    "x_summary",
    "fx_summary",
    "alpha_fx_spearman",
    "alpha_fx_sample",
    "sep_heads",
    "token_class_layer",
    "decomposition_check",
]
NORMS_FIGURES = ["alpha_fx_scatter", "sep_heads", "token_class_layer"]


rule norms_affine:
    input:
        manifest=manifest,
    output:
        "results/{model}/model/affine_singular_values.tsv",
    log:
        "results/{model}/logs/norms_affine.log",
    benchmark:
        "results/{model}/benchmarks/norms_affine.tsv"
    conda:
        "../envs/model.yaml"
    threads: 4
    resources:
        gpu=gpu_count,
    params:
        device=config["device"],
    script:
        "../scripts/norms_affine.py"


rule norms_affine_figure:
    input:
        "results/{model}/model/affine_singular_values.tsv",
    output:
        svg=report(
            "results/{model}/model/figures/affine_singular_values.svg",
            caption="../report/norms/affine_singular_values.rst",
            category="Vector norms (Kobayashi et al. 2020)",
            subcategory="{model}",
        ),
        png="results/{model}/model/figures/affine_singular_values.png",
    log:
        "results/{model}/logs/norms_affine_figure.log",
    conda:
        "../envs/plots.yaml"
    params:
        seed=NORMS["seed"],
    script:
        "../scripts/norms_affine_figure.py"


rule norms_compute:
    input:
        manifest=manifest,
        hidden_states=hidden_states,
    output:
        **{
            name: f"results/{{model}}/{{corpus}}/norms/{name}.tsv"
            for name in NORMS_TABLES
        },
        maps="results/{model}/{corpus}/norms/attn_n_maps.h5",
    log:
        "results/{model}/{corpus}/logs/norms_compute.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/norms_compute.tsv"
    conda:
        "../envs/model.yaml"
    threads: 4
    resources:
        gpu=gpu_count,
    params:
        device=config["device"],
        batch_size=config["batch_size"],
        seed=NORMS["seed"],
        spearman_sample_size=NORMS["spearman_sample_size"],
        sample_rate=NORMS["sample_rate"],
        scatter_max_points=NORMS["scatter_max_points"],
        max_rel_residual=NORMS["max_rel_residual"],
        maps_dtype=NORMS["maps_dtype"],
    script:
        "../scripts/norms_compute.py"


rule norms_figures:
    input:
        sample="results/{model}/{corpus}/norms/alpha_fx_sample.tsv",
        spearman="results/{model}/{corpus}/norms/alpha_fx_spearman.tsv",
        sep_heads="results/{model}/{corpus}/norms/sep_heads.tsv",
        token_class_layer="results/{model}/{corpus}/norms/token_class_layer.tsv",
    output:
        **{
            f"{name}_{suffix}": norms_figure(name, suffix)
            for name in NORMS_FIGURES
            for suffix in ("svg", "png")
        },
    log:
        "results/{model}/{corpus}/logs/norms_figures.log",
    conda:
        "../envs/plots.yaml"
    script:
        "../scripts/norms_figures.py"
