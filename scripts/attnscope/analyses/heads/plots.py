"""Figures of the heads family, from its tables only (no torch)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

import attnscope.core.plotting  # noqa: F401  (the shared look; sets the Agg backend)
from attnscope.analyses.heads.atlas import role_counts


def role_counts_grid(head_roles: pd.DataFrame) -> pd.DataFrame:
    """layer x role counts of the roles some head holds (and none)."""
    grid = role_counts(head_roles).pivot(index="layer", columns="role", values="n_heads")
    held = [r for r in grid.columns if grid[r].sum() > 0]
    order = [r for r in role_counts(head_roles)["role"].drop_duplicates() if r in held]
    return grid[order]


def role_grid(head_roles: pd.DataFrame, role_rules: pd.DataFrame, title: str):
    """Heads per layer holding each role (a head may hold several); roles not judged are
    named below the grid."""
    grid = role_counts_grid(head_roles)
    fig, ax = plt.subplots(figsize=(1.2 + 0.55 * grid.shape[1], 1.2 + 0.3 * grid.shape[0]))
    sns.heatmap(grid, ax=ax, annot=True, fmt="d", cmap="Blues", cbar=False)
    ax.set_xlabel("role")
    ax.set_ylabel("layer")
    unjudged = role_rules.loc[role_rules["status"] != "judged", "role"].tolist()
    note = f"not judged: {', '.join(unjudged)}" if unjudged else "every role judged"
    ax.set_title(f"{title}: heads per role and layer\n{note}", fontsize=9)
    fig.tight_layout()
    return fig
