"""Write the effective configuration (schema defaults filled in), for the report."""

import yaml

from attnscope.pipeline import runlog

log = runlog.start(snakemake)
with open(snakemake.output[0], "w") as f:
    yaml.safe_dump(dict(snakemake.params.config), f, sort_keys=False)
