"""Clark's behaviour labels of heads, from the per-head statistics table (no torch needed)."""

from __future__ import annotations

import pandas as pd

BEHAVIOURS = ("broad", "CLS", "SEP", "punct", "prev", "next", "other")  # label order


def behaviour(
    heads: pd.DataFrame, broad_entropy: float, special_mass: float, position_mass: float
) -> pd.Series:
    """Clark's behaviour label per head row, the first that applies in this order:
    broad (entropy > broad_entropy), CLS / SEP / punct (mass > special_mass),
    prev / next (attention > position_mass), else other."""
    rules = [
        ("broad", heads["entropy"] > broad_entropy),
        ("CLS", heads["cls"] > special_mass),
        ("SEP", heads["sep"] > special_mass),
        ("punct", heads["punct"] > special_mass),
        ("prev", heads["prev"] > position_mass),
        ("next", heads["next"] > position_mass),
    ]
    label = pd.Series("other", index=heads.index)
    for name, hit in reversed(rules):  # earlier rules overwrite later ones
        label = label.mask(hit, name)
    return label
