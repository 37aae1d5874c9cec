"""Circuits: for every head with a role that has key classes (`roles.Role.keys`), the
upstream heads and blocks that carry at least `min_share` of the lift towards its role's keys,
on the query side (Q-composition) and on the key side (K-composition), read from the attend
family's groups.tsv (no torch).

groups.tsv (attend): `layer head keys side group kind lift share`, the lift (logits) of a key
class split by component group; kind `head` gives the upstream heads (`L{l}.H{h}`) and kind
`block` the blocks (`embed`, `L{l}.attn`, `L{l}.FF`, `bias`). The partition read here is the
finest: every upstream head, and every block that is not a layer's attention (whose heads are
already there); its shares sum to 1. circuits.tsv keeps its groups of share >= min_share and a
row `rest` with the remainder, so that a side's lifts sum to the class's total lift and its
shares to 1: `layer head role keys side source lift share`.
"""

from __future__ import annotations

import pandas as pd

from attnscope.analyses.heads.roles import ROLES

COLUMNS = ["layer", "head", "role", "keys", "side", "source", "lift", "share"]
REST = "rest"


def finest_partition(groups: pd.DataFrame) -> pd.DataFrame:
    """The rows of groups.tsv that split a class's lift head by head: kind head, and kind
    block except the layers' attention blocks (`L{l}.attn`) and the blocks that kind head
    already lists (where its rows carry the non-head blocks too)."""
    heads = groups["kind"] == "head"
    listed = set(groups.loc[heads, "group"])
    blocks = (
        (groups["kind"] == "block")
        & ~groups["group"].str.endswith(".attn")
        & ~groups["group"].isin(listed)
    )
    return groups[heads | blocks]


def circuits(roles: pd.DataFrame, groups: pd.DataFrame, min_share: float) -> pd.DataFrame:
    """circuits.tsv from head_roles.tsv's `roles` and attend's groups.tsv."""
    keys_of = {role.name: role.keys for role in ROLES if role.keys}
    finest = finest_partition(groups)
    rows = []
    for head in roles.itertuples(index=False):
        for role in str(head.roles).split(","):
            keys = keys_of.get(role)
            if keys is None:
                continue
            mine = finest[
                (finest["layer"] == head.layer)
                & (finest["head"] == head.head)
                & (finest["keys"] == keys)
            ]
            for side, part in mine.groupby("side", sort=True):
                total = float(part["lift"].sum())
                kept = part[part["share"] >= min_share].sort_values("share", ascending=False)
                for edge in kept.itertuples(index=False):
                    rows.append((head.layer, head.head, role, keys, side, edge.group,
                                 float(edge.lift), float(edge.share)))  # fmt: skip
                rows.append((head.layer, head.head, role, keys, side, REST,
                             total - float(kept["lift"].sum()),
                             1.0 - float(kept["share"].sum())))  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)
