# Position analyses (Yamamoto & Matsuzaki; ANALYSES.md §4): position-embedding spectra and PCA,
# the SVD of W^A = W^Q (W^K)^T and the rotation R per head (weights only, on the CPU), then one
# streaming pass over the position corpus for tr_t(A), spectra of X/Q/K, eigen-waves and
# xcov/xcorr, k-means over tr_t(A), and figures drawn from the tables.

POSITION = config["analyses"]["position"]
POSITION_REPORT = "Position (Yamamoto & Matsuzaki)"
# Figures: scope -> (table folder, log folder, report subcategory), and figure -> its tables.
POSITION_FIGURE_SCOPES = {
    "model": ("results/{model}/model", "results/{model}/logs", "{model} / model"),
    "corpus": (
        "results/{model}/{corpus}/position",
        "results/{model}/{corpus}/logs",
        "{model} / {corpus}",
    ),
}
POSITION_FIGURE_TABLES = {
    "model": {
        "pe_spectrum": {"spectrum": "pe_spectrum.tsv"},
        "pe_pca": {"pca": "pe_pca.tsv"},
        "wa_singular_values": {"singular": "wa_singular_values.tsv"},
        "rotation_angles": {"angles": "rotation_angles.tsv"},
    },
    "corpus": {
        "trt_clusters": {"shares": "trt_clusters.tsv"},
        "trt_centres": {"centres": "trt_centres.tsv"},
        "spectra": {"spectra": "spectra.tsv"},
        "g_map": {"g_map": "g_map.tsv"},
        "xcorr": {"xcorr": "xcorr.tsv", "xcov_sum": "xcov_sum.tsv"},
    },
}
POSITION_MODEL_FIGURES = list(POSITION_FIGURE_TABLES["model"])
POSITION_CORPUS_FIGURES = list(POSITION_FIGURE_TABLES["corpus"])
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


# Figures, drawn from the tables only: one rule per figure (each has its own report caption).
for scope, figures in POSITION_FIGURE_TABLES.items():
    folder, log_folder, subcategory = POSITION_FIGURE_SCOPES[scope]
    for figure, tables in figures.items():

        rule:
            name:
                f"position_figure_{figure}"
            input:
                **{key: f"{folder}/{table}" for key, table in tables.items()},
            output:
                svg=report(
                    f"{folder}/figures/{figure}.svg",
                    caption=f"../report/position/{figure}.rst",
                    category=POSITION_REPORT,
                    subcategory=subcategory,
                ),
                png=f"{folder}/figures/{figure}.png",
            log:
                f"{log_folder}/position_figure_{figure}.log",
            conda:
                "../envs/plots.yaml"
            params:
                figure=figure,
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
