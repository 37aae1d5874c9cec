from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, "config/schema.yaml")


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/acquire.smk"
include: "rules/extract.smk"
include: "rules/weights.smk"
include: "rules/norms.smk"
include: "rules/position.smk"
include: "rules/report.smk"


rule all:
    input:
        foundation_targets(),
        weights_targets(),
        norms_targets(),
        position_targets(),
        report_targets(),
