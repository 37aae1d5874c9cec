"""Figure: singular values of the affine maps f (Kobayashi et al. 2020, Fig. 2)."""

import pandas as pd

from attnscope.analyses.norms import plots as norms_plots
from attnscope.core.plotting import save_figure
from attnscope.pipeline import runlog

log = runlog.start(snakemake)  # noqa: F821
table = pd.read_csv(snakemake.input[0], sep="\t")  # noqa: F821
fig = norms_plots.affine_singular_values(table, snakemake.params.seed)  # noqa: F821
save_figure(fig, snakemake.output.svg, snakemake.output.png)  # noqa: F821
