"""Tidy tables: one row per observation, indices (layer, head, ...) numbered from 1."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd


def index_grid(**axes: int | Sequence) -> pd.DataFrame:
    """Every combination of the axes, the first varying slowest (C order, as `ravel`).

    An int n stands for the indices 1..n; a sequence gives the labels themselves. So
    `index_grid(layer=L, head=H)` lines up with `values.ravel()` of a [L, H] array.
    """
    labels = [
        np.arange(1, a + 1) if isinstance(a, int | np.integer) else np.asarray(a)
        for a in axes.values()
    ]
    mesh = np.meshgrid(*labels, indexing="ij")
    return pd.DataFrame({name: m.reshape(-1) for name, m in zip(axes, mesh, strict=True)})


def indexed_table(values: dict[str, np.ndarray], **axes: int | Sequence) -> pd.DataFrame:
    """`index_grid(**axes)` plus one column per entry of `values`, each raveled in C order."""
    table = index_grid(**axes)
    for name, column in values.items():
        table[name] = np.ravel(column)
    return table


NOT_APPLICABLE = "not applicable"


def not_applicable(reason: str) -> pd.DataFrame:
    """A one-row table saying why an analysis does not apply to a model: `status` column
    "not applicable: <reason>". Figures drawn from it show the status instead of data."""
    return pd.DataFrame({"status": [f"{NOT_APPLICABLE}: {reason}"]})


def is_not_applicable(table: pd.DataFrame) -> bool:
    """Whether `table` is a `not_applicable` table."""
    return "status" in table and str(table["status"].iloc[0]).startswith(NOT_APPLICABLE)


def layer_rows(table: pd.DataFrame, layers: list[int]) -> pd.DataFrame:
    """The rows of `table` for the 1-based `layers` (those a store was made for): rows whose
    `layer` column names another layer are left out; rows of no single layer (such as a
    summary over layers) and tables without a `layer` column are kept whole."""
    if "layer" not in table:
        return table
    numbers = pd.to_numeric(table["layer"], errors="coerce")
    other = numbers.notna() & ~numbers.isin(list(layers))
    return table[~other].reset_index(drop=True)
