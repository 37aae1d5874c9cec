"""What lifts a head's keys, read by block, by upstream head and by residual direction:
`groups.tsv`, the attend family's sums (`statistics.LiftSums`) grouped (the atlas issue,
item 3: circuits).

Each lift splits exactly over query-side components (what composes into the query:
Q-composition) and over key-side components (K-composition); the marginals `query` and
`key` of `LiftSums` are those splits summed over the other side. Grouping adds members:

    kind block      embed (every embedding component), L{l}.attn (layer l's heads), L{l}.FF
                    (its FF block, experts included), bias (every bias and norm shift, b_O
                    and b_V W_O of every layer included: the split does not attribute them
                    to a layer); with a `component_window`, L1-{m}.attn and L1-{m}.FF (the
                    merged layers)
    kind head       L{l}.H{h} (one upstream head) and the blocks that are no head (embed,
                    L{l}.FF, bias, the merged ones)
    kind direction  (key side, where the massive dimensions are known) dir.massive and
                    dir.rest: the key split along the residual state's massive dimensions and
                    the rest (`corpus_pass.direction_lifts`)

Columns: layer head keys side group kind lift share (lift: the mean per counted row, as in
key_classes.tsv; share: lift / the head's total lift for those keys). Within a head, keys,
side and kind the lifts sum to the total, exactly for block and head (the same numbers
summed in another order), within the decomposition's bound for direction (another split of
the keys, checked in the pass as stage "lift directions").
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnscope.analyses.attend.statistics import LiftSums, share
from attnscope.core.checks import require
from attnscope.maps.attend import DIRECTIONS

COLUMNS = ["layer", "head", "keys", "side", "group", "kind", "lift", "share"]
CHECK_COLUMNS = ["layer", "stage", "max_abs", "max_rel"]


def block_of(name: str) -> str:
    """The block a component belongs to: `embed.word` -> embed, `L3.H5` -> L3.attn, `L3.FF.E2`
    -> L3.FF, `L1-4.heads` -> L1-4.attn, `bias` -> bias."""
    if name.startswith("embed"):
        return "embed"
    if not name.startswith("L"):
        return name
    layer, part = name.split(".", 1)
    return f"{layer}.FF" if part.startswith("FF") else f"{layer}.attn"


def head_of(name: str) -> str:
    """The group of kind head: an upstream head's own name, else its block."""
    layer_part = name.split(".", 1)
    if name.startswith("L") and "-" not in layer_part[0] and layer_part[1].startswith("H"):
        return name
    return block_of(name)


def grouped(values: np.ndarray, names: list[str], group) -> dict[str, float]:
    """{group: the sum of its members' values} in the order of first appearance."""
    out: dict[str, float] = {}
    for value, name in zip(values, names, strict=True):
        key = group(name)
        out[key] = out.get(key, 0.0) + float(value)
    return out


def head_groups(sums: dict, names: list[str], k: int, n_rows: int):
    """(side, kind, {group: mean lift}) of one head and weighting k (n_rows >= 1)."""
    for side in ("query", "key"):
        mean = sums[side][k] / n_rows
        yield side, "block", grouped(mean, names, block_of)
        yield side, "head", grouped(mean, names, head_of)
    if "directions" in sums:
        mean = sums["directions"][k] / n_rows
        yield "key", "direction", dict(zip(DIRECTIONS, mean, strict=True))


def groups_table(found: LiftSums, bound: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """groups.tsv (module docstring) and its check: per layer, the largest difference between
    a grouping's sum and the total lift (stage "groups"), relative to the sum over the rows of
    max_j |s_ij| as the pass's checks; `checks.CheckError` above `bound`."""
    out, worst = [], {}
    for (layer, head), sums in found.sums.items():
        names = found.components[layer]
        for k, keys in enumerate(found.keys[layer]):
            n_rows = max(int(found.rows[layer][k]), 1)
            total = float(sums["query"][k].sum()) / n_rows
            scale = max(float(sums["scale"][k]) / n_rows, np.finfo(float).tiny)
            for side, kind, groups in head_groups(sums, names, k, n_rows):
                for group, lift in groups.items():
                    out.append([layer, head, keys, side, group, kind, lift, share(lift, total)])
                diff = abs(sum(groups.values()) - total)
                old = worst.get(layer, (0.0, 0.0))
                worst[layer] = (max(old[0], diff), max(old[1], diff / scale))
    for layer, (_, rel) in worst.items():
        require(f"layer {layer}: attend stage groups vs the total lift", rel, bound)
    check = [[layer, "groups", *values] for layer, values in sorted(worst.items())]
    return pd.DataFrame(out, columns=COLUMNS), pd.DataFrame(check, columns=CHECK_COLUMNS)
