# Acquire models and data: everything else reads only what these rules write.


rule acquire_model:
    output:
        "results/{model}/model/manifest.json",
    params:
        spec=model_settings,
        mirror=config["mirror"],
    log:
        "results/{model}/logs/acquire_model.log",
    conda:
        "../envs/model.yaml"
    script:
        "../scripts/acquire_model.py"


rule acquire_data:
    output:
        "resources/data/{dataset}/{filename}",
    params:
        relpath="{dataset}/{filename}",
        mirror=config["mirror"],
    log:
        "resources/logs/acquire_data/{dataset}/{filename}.log",
    conda:
        "../envs/model.yaml"
    script:
        "../scripts/acquire_data.py"


rule encode_corpus:
    input:
        manifest=manifest,
        data=corpus_data_files,
    output:
        "results/{model}/{corpus}/encoded.h5",
    params:
        settings=corpus_settings,
    log:
        "results/{model}/{corpus}/logs/encode_corpus.log",
    benchmark:
        "results/{model}/{corpus}/benchmarks/encode_corpus.tsv"
    conda:
        "../envs/model.yaml"
    script:
        "../scripts/encode_corpus.py"
