from pathlib import Path

from snakemake.utils import min_version, validate

min_version("9.0")


# The built-in configuration, found from the workflow's folder (also under --directory).
configfile: str(Path(workflow.basedir) / "config" / "config.yaml")


# Models and corpora given with --configfile or --config replace the built-in ones instead of
# being merged with them: a config that names only your model runs only your model. Every
# other key overrides the built-in value and keeps the rest.
for key in ("models", "corpora"):
    if key in workflow.config_settings.overwrite_config:
        config[key] = workflow.config_settings.overwrite_config[key]


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


onstart:
    # Writers killed with kill -9 leave `<output>.partial` files; no writer runs now (Snakemake
    # holds the directory lock), so they are stale.
    from attnscope.core.files import remove_stale_partials

    for stale in remove_stale_partials("results"):
        print(f"removed {stale}, left by a killed job")


rule all:
    input:
        foundation_targets(),
        [family_targets(name) for name in FAMILIES],
        report_targets(),
