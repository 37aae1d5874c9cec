# Acquire models and data: everything else reads only what these rules write.
# The mirror folder is read from the config, not passed as a parameter: where the verified
# files come from does not change them, so moving or respelling it reruns nothing.


rule acquire_model:
    input:
        model_source_files,
    output:
        "results/{model}/model/manifest.json",
    log:
        "results/{model}/logs/acquire_model.log",
    conda:
        "../envs/model.yaml"
    params:
        spec=model_settings,
    script:
        "../scripts/acquire_model.py"


rule model_layer_kinds:
    input:
        manifest=manifest,
    output:
        "results/{model}/model/layer_kinds.tsv",
    log:
        "results/{model}/logs/model_layer_kinds.log",
    conda:
        "../envs/model.yaml"
    script:
        "../scripts/model_layer_kinds.py"


rule acquire_data:
    output:
        "resources/data/{dataset}/{filename}",
    log:
        "resources/logs/acquire_data/{dataset}/{filename}.log",
    conda:
        "../envs/model.yaml"
    params:
        relpath="{dataset}/{filename}",
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
