"""The attend family's sums over a corpus and the tables made from them.

Per layer and head, for each weighting (`lift.key_weights`: attended, first, previous, ...):
the lift summed over the counted rows of every sequence per query-side and per key-side
component (the marginals), per component pair [C, C], per rotary band, and the number of
rows. The tables give means per counted row (logit units):

    lift.tsv, key_classes.tsv   layer head keys side query key n_rows lift share
        side total  one row: the whole lift (query and key "all"), share 1
             pair   the top_k component pairs by |lift| (query-side, key-side name)
             query  the top_k query-side components, summed over key-side ones (key "all")
             key    the top_k key-side components, summed over query-side ones (query "all")
        share = lift / the total lift of that head and weighting (signed)
    bands.tsv   layer head keys band n_rows lift share (rotary models)
    trt_terms.tsv   layer head pair t value: the tr_t profile of each embedding term pair
                (`trt_terms.PROFILES`), the mean over sequences (learned-position models)

The pair sums, K x C_l x C_l float64 per head at each analysed layer l (K weightings: 6
for decoders, 9 for encoders, the token classes included; C_l = 2 + (l - 1)(H + 1)
components with one embedding component, fewer with a `component_window`), are kept in a
scratch HDF5 file between sequences (`HeadSums`): memory holds one head's at a time
whatever the depth and the number of sequences. On disk, for all layers: SmolLM2-135M (30
layers, 9 heads, C up to 292) about 380 MB, MiniLM-L6 (C up to 69) about 9 MB,
Llama-3.2-1B (16 layers, 32 heads, C up to 497) about 2.1 GB; the marginals, bands,
directions and check scales (K x C at most per head) stay in memory.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Mapping

import h5py
import numpy as np
import pandas as pd
import torch

from attnscope.analyses.attend.lift import ATTENDED, TOKEN_CLASSES
from attnscope.analyses.attend.trt_terms import OFFSETS, PROFILES

COLUMNS = ["layer", "head", "keys", "side", "query", "key", "n_rows", "lift", "share"]
ALL = "all"


class HeadSums(Mapping):
    """{(layer, head): {"pairs": [K, C, C], "query", "key": [K, C], "bands": [K, B]}}, float64
    sums added to in place. The pairs live in an HDF5 file in the temporary folder (deleted
    when closed) and are read, added to and written back one head at a time; the rest stays
    in memory. Reading a key reads its pairs from the file."""

    def __init__(self):
        self._pairs = h5py.File(tempfile.TemporaryFile(prefix="attnscope-pairs-"), "w")
        self._rest: dict[tuple[int, int], dict[str, np.ndarray]] = {}

    def add(self, key: tuple[int, int], sums: dict[str, np.ndarray]) -> None:
        rest = self._rest.setdefault(key, {})
        for name, value in sums.items():
            if name == "pairs":
                self._add_pairs(dataset(key), value)
            elif name in rest:
                rest[name] += value
            else:
                rest[name] = value

    def _add_pairs(self, path: str, value: np.ndarray) -> None:
        if path in self._pairs:
            stored = self._pairs[path]
            stored[...] = stored[...] + value
        else:
            self._pairs.create_dataset(path, data=value)

    def __getitem__(self, key: tuple[int, int]) -> dict[str, np.ndarray]:
        return {"pairs": self._pairs[dataset(key)][...], **self._rest[key]}

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(self._rest)

    def __len__(self) -> int:
        return len(self._rest)


def dataset(key: tuple[int, int]) -> str:
    """The pair sums' dataset of (layer, head) in `HeadSums`' file."""
    layer, head = key
    return f"{layer}/{head}"


class LiftSums:
    """The sums of every analysed layer, fed one sequence, layer and head at a time.
    `directions`: the residual dimensions (0-based) the key side is split along as well
    (`corpus_pass.direction_lifts`: "directions" [K, 2] per head); none: no split."""

    def __init__(self, directions: tuple[int, ...] = ()):
        self.directions = tuple(int(d) for d in directions)
        self.components: dict[int, list[str]] = {}  # layer (1-based) -> C names
        self.keys: dict[int, list[str]] = {}  # layer -> weighting names, ATTENDED first
        self.sums = HeadSums()  # (layer, head) -> the sums of `add`
        self.rows: dict[int, np.ndarray] = {}  # layer -> [K] counted rows
        self.trt: dict[int, np.ndarray] = {}  # layer -> [H, P, T] tr_t profiles summed
        self.trt_sequences: dict[int, int] = {}  # layer -> sequences summed into trt

    def add(self, layer: int, head: int, names, keys, new: dict[str, torch.Tensor]) -> None:
        """layer, head 1-based; names [C]; keys [K]; `new` the sums over one sequence's rows:
        pairs [K, C, C], query and key [K, C] (marginals), bands [K, B], scale [K] (the
        sum over the counted rows of max_j |s_ij|: the scale of the checks), and with
        `directions` directions [K, 2] (key side: massive, rest)."""
        self.components[layer], self.keys[layer] = list(names), list(keys)
        self.sums.add((layer, head), {n: v.double().cpu().numpy() for n, v in new.items()})

    def count(self, layer: int, rows: torch.Tensor) -> None:
        """rows [K, n] bool: the rows of one sequence that count for each weighting."""
        counted = rows.sum(-1).cpu().numpy()
        self.rows[layer] = self.rows.get(layer, 0) + counted

    def add_trt(self, layer: int, profiles: torch.Tensor) -> None:
        """profiles [H, P, T] (`trt_terms.term_profiles`) of one sequence at `layer`."""
        value = profiles.double().cpu().numpy()
        self.trt[layer] = self.trt[layer] + value if layer in self.trt else value
        self.trt_sequences[layer] = self.trt_sequences.get(layer, 0) + 1

    def trt_table(self) -> pd.DataFrame:
        """trt_terms.tsv: `layer head pair t value`, the mean over sequences (module docstring)."""
        out = []
        for layer, total in sorted(self.trt.items()):
            mean = total / self.trt_sequences[layer]
            for h, p, t in np.ndindex(mean.shape):
                out.append([layer, h + 1, PROFILES[p], OFFSETS[t], float(mean[h, p, t])])
        return pd.DataFrame(out, columns=["layer", "head", "pair", "t", "value"])

    def lift_table(self, top_k: int, classes: bool) -> pd.DataFrame:
        """lift.tsv (`classes` False: the attended keys) or key_classes.tsv (module docstring);
        the token classes' rows (induction, duplicate) after all the others'."""
        out, tokens = [], []
        for (layer, head), sums in self.sums.items():
            names = self.components[layer]
            for k, keys in enumerate(self.keys[layer]):
                if (keys != ATTENDED) != classes:
                    continue
                n_rows = int(self.rows[layer][k])
                mean = {name: sums[name][k] / max(n_rows, 1) for name in ("pairs", "query", "key")}
                chosen = tokens if keys in TOKEN_CLASSES else out
                for row in head_rows(mean, names, top_k):
                    chosen.append([layer, head, keys, *row[:3], n_rows, *row[3:]])
        return pd.DataFrame(out + tokens, columns=COLUMNS)

    def band_table(self) -> pd.DataFrame:
        """bands.tsv (module docstring); the token classes' rows after all the others'."""
        out, tokens = [], []
        for (layer, head), sums in self.sums.items():
            for k, keys in enumerate(self.keys[layer]):
                n_rows = int(self.rows[layer][k])
                mean = sums["bands"][k] / max(n_rows, 1)
                total = mean.sum()
                chosen = tokens if keys in TOKEN_CLASSES else out
                for b, value in enumerate(mean):
                    chosen.append([layer, head, keys, b, n_rows, value, share(value, total)])
        columns = ["layer", "head", "keys", "band", "n_rows", "lift", "share"]
        return pd.DataFrame(out + tokens, columns=columns)


def share(value: float, total: float) -> float:
    return value / total if total != 0 else np.nan


def head_rows(mean: dict[str, np.ndarray], names: list[str], top_k: int):
    """(side, query, key, lift, share) rows of one head and weighting from its mean lift per
    row: `query` and `key` [C] (the marginals) and `pairs` [C, C]: the total, the top_k pairs
    and the top_k components of each side."""
    total = float(mean["query"].sum())
    yield "total", ALL, ALL, total, share(total, total)
    pairs = mean["pairs"]
    flat = np.argsort(-np.abs(pairs), axis=None, kind="stable")[:top_k]
    for c, d in zip(*np.unravel_index(flat, pairs.shape), strict=True):
        value = float(pairs[c, d])
        yield "pair", names[c], names[d], value, share(value, total)
    for side in ("query", "key"):
        marginal = mean[side]
        for c in np.argsort(-np.abs(marginal), kind="stable")[:top_k]:
            query, key = (names[c], ALL) if side == "query" else (ALL, names[c])
            yield side, query, key, float(marginal[c]), share(float(marginal[c]), total)
