from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, "config/schema.yaml")


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/acquire.smk"
include: "rules/extract.smk"


# One rules file per analysis family, named after it (scripts/attnscope/analyses/<family>/).
for family_name in FAMILIES:

    include: f"rules/{family_name}.smk"


include: "rules/figures.smk"
include: "rules/report.smk"


rule all:
    input:
        foundation_targets(),
        [family_targets(name) for name in FAMILIES],
        report_targets(),
