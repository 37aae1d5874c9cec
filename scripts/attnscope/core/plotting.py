"""Figure helpers: one look for every figure, saved as SVG plus PNG."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402

sns.set_theme(context="paper", style="whitegrid")


def save_figure(fig, *paths: str | Path) -> None:
    """Save `fig` to every path (format from the suffix: .svg, .pdf, .png) and close it."""
    for path in paths:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


def status_figure(status: str, title: str):
    """A figure that says, instead of data, why there is none (`core.tables.not_applicable`)."""
    fig, ax = plt.subplots(figsize=(6, 2.5))
    ax.text(0.5, 0.5, status, transform=ax.transAxes, ha="center", va="center", fontsize=11)
    ax.set_axis_off()
    fig.suptitle(title)
    return fig
