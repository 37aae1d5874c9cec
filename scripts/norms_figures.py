"""Figures of one model on one corpus: alpha vs ||f(x)||, [SEP] heads, categories per layer."""

import pandas as pd

from attnscope.analyses.norms import plots as norms_plots
from attnscope.core.plotting import save_figure
from attnscope.pipeline import runlog

log = runlog.start(snakemake)  # noqa: F821
tables = {
    name: pd.read_csv(path, sep="\t")
    for name, path in snakemake.input.items()  # noqa: F821
}
output = snakemake.output  # noqa: F821
figures = {
    "alpha_fx_scatter": norms_plots.alpha_fx_scatter(tables["sample"], tables["spearman"]),
    "sep_heads": norms_plots.sep_heatmaps(tables["sep_heads"]),
    "token_class_layer": norms_plots.token_class_layer(tables["token_class_layer"]),
}
for name, fig in figures.items():
    save_figure(fig, output[f"{name}_svg"], output[f"{name}_png"])
    log.info("drew %s", name)
