# The exact software and configuration of a run, exported next to the results so that the
# Snakemake report carries them ("Software" and "Configuration" categories).


rule software_versions:
    output:
        report(
            "results/software/versions.tsv",
            caption="../report/software.rst",
            category="Software",
        ),
    log:
        "results/software/logs/software_versions.log",
    conda:
        "../envs/model.yaml"
    script:
        "../scripts/software_versions.py"


rule config_snapshot:
    output:
        report(
            config_record(),
            caption="../report/configuration.rst",
            category="Configuration",
        ),
    log:
        "results/software/logs/config_snapshot.log",
    conda:
        "../envs/model.yaml"
    params:
        config=canonical(config),
    script:
        "../scripts/config_snapshot.py"
