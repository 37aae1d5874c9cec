"""Layer kinds: which layers attend globally and which through a sliding window, and with which
rotary base (Gemma-2/3, Mistral, Qwen2's layer_types, Cohere-2, SmolLM3's layers without
rotation, ...).

Read from the canonical layers, which the architectures fill from the modules themselves (the
window the attention mask uses, the inverse frequencies of the layer's own rotary embedding),
so the table says what the analyses computed with. Every per-layer table gains the columns
`attention window rope_theta` (`with_layer_kinds`); the model-level table is `layer_kinds.tsv`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from attnscope.core.canonical import CanonicalModel, Rotary

KIND_COLUMNS = ("attention", "window", "rope_theta")
GLOBAL, SLIDING = "global", "sliding"
THETA_DIGITS = 4  # significant digits of the recovered base (float32 angles: ~1e-5 relative)


def rope_theta(rotary: Rotary | None) -> float:
    """The rotary base theta of inv_freq[b] = theta^(-2b / dims), from the first two bands:
    (inv_freq[0] / inv_freq[1])^(dims / 2), rounded to THETA_DIGITS significant digits. The
    ratio ignores a factor common to all bands (linear scaling) and the rope types that rescale
    only the long wavelengths (llama3, YaRN). NaN without rotation or with a single band."""
    if rotary is None or rotary.inv_freq.shape[0] < 2:
        return float("nan")
    first, second = rotary.inv_freq[:2].double().cpu().tolist()
    theta = (first / second) ** (rotary.dims / 2)
    return float(f"{theta:.{THETA_DIGITS}g}")


def layer_kinds(weights: CanonicalModel) -> pd.DataFrame:
    """`layer attention window rope_theta`, one row per layer (1-based): attention `sliding`
    where the layer's queries see only their last `window` pieces (i - window < j <= i), else
    `global` (window empty); rope_theta the layer's rotary base, empty for a layer without
    rotation (SmolLM3's NoPE layers) or a model with learned positions."""
    windows = [layer.sliding_window for layer in weights.outline]
    return pd.DataFrame(
        {
            "layer": np.arange(1, len(windows) + 1),
            "attention": [GLOBAL if w is None else SLIDING for w in windows],
            "window": pd.array(windows, dtype="Int64"),
            "rope_theta": [rope_theta(layer.rotary) for layer in weights.outline],
        }
    )


def read_layer_kinds(path) -> pd.DataFrame:
    """A `layer_kinds.tsv` as written (window an integer column with empty cells)."""
    return pd.read_csv(path, sep="\t", dtype={"window": "Int64"})


def with_layer_kinds(table: pd.DataFrame, kinds: pd.DataFrame) -> pd.DataFrame:
    """`table` with the columns `attention window rope_theta` of its `layer` (1-based) after
    its own, which are left as they are, and a kind column whose name the table already uses
    is not added (weights' gradients.tsv: `attention` is the mean attention weight); rows of
    no single layer (a summary over layers, a "not applicable" table) get empty cells, a table
    without a `layer` column is returned unchanged."""
    if "layer" not in table or table.empty:
        return table
    numbers = pd.to_numeric(table["layer"], errors="coerce")
    by_layer = kinds.set_index("layer")
    out = table.copy()
    for column in KIND_COLUMNS:
        if column not in table:
            out[column] = numbers.map(by_layer[column]).to_numpy()
    if "window" not in table:
        out["window"] = pd.array(out["window"], dtype="Int64")
    return out


def has_both_kinds(table: pd.DataFrame) -> bool:
    """Whether `table` (with the kind columns) holds both global and sliding layers."""
    return "attention" in table and set(table["attention"].dropna()) == {GLOBAL, SLIDING}


def kind_summary(table: pd.DataFrame, columns: list[str], by: tuple[str, ...] = ()) -> pd.DataFrame:
    """`attention window rope_theta <by...> n_layers n_rows <columns...>`: the plain mean of
    each column over the rows of one layer kind (and value of `by`), from a per-layer table
    with the kind columns (`with_layer_kinds`); rows of no single layer are left out, a layer
    without rotation is its own kind (rope_theta empty). A boolean column's mean is a share."""
    rows = table[pd.to_numeric(table["layer"], errors="coerce").notna()]
    keys = [*KIND_COLUMNS, *by]
    grouped = rows.groupby(keys, dropna=False, sort=True)
    summary = grouped[columns].mean()
    summary.insert(0, "n_layers", grouped["layer"].nunique())
    summary.insert(1, "n_rows", grouped.size())
    summary = summary.reset_index()
    summary["window"] = pd.array(summary["window"], dtype="Int64")
    return summary
