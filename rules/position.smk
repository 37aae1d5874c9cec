# Position analyses (Yamamoto & Matsuzaki; ANALYSES.md §4): position-embedding spectra and PCA,
# the SVD of W^A = W^Q (W^K)^T and the rotation R per head (weights only, on the CPU), then one
# streaming pass over the position corpus for tr_t(A), spectra of X/Q/K, eigen-waves and
# xcov/xcorr, k-means over tr_t(A), and figures drawn from the tables.

POSITION = config["analyses"]["position"]
POSITION_REPORT = "Position (Yamamoto & Matsuzaki)"
POSITION_MODEL_FIGURES = [
    "pe_spectrum",
    "pe_pca",
    "wa_singular_values",
    "rotation_angles",
]
POSITION_CORPUS_FIGURES = ["trt_clusters", "trt_centres", "spectra", "g_map", "xcorr"]
POSITION_CORPUS_TABLES = [
    "trt.tsv.gz",
    "trt_clusters.tsv",
    "trt_centres.tsv",
    "spectra.tsv",
    "shifts.tsv",
    "g_map.tsv",
    "xcorr.tsv",
    "xcov_sum.tsv",
    "identity_check.tsv",
]


rule position_embeddings:
    input:
        manifest=manifest,
        encoded=position_encoded,
    output:
        spectrum="results/{model}/model/pe_spectrum.tsv",
        pca="results/{model}/model/pe_pca.tsv",
    log:
        "results/{model}/logs/position_embeddings.log",
    conda:
        "../envs/model.yaml"
    script:
        "../scripts/position_embeddings.py"


rule position_svd:
    input:
        manifest=manifest,
    output:
        singular_values="results/{model}/model/wa_singular_values.tsv",
        angles="results/{model}/model/rotation_angles.tsv",
    log:
        "results/{model}/logs/position_svd.log",
    benchmark:
        "results/{model}/benchmarks/position_svd.tsv"
    conda:
        "../envs/model.yaml"
    threads: 4
    params:
        include_bias=POSITION["include_bias"],
    script:
        "../scripts/position_svd.py"


rule position_corpus:
    input:
        manifest=manifest,
        hidden_states=hidden_states,
    output:
        trt="results/{model}/{corpus}/position/trt.tsv.gz",
        spectra="results/{model}/{corpus}/position/spectra.tsv",
        shifts="results/{model}/{corpus}/position/shifts.tsv",
        g_map="results/{model}/{corpus}/position/g_map.tsv",
        xcorr="results/{model}/{corpus}/position/xcorr.tsv",
        xcov_sum="results/{model}/{corpus}/position/xcov_sum.tsv",
        identity="results/{model}/{corpus}/position/identity_check.tsv",
    log:
        "results/{model}/{corpus}/logs/position_corpus.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/position_corpus.tsv"
    conda:
        "../envs/model.yaml"
    threads: 4
    resources:
        gpu=gpu_count,
    params:
        t_max=POSITION["t_max"],
        xcorr_t_max=POSITION["xcorr_t_max"],
        include_bias=POSITION["include_bias"],
        heads=POSITION["heads"],
        batch_size=config["batch_size"],
        device=config["device"],
    script:
        "../scripts/position_corpus.py"


rule position_clusters:
    input:
        trt="results/{model}/{corpus}/position/trt.tsv.gz",
    output:
        shares="results/{model}/{corpus}/position/trt_clusters.tsv",
        centres="results/{model}/{corpus}/position/trt_centres.tsv",
    log:
        "results/{model}/{corpus}/logs/position_clusters.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/position_clusters.tsv"
    conda:
        "../envs/model.yaml"
    params:
        n_clusters=POSITION["n_clusters"],
        seed=POSITION["seed"],
    script:
        "../scripts/position_clusters.py"


rule position_figure_pe_spectrum:
    input:
        spectrum="results/{model}/model/pe_spectrum.tsv",
    output:
        svg=report(
            "results/{model}/model/figures/pe_spectrum.svg",
            caption="../report/position/pe_spectrum.rst",
            category=POSITION_REPORT,
            subcategory="{model} / model",
        ),
        png="results/{model}/model/figures/pe_spectrum.png",
    log:
        "results/{model}/logs/position_figure_pe_spectrum.log",
    conda:
        "../envs/plots.yaml"
    params:
        figure="pe_spectrum",
        options=position_title,
    script:
        "../scripts/position_figure.py"


rule position_figure_pe_pca:
    input:
        pca="results/{model}/model/pe_pca.tsv",
    output:
        svg=report(
            "results/{model}/model/figures/pe_pca.svg",
            caption="../report/position/pe_pca.rst",
            category=POSITION_REPORT,
            subcategory="{model} / model",
        ),
        png="results/{model}/model/figures/pe_pca.png",
    log:
        "results/{model}/logs/position_figure_pe_pca.log",
    conda:
        "../envs/plots.yaml"
    params:
        figure="pe_pca",
        options=position_title,
    script:
        "../scripts/position_figure.py"


rule position_figure_wa_singular_values:
    input:
        singular="results/{model}/model/wa_singular_values.tsv",
    output:
        svg=report(
            "results/{model}/model/figures/wa_singular_values.svg",
            caption="../report/position/wa_singular_values.rst",
            category=POSITION_REPORT,
            subcategory="{model} / model",
        ),
        png="results/{model}/model/figures/wa_singular_values.png",
    log:
        "results/{model}/logs/position_figure_wa_singular_values.log",
    conda:
        "../envs/plots.yaml"
    params:
        figure="wa_singular_values",
        options=position_title,
    script:
        "../scripts/position_figure.py"


rule position_figure_rotation_angles:
    input:
        angles="results/{model}/model/rotation_angles.tsv",
    output:
        svg=report(
            "results/{model}/model/figures/rotation_angles.svg",
            caption="../report/position/rotation_angles.rst",
            category=POSITION_REPORT,
            subcategory="{model} / model",
        ),
        png="results/{model}/model/figures/rotation_angles.png",
    log:
        "results/{model}/logs/position_figure_rotation_angles.log",
    conda:
        "../envs/plots.yaml"
    params:
        figure="rotation_angles",
        options=position_title,
    script:
        "../scripts/position_figure.py"


rule position_figure_trt_clusters:
    input:
        shares="results/{model}/{corpus}/position/trt_clusters.tsv",
    output:
        svg=report(
            "results/{model}/{corpus}/position/figures/trt_clusters.svg",
            caption="../report/position/trt_clusters.rst",
            category=POSITION_REPORT,
            subcategory="{model} / {corpus}",
        ),
        png="results/{model}/{corpus}/position/figures/trt_clusters.png",
    log:
        "results/{model}/{corpus}/logs/position_figure_trt_clusters.log",
    conda:
        "../envs/plots.yaml"
    params:
        figure="trt_clusters",
        options=position_title,
    script:
        "../scripts/position_figure.py"


rule position_figure_trt_centres:
    input:
        centres="results/{model}/{corpus}/position/trt_centres.tsv",
    output:
        svg=report(
            "results/{model}/{corpus}/position/figures/trt_centres.svg",
            caption="../report/position/trt_centres.rst",
            category=POSITION_REPORT,
            subcategory="{model} / {corpus}",
        ),
        png="results/{model}/{corpus}/position/figures/trt_centres.png",
    log:
        "results/{model}/{corpus}/logs/position_figure_trt_centres.log",
    conda:
        "../envs/plots.yaml"
    params:
        figure="trt_centres",
        options=position_title,
    script:
        "../scripts/position_figure.py"


rule position_figure_spectra:
    input:
        spectra="results/{model}/{corpus}/position/spectra.tsv",
    output:
        svg=report(
            "results/{model}/{corpus}/position/figures/spectra.svg",
            caption="../report/position/spectra.rst",
            category=POSITION_REPORT,
            subcategory="{model} / {corpus}",
        ),
        png="results/{model}/{corpus}/position/figures/spectra.png",
    log:
        "results/{model}/{corpus}/logs/position_figure_spectra.log",
    conda:
        "../envs/plots.yaml"
    params:
        figure="spectra",
        options=position_title,
    script:
        "../scripts/position_figure.py"


rule position_figure_g_map:
    input:
        g_map="results/{model}/{corpus}/position/g_map.tsv",
    output:
        svg=report(
            "results/{model}/{corpus}/position/figures/g_map.svg",
            caption="../report/position/g_map.rst",
            category=POSITION_REPORT,
            subcategory="{model} / {corpus}",
        ),
        png="results/{model}/{corpus}/position/figures/g_map.png",
    log:
        "results/{model}/{corpus}/logs/position_figure_g_map.log",
    conda:
        "../envs/plots.yaml"
    params:
        figure="g_map",
        options=position_title,
    script:
        "../scripts/position_figure.py"


rule position_figure_xcorr:
    input:
        xcorr="results/{model}/{corpus}/position/xcorr.tsv",
        xcov_sum="results/{model}/{corpus}/position/xcov_sum.tsv",
    output:
        svg=report(
            "results/{model}/{corpus}/position/figures/xcorr.svg",
            caption="../report/position/xcorr.rst",
            category=POSITION_REPORT,
            subcategory="{model} / {corpus}",
        ),
        png="results/{model}/{corpus}/position/figures/xcorr.png",
    log:
        "results/{model}/{corpus}/logs/position_figure_xcorr.log",
    conda:
        "../envs/plots.yaml"
    params:
        figure="xcorr",
        options=position_title,
    script:
        "../scripts/position_figure.py"


rule position_figure_pe_spectra_models:
    input:
        spectrum=expand("results/{model}/model/pe_spectrum.tsv", model=MODELS),
    output:
        svg=report(
            "results/position_pe_spectra_models.svg",
            caption="../report/position/pe_spectra_models.rst",
            category=POSITION_REPORT,
            subcategory="all models",
        ),
        png="results/position_pe_spectra_models.png",
    log:
        "results/logs/position_figure_pe_spectra_models.log",
    conda:
        "../envs/plots.yaml"
    params:
        figure="pe_spectra_models",
        options={"models": MODELS, "title": "position embeddings"},
    script:
        "../scripts/position_figure.py"
