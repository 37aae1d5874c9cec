# Position analyses (Yamamoto & Matsuzaki, EMNLP 2023): position-embedding spectra and
# PCA, the SVD of W^A = W^Q (W^K)^T and the rotation R per head (weights only, on the CPU), then
# one streaming pass over the position corpus for tr_t(A), spectra of X/Q/K, eigen-waves and
# xcov/xcorr, and k-means over tr_t(A). Outputs: scripts/attnscope/analyses/position/outputs.py.

POSITION = config["analyses"]["position"]
POSITION_OUT = FAMILIES["position"]


rule position_embeddings:
    input:
        layer_kinds=layer_kinds,
        manifest=manifest,
        encoded=position_encoded,
    output:
        spectrum=POSITION_OUT.table("pe_spectrum.tsv", "model"),
        pca=POSITION_OUT.table("pe_pca.tsv", "model"),
    log:
        "results/{model}/logs/position_embeddings.log",
    conda:
        "../envs/model.yaml"
    script:
        "../scripts/position_embeddings.py"


rule position_svd:
    input:
        layer_kinds=layer_kinds,
        manifest=manifest,
    output:
        singular_values=POSITION_OUT.table("wa_singular_values.tsv", "model"),
        angles=POSITION_OUT.table("rotation_angles.tsv", "model"),
    log:
        "results/{model}/logs/position_svd.log",
    benchmark:
        "results/{model}/benchmarks/position_svd.tsv"
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    params:
        **settings_params("position", "BilinearSettings"),
    script:
        "../scripts/position_svd.py"


# With shards: S > 1, S position_shard jobs scan a block of layers each and position_corpus
# gathers them from the folder collect_shards moves them to (rules/shards.smk).
rule position_shard:
    input:
        manifest=manifest,
        hidden_states=hidden_states,
    output:
        part=temp(POSITION_OUT.shard_file("pkl")),
    log:
        "results/{model}/{corpus}/logs/position_shard_{shard}.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/position_shard_{shard}.tsv"
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gpu_count,
        slurm_partition=partition,
    params:
        **settings_params("position", "PositionSettings"),
        shards=SHARDS,
    script:
        "../scripts/position_corpus.py"


rule position_corpus:
    input:
        layer_kinds=layer_kinds,
        manifest=manifest,
        hidden_states=hidden_states,
        shards=POSITION_OUT.collected_shards(),
    output:
        trt=POSITION_OUT.table("trt.tsv.gz"),
        spectra=POSITION_OUT.table("spectra.tsv"),
        shifts=POSITION_OUT.table("shifts.tsv"),
        g_map=POSITION_OUT.table("g_map.tsv"),
        xcorr=POSITION_OUT.table("xcorr.tsv"),
        xcov_sum=POSITION_OUT.table("xcov_sum.tsv"),
        identity=POSITION_OUT.table("identity_check.tsv"),
    log:
        "results/{model}/{corpus}/logs/position_corpus.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/position_corpus.tsv"
    priority: PRIORITY_LONG_JOB
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gather_gpu_count,
        slurm_partition=gather_partition,
    params:
        **settings_params("position", "PositionSettings"),
    script:
        "../scripts/position_corpus.py"


rule position_clusters:
    input:
        layer_kinds=layer_kinds,
        trt=POSITION_OUT.table("trt.tsv.gz"),
    output:
        shares=POSITION_OUT.table("trt_clusters.tsv"),
        centres=POSITION_OUT.table("trt_centres.tsv"),
    log:
        "results/{model}/{corpus}/logs/position_clusters.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/position_clusters.tsv"
    conda:
        "../envs/model.yaml"
    params:
        **settings_params("position", "ClusterSettings"),
    script:
        "../scripts/position_clusters.py"


rule position_rotary:
    input:
        layer_kinds=layer_kinds,
        manifest=manifest,
        hidden_states=hidden_states,
        trt=POSITION_OUT.table("trt.tsv.gz"),
    output:
        bands=POSITION_OUT.table("rotary_bands.tsv"),
        ranking=POSITION_OUT.table("rotary_band_ranking.tsv"),
        offsets=POSITION_OUT.table("rotary_offsets.tsv"),
        heads=POSITION_OUT.table("rotary_positional_heads.tsv"),
        check=POSITION_OUT.table("decomposition_check.tsv"),
    log:
        "results/{model}/{corpus}/logs/position_rotary.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/position_rotary.tsv"
    conda:
        "../envs/model.yaml"
    threads: MODEL_THREADS
    resources:
        gpu=gpu_count,
        slurm_partition=partition,
    params:
        **settings_params("position", "RotarySettings"),
    script:
        "../scripts/position_rotary.py"
