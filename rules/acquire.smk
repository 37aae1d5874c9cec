# Acquire models and data: everything else reads only what these rules write.


rule acquire_model:
    output:
        "results/{model}/model/manifest.json",
    log:
        "results/{model}/logs/acquire_model.log",
    conda:
        "../envs/model.yaml"
    params:
        spec=model_settings,
        mirror=config["mirror"],
    script:
        "../scripts/acquire_model.py"


rule acquire_data:
    output:
        "resources/data/{dataset}/{filename}",
    log:
        "resources/logs/acquire_data/{dataset}/{filename}.log",
    conda:
        "../envs/model.yaml"
    params:
        relpath="{dataset}/{filename}",
        mirror=config["mirror"],
    script:
        "../scripts/acquire_data.py"


rule encode_corpus:
    input:
        manifest=manifest,
        data=corpus_data_files,
    output:
        "results/{model}/{corpus}/encoded.h5",
    log:
        "results/{model}/{corpus}/logs/encode_corpus.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/encode_corpus.tsv"
    conda:
        "../envs/model.yaml"
    params:
        settings=corpus_settings,
    script:
        "../scripts/encode_corpus.py"
