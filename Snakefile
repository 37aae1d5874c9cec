import sys
from pathlib import Path

from snakemake.utils import min_version, validate

min_version("9.0")


# The built-in configuration, found from the workflow's folder (also under --directory).
configfile: str(Path(workflow.basedir) / "config" / "config.yaml")


# Blocks that a --configfile or --config replaces instead of merging into the built-in ones
# (models, corpora, the views' sequences): a config that names only your model runs only your
# model, and `sequences: {}` means no built-in sequence. Every other key overrides the built-in
# value and keeps the rest.
sys.path.insert(0, str(Path(workflow.basedir) / "scripts"))
import attnscope.pipeline.config_checks as checks  # noqa: E402
from attnscope.pipeline.memory_estimate import check_declared_jobs  # noqa: E402
from attnscope.pipeline.outputs import families  # noqa: E402
from attnscope.pipeline.user_config import (  # noqa: E402
    replace_user_blocks,
    skip_unnamed_families,
)

replace_user_blocks(config, workflow.config_settings.overwrite_config)

# A key given twice in a config file (the built-in one, a --configfile) is refused by name:
# Snakemake's YAML loader would keep the last without a word.
checks.check_config_files(workflow.configfiles)
validate(config, "config/schema.yaml")
# JSON Schema's integer accepts 2.0: integer settings written as floats are refused here.
checks.check_integer_settings(config, Path(workflow.basedir) / "config" / "schema.yaml")
# A family newer than the user's config (never named under its analyses:) whose built-in
# corpora that config's corpora: leaves out is switched off, and said so before any job.
# (Printed by the main process alone: a cluster job parses the Snakefile again.)
for line in skip_unnamed_families(
    config, workflow.config_settings.overwrite_config, families()
):
    if workflow.is_main_process:
        print(line, file=sys.stderr)


report: "report/workflow.rst"


include: "rules/common.smk"
include: "rules/acquire.smk"
include: "rules/extract.smk"


# One rules file per analysis family, named after it (scripts/attnscope/analyses/<family>/),
# and its collect rule: `snakemake <family>` makes its tables and figures and the records.
for family_name in FAMILIES:

    rule:
        name:
            family_name
        input:
            family_targets(family_name),
            report_targets(),

    include: f"rules/{family_name}.smk"


include: "rules/shards.smk"
include: "rules/figures.smk"
include: "rules/report.smk"


# The families' last checks (Gu et al.'s Sink^eps reads each sequence's first sink_positions
# pieces): once every other setting (and what one family reads of another) has been checked.
checks.check_last(config, FAMILIES)
# Every job of a family's rules file has its memory declared (Family.jobs), a formula or
# why it has none: a new job is never silently left out of the memory estimate.
check_declared_jobs(
    FAMILIES, {rule.name: Path(rule.snakefile).stem for rule in workflow.rules}
)


# Acquisition reads the network or the mirror (compute nodes often have no internet); the
# aggregates and records are bookkeeping: all run on the machine that runs Snakemake.
localrules:
    all,
    acquire_model,
    acquire_data,
    software_versions,
    config_snapshot,
    collect_shards,


# Each family's collect rule and the local rules it declares (Family.local_rules).
workflow.localrules(
    *(rule for family in FAMILIES.values() for rule in family.localrules())
)


onstart:
    # A local run that asks for CUDA where torch sees none stops before any job (a cluster's
    # nodes are checked by the jobs themselves).
    from attnscope.pipeline.models import check_local_device

    if workflow.local_exec:
        check_local_device(config["device"], config["compute_dtype"])
    # Each model and corpus's largest job's working memory, printed (a warning where it
    # exceeds the available memory); the stores this run's jobs still write, printed (and a
    # corpus whose data cannot fill its n_sequences): a disk without room stops the run here.
    from attnscope.pipeline.memory_estimate import print_memory_estimate
    from attnscope.pipeline.disk_estimate import check_disk_space

    print_memory_estimate(config, FAMILIES)
    made = {str(path) for job in workflow.dag.needrun_jobs() for path in job.output}
    check_disk_space(config, FAMILIES, needed=made)
    # Writers killed with kill -9 leave `<output>.partial` files (results/) and folders (a
    # GGUF's dequantisation, resources/models/<name>.<random>.partial); only those whose lock
    # no live writer holds (of this run or another in the same folder) are removed.
    from attnscope.core.files import remove_stale_partials

    stale = remove_stale_partials("results")
    stale += remove_stale_partials("resources")
    for path in stale:
        print(f"removed {path}, left by a killed job")


# The layer shards' files and collected folders are temporary: once a run has removed them,
# their Snakemake records are deleted too, so that another `shards` value reruns nothing (a
# record would show their gathering a changed set of inputs, or their shard jobs changed
# params). Files still there (a failed run, --notemp) keep theirs, and so are redone.
onsuccess:
    forget_records(workflow, shard_records())


rule all:
    default_target: True
    input:
        foundation_targets(),
        [family_targets(name) for name in FAMILIES],
        report_targets(),
