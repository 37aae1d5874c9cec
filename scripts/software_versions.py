"""Write every installed Python distribution and the platform, for the report."""

import importlib.metadata
import platform
import sys

import pandas as pd

from attnscope.pipeline import runlog

log = runlog.start(snakemake)  # noqa: F821
rows = [{"package": "python", "version": sys.version.split()[0]}]
rows.append({"package": "platform", "version": platform.platform()})
rows += sorted(
    (
        {"package": d.metadata["Name"], "version": d.version}
        for d in importlib.metadata.distributions()
    ),
    key=lambda row: row["package"].lower(),
)
pd.DataFrame(rows).drop_duplicates("package").to_csv(snakemake.output[0], sep="\t", index=False)  # noqa: F821
log.info("%d packages", len(rows))
