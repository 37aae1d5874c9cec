"""Coreference heads on GAP (Clark et al. 2019, section 4.2; their code was never released).

For an example where exactly one of the candidates A, B is coreferent with the pronoun, a head
picks the candidate whose words receive more attention from the pronoun: score(C) = sum over
C's words w of A[p, w], A word-level, p the pronoun's word (the mean row when it spans several).
A tie counts as wrong. For causal models a candidate after the pronoun cannot be seen: such
examples are counted in `n_unseen`, not scored. Baselines: the nearest candidate (word distance
from the pronoun to the closest word of the mention; the later one on a tie) and the first one.
Gender follows the pronoun (he/him/his/himself masculine, she/her/hers/herself feminine).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

MASCULINE = {"he", "him", "his", "himself"}
FEMININE = {"she", "her", "hers", "herself"}


def gender(meta: dict) -> str:
    """'masculine', 'feminine' or 'other' from the pronoun's words."""
    words = {meta["words"][i].lower() for i in meta["pronoun"]}
    if words & MASCULINE:
        return "masculine"
    if words & FEMININE:
        return "feminine"
    return "other"


def usable(meta: dict) -> bool:
    """Exactly one candidate coreferent, and every mention covers at least one word."""
    return meta["a_coref"] != meta["b_coref"] and all(meta[k] for k in ("pronoun", "a", "b"))


def example_arrays(metas: list[dict], n_words: int):
    """Pronoun rows [B, W] (mean), candidate indicators A, B [B, W], truth [B] (1 = A),
    usable [B], gender labels, last word of each mention [B, 3] (pronoun, a, b), first words."""
    B = len(metas)
    pronoun = np.zeros((B, n_words), np.float32)
    cand = np.zeros((2, B, n_words), np.float32)
    truth = np.array([bool(m.get("a_coref")) for m in metas])
    ok = np.array([usable(m) for m in metas])
    last = np.zeros((B, 3), np.int64)
    first = np.zeros((B, 3), np.int64)
    for b, m in enumerate(metas):
        if not ok[b]:
            continue
        pronoun[b, m["pronoun"]] = 1 / len(m["pronoun"])
        cand[0, b, m["a"]] = 1
        cand[1, b, m["b"]] = 1
        for k, key in enumerate(("pronoun", "a", "b")):
            first[b, k], last[b, k] = min(m[key]), max(m[key])
    return pronoun, cand, truth, ok, [gender(m) for m in metas], first, last


class CorefCounts:
    """Correct counts per (source, layer, head) and gender; baselines once per example."""

    def __init__(self):
        self.correct: dict[tuple[str, int], np.ndarray] = {}  # [H', 3 genders]
        self.heads: dict[str, np.ndarray] = {}
        self.n = np.zeros(3, np.int64)  # scored examples per gender
        self.n_unseen = 0
        self.baselines = {"nearest": np.zeros(3, np.int64), "first": np.zeros(3, np.int64)}

    @staticmethod
    def _gender_index(genders) -> np.ndarray:
        return np.array([{"masculine": 0, "feminine": 1}.get(g, 2) for g in genders])

    @staticmethod
    def _visible(first, last, ok, causal):
        if not causal:
            return ok
        return ok & (last[:, 1] <= last[:, 0]) & (last[:, 2] <= last[:, 0])

    def add_examples(self, metas: list[dict], n_words: int, causal: bool) -> None:
        """Count scored examples and the baselines for a batch (once per batch)."""
        _, _, truth, ok, genders, first, last = example_arrays(metas, n_words)
        scored = self._visible(first, last, ok, causal)
        self.n_unseen += int((ok & ~scored).sum())
        g = self._gender_index(genders)
        self.n += np.bincount(g[scored], minlength=3)
        p = (first[:, 0] + last[:, 0]) / 2
        distance = [np.minimum(np.abs(first[:, k] - p), np.abs(last[:, k] - p)) for k in (1, 2)]
        nearest_a = distance[0] < distance[1]
        nearest_a |= (distance[0] == distance[1]) & (first[:, 1] > first[:, 2])
        first_a = first[:, 1] < first[:, 2]
        for name, pick in (("nearest", nearest_a), ("first", first_a)):
            hit = scored & (pick == truth)
            self.baselines[name] += np.bincount(g[hit], minlength=3)

    def add(self, source, layer, head_labels, word_maps, metas, causal) -> None:
        """word_maps [B, H', W, W] (specials dropped), metas of the batch's sequences."""
        W = word_maps.shape[-1]
        pronoun, cand, truth, ok, genders, first, last = example_arrays(metas, W)
        scored = torch.from_numpy(self._visible(first, last, ok, causal))
        rows = torch.einsum("bw,bhwv->bhv", torch.from_numpy(pronoun), word_maps.float())
        score = torch.einsum("bhv,cbv->cbh", rows, torch.from_numpy(cand))
        pick_a = score[0] > score[1]
        pick_b = score[1] > score[0]
        truth_t = torch.from_numpy(truth)[:, None]
        hit = (torch.where(truth_t, pick_a, pick_b) & scored[:, None]).numpy()  # [B, H']
        g = self._gender_index(genders)
        table = self.correct.setdefault((source, layer), np.zeros((hit.shape[1], 3), np.int64))
        for k in range(3):
            table[:, k] += hit[g == k].sum(0)
        self.heads[source] = head_labels

    def heads_table(self) -> pd.DataFrame:
        """coref_heads.tsv: source layer head accuracy n accuracy_masculine accuracy_feminine
        n_unseen status."""
        frames = []
        n = self.n.sum()
        for (source, layer), table in sorted(self.correct.items()):
            frames.append(
                pd.DataFrame(
                    {
                        "source": source,
                        "layer": layer,
                        "head": self.heads[source],
                        "accuracy": table.sum(1) / n if n else np.nan,
                        "n": n,
                        "accuracy_masculine": _share(table[:, 0], self.n[0]),
                        "accuracy_feminine": _share(table[:, 1], self.n[1]),
                        "n_unseen": self.n_unseen,
                        "status": _status(n, self.n_unseen),
                    }
                )
            )
        return pd.concat(frames, ignore_index=True)

    def best_table(self, heads: pd.DataFrame) -> pd.DataFrame:
        """coref_best.tsv: per source the best head, and the baselines as rows of their own;
        ratio_f_m = feminine / masculine accuracy (GAP's bias measure)."""
        scored = heads.dropna(subset=["accuracy"]).sort_values(
            ["source", "accuracy", "layer", "head"], ascending=[True, False, True, True]
        )
        best = scored.groupby("source", sort=False).head(1).assign(method="best head")
        rows = [best]
        for name, hits in self.baselines.items():
            rows.append(
                pd.DataFrame(
                    {
                        "source": ["baseline"],
                        "method": [f"{name} candidate"],
                        "layer": [np.nan],
                        "head": [np.nan],
                        "accuracy": [hits.sum() / self.n.sum() if self.n.sum() else np.nan],
                        "n": [self.n.sum()],
                        "accuracy_masculine": [_share(hits[0], self.n[0])],
                        "accuracy_feminine": [_share(hits[1], self.n[1])],
                    }
                )
            )
        table = pd.concat(rows, ignore_index=True)
        # whole numbers in the TSV ("2", not "2.0"); a baseline row has none (empty cell)
        table[["layer", "head", "n"]] = table[["layer", "head", "n"]].astype("Int64")
        table["ratio_f_m"] = table["accuracy_feminine"] / table["accuracy_masculine"]
        columns = ["source", "method", "layer", "head", "accuracy", "n"]
        columns += ["accuracy_masculine", "accuracy_feminine", "ratio_f_m"]
        return table[columns]


def _share(hits, n):
    return np.where(n > 0, hits / max(int(n), 1), np.nan)


def _status(n, unseen):
    if n == 0:
        return "not applicable (causal)" if unseen else "no examples"
    return "visible examples only (causal)" if unseen else "ok"
