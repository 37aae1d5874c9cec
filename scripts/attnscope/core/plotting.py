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
