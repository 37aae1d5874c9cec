# Layer shards (shards: S > 1): the files of a family's S shard jobs are moved into one folder,
# which the family's gathering rule reads (scripts/attnscope/pipeline/shards.py). The folder
# is the gathering job's one shard input whatever S is (empty with one shard), and the records
# of these intermediate files are forgotten when a run ends (Snakefile: onsuccess, onerror), so
# changing `shards` after a finished run reruns nothing.


rule collect_shards:
    input:
        shard_files,
    output:
        temp(directory("results/{model}/{corpus}/{family}/shards/collected")),
    log:
        "results/{model}/{corpus}/logs/{family}_collect_shards.log",
    conda:
        "../envs/workflow.yaml"
    shell:
        # a rename, not a copy: no extra disk; with one shard there is nothing to move
        'mkdir -p {output:q} && for file in {input:q}; do mv -- "$file" {output:q}/; done'
