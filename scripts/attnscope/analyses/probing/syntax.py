"""Dependency heads (Clark et al. 2019, section 4.1): argmax accuracy per head and relation.

For a dependent d with gold head g (both words, ROOT excluded):
    dep->head  correct when argmax_j A[d, j] = g   (the dependent's row)
    head->dep  correct when argmax_j A[g, j] = d   (the head's row)
The argmax runs over the words of the sequence (special tokens excluded). For causal models a
word's row sees only words j <= i: a pair whose target comes later cannot be seen in that
direction and is counted in `n_unseen`, not scored. Baseline: for each relation and direction,
the best fixed offset k in -3..3 (k != 0), predicting target = source word + k, over the same
scored pairs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

DIRECTIONS = ("dep->head", "head->dep")
OFFSETS = tuple(k for k in range(-3, 4) if k != 0)
ALL = "all"


def fold_relation(relation: str) -> str:
    """Universal relation without its subtype: obl:tmod -> obl."""
    return relation.split(":")[0]


def gold_arrays(metas: list[dict], n_words: int, relations: list[str]):
    """(heads [B, W] long, -1 for ROOT/padding; relation index [B, W], -1 for none)."""
    index = {r: i for i, r in enumerate(relations)}
    heads = np.full((len(metas), n_words), -1, dtype=np.int64)
    rels = np.full((len(metas), n_words), -1, dtype=np.int64)
    for b, meta in enumerate(metas):
        h = np.asarray(meta["heads"], dtype=np.int64)
        heads[b, : len(h)] = h
        rels[b, : len(h)] = [index.get(fold_relation(r), -1) for r in meta["relations"]]
    rels[heads < 0] = -1
    return torch.from_numpy(heads), torch.from_numpy(rels)


def relation_names(metas: list[dict]) -> list[str]:
    """Folded relations of a corpus (ROOT arcs excluded), sorted."""
    return sorted(
        {
            fold_relation(r)
            for m in metas
            for r, h in zip(m["relations"], m["heads"], strict=True)
            if h >= 0
        }
    )


class SyntaxCounts:
    """Correct / scored / unseen counts per (source, layer, head, relation, direction)."""

    def __init__(self, relations: list[str]):
        self.relations = relations
        self.counts: dict[tuple[str, int], np.ndarray] = {}  # -> [H', R, 2 dirs, 3]
        self.heads: dict[str, np.ndarray] = {}
        self.baseline = np.zeros((len(relations), 2, len(OFFSETS)), dtype=np.int64)
        self.base_n = np.zeros((len(relations), 2), dtype=np.int64)

    def add(
        self,
        source: str,
        layer: int,
        head_labels: np.ndarray,
        word_maps: torch.Tensor,
        heads: torch.Tensor,
        rels: torch.Tensor,
        n_words: torch.Tensor,
        causal: bool,
    ) -> None:
        """word_maps [B, H', W, W] (specials dropped); heads, rels [B, W]; n_words [B]."""
        B, H, W, _ = word_maps.shape
        self.heads[source] = head_labels
        positions = torch.arange(W)
        present = positions[None, :] < n_words[:, None]  # [B, W]
        scores = word_maps.masked_fill(~present[:, None, None, :], -torch.inf)
        if causal:
            scores = scores.masked_fill(~torch.ones(W, W, dtype=torch.bool).tril(), -torch.inf)
        pred = scores.argmax(-1)  # [B, H', W]
        dep = positions[None, :].expand(B, W)
        gold = heads.clamp_min(0)
        dep_to_head = pred == gold[:, None, :]
        head_to_dep = pred.gather(2, gold[:, None, :].expand(B, H, W)) == dep[:, None, :]
        seen, unseen, one_hot = self._pairs(heads, rels, causal)
        correct = torch.stack([dep_to_head, head_to_dep], -1) & seen[:, None]  # [B, H', W, 2]
        table = self.counts.setdefault(
            (source, layer), np.zeros((H, len(self.relations), 2, 3), dtype=np.int64)
        )
        table[..., 0] += torch.einsum("bhwd,bwr->hrd", correct.float(), one_hot).long().numpy()
        table[..., 1] += torch.einsum("bwd,bwr->rd", seen.float(), one_hot).long().numpy()
        table[..., 2] += torch.einsum("bwd,bwr->rd", unseen.float(), one_hot).long().numpy()

    def _pairs(self, heads: torch.Tensor, rels: torch.Tensor, causal: bool):
        """seen, unseen [B, W, 2] per direction, relation one-hot [B, W, R]."""
        W = heads.shape[1]
        dep = torch.arange(W)[None, :]
        labelled = rels >= 0
        visible = [heads < dep, dep < heads] if causal else [labelled, labelled]
        seen = torch.stack([labelled & v for v in visible], -1)
        unseen = labelled[..., None] & ~seen
        one_hot = torch.nn.functional.one_hot(rels.clamp_min(0), len(self.relations)).float()
        return seen, unseen, one_hot * labelled[..., None]

    def add_baseline(self, heads: torch.Tensor, rels: torch.Tensor, causal: bool) -> None:
        """Count the offset baseline for a batch (once per batch, not per source or layer)."""
        seen, _, one_hot = self._pairs(heads, rels, causal)
        delta = heads - torch.arange(heads.shape[1])[None, :]  # gold head - dependent
        for k_i, k in enumerate(OFFSETS):
            hits = torch.stack([delta == k, -delta == k], -1) & seen  # [B, W, 2]
            self.baseline[:, :, k_i] += (
                torch.einsum("bwd,bwr->rd", hits.float(), one_hot).long().numpy()
            )
        self.base_n += torch.einsum("bwd,bwr->rd", seen.float(), one_hot).long().numpy()

    def heads_table(self) -> pd.DataFrame:
        """syntax_heads.tsv: source layer head relation direction accuracy n n_unseen status."""
        frames = []
        names = [*self.relations, ALL]
        for (source, layer), table in sorted(self.counts.items()):
            full = np.concatenate([table, table.sum(1, keepdims=True)], axis=1)  # [H', R+1, 2, 3]
            H = full.shape[0]
            grid = np.meshgrid(np.arange(H), np.arange(len(names)), np.arange(2), indexing="ij")
            h, r, d = (g.ravel() for g in grid)
            correct, n, unseen = (full[h, r, d, i] for i in range(3))
            frames.append(
                pd.DataFrame(
                    {
                        "source": source,
                        "layer": layer,
                        "head": self.heads[source][h],
                        "relation": np.array(names)[r],
                        "direction": np.array(DIRECTIONS)[d],
                        "accuracy": np.where(n > 0, correct / np.maximum(n, 1), np.nan),
                        "n": n,
                        "n_unseen": unseen,
                        "status": np.where(
                            n == 0,
                            np.where(unseen > 0, "not applicable (causal)", "no pairs"),
                            np.where(unseen > 0, "visible pairs only (causal)", "ok"),
                        ),
                    }
                )
            )
        return pd.concat(frames, ignore_index=True)

    def baseline_table(self) -> pd.DataFrame:
        """relation direction baseline_offset baseline_accuracy n (best offset per relation)."""
        hits = np.concatenate([self.baseline, self.baseline.sum(0, keepdims=True)])
        n = np.concatenate([self.base_n, self.base_n.sum(0, keepdims=True)])
        rows = []
        for r, name in enumerate([*self.relations, ALL]):
            for d, direction in enumerate(DIRECTIONS):
                best = int(np.argmax(hits[r, d]))
                accuracy = hits[r, d, best] / n[r, d] if n[r, d] else np.nan
                rows.append((name, direction, OFFSETS[best], accuracy, n[r, d]))
        return pd.DataFrame(
            rows, columns=["relation", "direction", "baseline_offset", "baseline_accuracy", "n"]
        )


def best_table(heads: pd.DataFrame, baseline: pd.DataFrame) -> pd.DataFrame:
    """syntax_best.tsv: the most accurate head per source, relation and direction, with the
    offset baseline. Ties go to the lowest (layer, head)."""
    scored = heads.dropna(subset=["accuracy"]).sort_values(
        ["source", "relation", "direction", "accuracy", "layer", "head"],
        ascending=[True, True, True, False, True, True],
    )
    best = scored.groupby(["source", "relation", "direction"], sort=False).head(1)
    best = best.merge(
        baseline.drop(columns="n"), on=["relation", "direction"], how="left", validate="m:1"
    )
    columns = ["source", "relation", "direction", "layer", "head", "accuracy"]
    columns += ["baseline_offset", "baseline_accuracy", "n"]
    return best[columns].sort_values(["source", "relation", "direction"]).reset_index(drop=True)
