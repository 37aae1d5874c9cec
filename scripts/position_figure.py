"""Draw one position-analysis figure from its TSV tables (params.figure names it)."""

import pandas as pd

from attnscope.analyses.position import plots as position_plots
from attnscope.core.plotting import save_figure
from attnscope.pipeline import runlog

log = runlog.start(snakemake)  # noqa: F821
params = snakemake.params  # noqa: F821


def read(paths):
    """One table for a single path, a list of tables for a list of paths."""
    if isinstance(paths, str):
        return pd.read_csv(paths, sep="\t")
    return [pd.read_csv(path, sep="\t") for path in paths]


tables = {name: read(paths) for name, paths in snakemake.input.items()}  # noqa: F821
figure = position_plots.FIGURES[params.figure](**tables, **params.options)
save_figure(figure, snakemake.output.svg, snakemake.output.png)  # noqa: F821
log.info("drew %s", params.figure)
