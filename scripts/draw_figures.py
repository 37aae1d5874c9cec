"""Draw a group of declared figures from their tables, each with the function of the same
name in the family's plots module (every <family>_figures rule, `FigureGroup`)."""

import importlib

import pandas as pd

from attnscope.core.plotting import save_figure, status_figure
from attnscope.core.tables import is_not_applicable
from attnscope.pipeline.job import Job

job = Job(snakemake)
params = job.params  # family, figures: {figure: {tables, settings}} (rules/figures.smk)


def read(paths):
    """One table for a single path, a list of tables (one per model) for a list of paths."""
    if isinstance(paths, str):
        return pd.read_csv(paths, sep="\t")
    return [pd.read_csv(path, sep="\t") for path in paths]


plots = importlib.import_module(f"attnscope.analyses.{params.family}.plots")
for figure, declared in params.figures.items():
    tables = {stem: read(job.input[stem]) for stem in declared["tables"]}
    settings = declared["settings"]
    single = [table for table in tables.values() if isinstance(table, pd.DataFrame)]
    skipped = next((table for table in single if is_not_applicable(table)), None)
    if skipped is not None:  # e.g. a learned-position analysis of a rotary model
        drawn = status_figure(skipped["status"].iloc[0], settings["title"])
    else:
        drawn = getattr(plots, figure)(**tables, **settings)
    save_figure(drawn, job.output[f"{figure}_svg"], job.output[f"{figure}_png"])
    job.log.info("drew %s / %s", params.family, figure)
