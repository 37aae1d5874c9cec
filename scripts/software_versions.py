"""Write every installed Python distribution and the platform, for the report."""

import importlib.metadata
import platform
import sys

import pandas as pd

from attnscope.core.files import write_table
from attnscope.pipeline.job import Job

job = Job(snakemake)
rows = [{"package": "python", "version": sys.version.split()[0]}]
rows.append({"package": "platform", "version": platform.platform()})
rows += sorted(
    (
        {"package": d.metadata["Name"], "version": d.version}
        for d in importlib.metadata.distributions()
    ),
    key=lambda row: row["package"].lower(),
)
write_table(pd.DataFrame(rows).drop_duplicates("package"), job.output[0])
job.log.info("%d packages", len(rows))
