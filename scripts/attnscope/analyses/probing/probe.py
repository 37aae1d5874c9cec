"""Attention-based probing classifiers (Clark et al. 2019, section 5), trained with torch.

Each word i of a sentence picks its syntactic head among the other words j of the same
sentence and ROOT. Features of the pair (i, j): every map k's A_k[i, j] and A_k[j, i] (2F), word
level, rows normalised; ROOT is the special-token pseudo-word (attention from i to the special
tokens and from them to i): the released code appends ROOT at the wrong index, here it is a
candidate of its own.
    attn          score(i, j) = sum_k w_k A_k[i, j] + u_k A_k[j, i]                  (attn-only)
    attn+emb      the weights w, u are linear in the two words' embeddings [e_i ; e_j]
    dist+emb      the same, with one-hot offsets j - i (clipped to +-MAX_OFFSET) and a ROOT
                  indicator instead of attention
    right-branch  head = the next word, ROOT for a sentence's last word (no training)
Softmax over the candidates, cross-entropy, Adam, full pass over the training sentences per
epoch. UAS leaves out words whose UD upos is PUNCT.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

PROBES = ("attn", "attn+emb", "dist+emb")
MAX_OFFSET = 8


@dataclass(frozen=True)
class ProbeTraining:
    """How the probes train: Adam at `learning_rate` for `epochs` full passes, seeded by
    `seed` (initialisation, batch order and the learning curve's subsets), on `train_split`,
    scored on `test_split`; the learning curve adds runs on these `fractions` of the training
    sentences."""

    seed: int
    epochs: int
    learning_rate: float
    fractions: tuple[float, ...] = ()
    train_split: str = "dev"
    test_split: str = "test"


@dataclass
class Sequence:
    """One EWT sequence: maps [F, W + 1, W + 1] (ROOT last), word_vectors [W, d] (embedding
    output), heads [W] (-1 = ROOT), sentence [W] (0/1), scored [W] (False for punctuation)."""

    maps: np.ndarray
    word_vectors: np.ndarray
    heads: np.ndarray
    sentence: np.ndarray
    scored: np.ndarray


def sequence_gold(meta: dict):
    """heads, sentence index and scored (not PUNCT) per word, from an ewt meta object."""
    n = len(meta["words"])
    sentence = (np.arange(n) >= meta.get("segment_a_words", n)).astype(np.int64)
    upos = meta.get("upos", ["X"] * n)
    return np.asarray(meta["heads"]), sentence, np.array([u != "PUNCT" for u in upos])


class Batch(NamedTuple):
    """Padded sequences: features [B, W, W + 1, C] float32 (i, candidate j with ROOT at W,
    then the C features: last, so that the probe's sums over them are matrix products), the
    same features by candidate [B, W + 1, W, C] (contiguous: the candidates' sums read them
    without a copy per step), embeddings [B, W, d], candidate mask [B, W, W + 1], gold [B, W]
    (W = ROOT), scored [B, W] (not punctuation), word mask [B, W]."""

    feats: torch.Tensor
    feats_by_candidate: torch.Tensor
    emb: torch.Tensor
    cand: torch.Tensor
    gold: torch.Tensor
    scored: torch.Tensor
    words: torch.Tensor


def _pad(seqs: list[Sequence], kind: str) -> Batch:
    """The sequences padded into one `Batch` of `kind` ('attn' or 'dist') features."""
    B, W = len(seqs), max(len(s.heads) for s in seqs)
    d = seqs[0].word_vectors.shape[1]
    if kind == "dist":
        C = 2 * MAX_OFFSET + 2
    else:
        C = 2 * seqs[0].maps.shape[0]
    feats = torch.zeros(B, W, W + 1, C)
    emb = torch.zeros(B, W, d)
    cand = torch.zeros(B, W, W + 1, dtype=torch.bool)
    gold = torch.zeros(B, W, dtype=torch.long)
    scored = torch.zeros(B, W, dtype=torch.bool)
    words = torch.zeros(B, W, dtype=torch.bool)
    for b, s in enumerate(seqs):
        w = len(s.heads)
        sent = torch.from_numpy(s.sentence)
        same = (sent[:, None] == sent[None, :]) & ~torch.eye(w, dtype=torch.bool)
        cand[b, :w, :w] = same
        cand[b, :w, W] = True
        gold[b, :w] = torch.from_numpy(np.where(s.heads >= 0, s.heads, W))
        scored[b, :w] = torch.from_numpy(s.scored)
        words[b, :w] = True
        emb[b, :w] = torch.from_numpy(s.word_vectors)
        if kind == "dist":
            offset = (torch.arange(w)[None, :] - torch.arange(w)[:, None]).clamp(
                -MAX_OFFSET, MAX_OFFSET
            )
            feats[b, :w, :w] = torch.nn.functional.one_hot(offset + MAX_OFFSET, C)
            feats[b, :w, W, C - 1] = 1
        else:
            m = torch.from_numpy(s.maps).float().permute(1, 2, 0)  # [w + 1, w + 1, F]
            F = m.shape[-1]
            feats[b, :w, :w, :F] = m[:w, :w]
            feats[b, :w, W, :F] = m[:w, w]
            feats[b, :w, :w, F:] = m[:w, :w].transpose(0, 1)
            feats[b, :w, W, F:] = m[w, :w]
    return Batch(feats, feats.transpose(1, 2).contiguous(), emb, cand, gold, scored, words)


class Probe(torch.nn.Module):
    """Scores [B, W, W + 1] from features [B, W, W + 1, C] (and the same by candidate,
    [B, W + 1, W, C]) and embeddings [B, W, d]."""

    def __init__(self, n_features: int, d: int, with_embeddings: bool):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(n_features))
        self.with_embeddings = with_embeddings
        if with_embeddings:
            self.dep = torch.nn.Linear(d, n_features, bias=False)
            self.head = torch.nn.Linear(d, n_features, bias=False)
            self.root = torch.nn.Parameter(torch.zeros(d))
            for layer in (self.dep, self.head):
                torch.nn.init.normal_(layer.weight, std=0.01)

    def forward(
        self, feats: torch.Tensor, feats_by_candidate: torch.Tensor, emb: torch.Tensor
    ) -> torch.Tensor:
        """score(i, j) = sum_c feats[i, j, c] (bias_c + dep(e_i)_c + head(e_j)_c), summed as
        matrix products: the weights of row i, then those of candidate j (ROOT's: `root`),
        each a row vector times the features' transpose [C, W + 1] (as matrix times vector,
        torch ran these products and their gradients at half the speed)."""
        if not self.with_embeddings:
            return feats @ self.bias
        by_row = self.bias + self.dep(emb)  # [B, W, C]
        cand_emb = torch.cat([emb, self.root.expand(emb.shape[0], 1, -1)], dim=1)
        by_candidate = self.head(cand_emb)  # [B, W + 1, C]
        scores = (by_row[:, :, None, :] @ feats.mT).squeeze(-2)  # [B, W, W + 1]
        from_candidates = (by_candidate[:, :, None, :] @ feats_by_candidate.mT).squeeze(-2)
        return scores + from_candidates.mT  # [B, W + 1, W] -> [B, W, W + 1]


def batches(seqs: list[Sequence], kind: str, size: int = 32):
    """Padded batches of sequences of similar length; kind 'attn' or 'dist' features."""
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i].heads))
    return [_pad([seqs[i] for i in order[k : k + size]], kind) for k in range(0, len(order), size)]


def _uas(model: Probe, batches) -> tuple[float, int]:
    hits = total = 0
    with torch.no_grad():
        for b in batches:
            scores = model(b.feats, b.feats_by_candidate, b.emb)
            pred = scores.masked_fill(~b.cand, -torch.inf).argmax(-1)
            hits += int(((pred == b.gold) & b.scored).sum())
            total += int(b.scored.sum())
    return hits / max(total, 1), total


def train_and_score(
    probe: str,
    train_batches: list,
    test_batches: list,
    *,
    seed: int,
    epochs: int,
    learning_rate: float,
) -> tuple[float, int]:
    """(UAS on the test batches without punctuation, words scored) of `probe` trained on the
    train batches (`batches(..., feature_kind(probe))`)."""
    if probe not in PROBES:
        raise ValueError(f"unknown probe {probe!r} (known: {', '.join(PROBES)})")
    torch.manual_seed(seed)
    n_features, d = train_batches[0].feats.shape[-1], train_batches[0].emb.shape[-1]
    model = Probe(n_features, d, probe != "attn")
    optimiser = torch.optim.Adam(model.parameters(), lr=learning_rate)
    order = np.random.default_rng(seed)
    for _ in range(epochs):
        for k in order.permutation(len(train_batches)):
            b = train_batches[k]
            scores = model(b.feats, b.feats_by_candidate, b.emb).masked_fill(~b.cand, -torch.inf)
            loss = torch.nn.functional.cross_entropy(scores[b.words], b.gold[b.words])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    return _uas(model, test_batches)


def feature_kind(probe: str) -> str:
    return "dist" if probe == "dist+emb" else "attn"


def right_branching(test: list[Sequence]) -> tuple[float, int]:
    """UAS of head = next word of the same sentence, ROOT for each sentence's last word."""
    hits = total = 0
    for s in test:
        w = len(s.heads)
        nxt = np.arange(1, w + 1)
        last = np.r_[s.sentence[1:] != s.sentence[:-1], True]
        pred = np.where(last, -1, nxt)
        hits += int(((pred == s.heads) & s.scored).sum())
        total += int(s.scored.sum())
    return hits / max(total, 1), total


def load_split(features_path: str, source: str, metas: list[dict], split: str) -> list[Sequence]:
    """The sequences of one EWT split ('dev' or 'test') with one source's maps, in reading
    order (a store keeps EWT longest first: `data.corpora.layout.longest_first`), so that the
    training subsets and batches do not depend on how the store orders them."""
    from attnscope.analyses.probing.features import read_sequences

    in_split = [i for i, m in enumerate(metas) if m.get("split") == split]
    indices = np.array(sorted(in_split, key=lambda i: metas[i].get("read_order", i)))
    if not len(indices):
        raise ValueError(f"no sequences of split {split!r} (the ewt meta names no such split)")
    out = []
    for i, (maps, embeddings) in zip(
        indices, read_sequences(features_path, source, indices), strict=True
    ):
        heads, sentence, scored = sequence_gold(metas[i])
        out.append(Sequence(maps, embeddings, heads, sentence, scored))
    return out


def probe_tables(
    features_path: str, metas: list[dict], sources: list[str], training: ProbeTraining, log=None
):
    """probe.tsv (source probe uas n_words n_train status) and probe_learning_curve.tsv
    (source probe train_fraction n_train uas n_words). Training subsets: seeded draws."""
    splits = {m.get("split") for m in metas}
    missing = [s for s in (training.train_split, training.test_split) if s not in splits]
    if missing:  # e.g. a corpus cut to its first sequences, all from dev
        status = f"not applicable: no {' or '.join(missing)} sequences in the corpus"
        if log:
            log.warning("probe %s", status)
        rows = [(s, p, np.nan, 0, 0, status) for s in sources for p in PROBES]
        curve = [(s, p, 1.0, 0, np.nan, 0) for s in sources for p in PROBES]
    else:
        rows, curve = _train_all(features_path, metas, sources, training, log)
    import pandas as pd

    columns = ["source", "probe", "uas", "n_words", "n_train", "status"]
    probe_table = pd.DataFrame(rows, columns=columns)
    curve_table = pd.DataFrame(
        curve, columns=["source", "probe", "train_fraction", "n_train", "uas", "n_words"]
    )
    return probe_table, curve_table


def _train_all(features_path, metas, sources, training: ProbeTraining, log):
    rows, curve = [], []
    for s_i, source in enumerate(sources):
        rng = np.random.default_rng(training.seed)  # the same training subsets for every source
        train = load_split(features_path, source, metas, training.train_split)
        test = load_split(features_path, source, metas, training.test_split)
        subsets = {1.0: np.arange(len(train))}
        for fraction in training.fractions:
            size = max(1, round(fraction * len(train)))
            subsets[fraction] = np.sort(rng.permutation(len(train))[:size])
        # dist+emb needs no maps: trained once, reported under source "none"
        probes = [p for p in PROBES if s_i == 0 or p != "dist+emb"]
        found = {}  # (probe, fraction) -> (uas, words scored)
        for kind in dict.fromkeys(feature_kind(p) for p in probes):
            test_batches = batches(test, kind)  # one kind's padded test set in memory at a time
            for fraction, subset in subsets.items():
                train_batches = batches([train[i] for i in subset], kind)  # for its probes
                for probe in (p for p in probes if feature_kind(p) == kind):
                    found[probe, fraction] = train_and_score(
                        probe,
                        train_batches,
                        test_batches,
                        seed=training.seed,
                        epochs=training.epochs,
                        learning_rate=training.learning_rate,
                    )
                    if log:
                        name = "none" if probe == "dist+emb" else source
                        uas = found[probe, fraction][0]
                        log.info("%s %s %.2f of train: UAS %.4f", name, probe, fraction, uas)
                del train_batches  # freed before the next subset's batches are built
            del test_batches
        for probe in probes:
            name = "none" if probe == "dist+emb" else source
            for fraction, subset in sorted(subsets.items()):
                uas, n = found[probe, fraction]
                curve.append((name, probe, fraction, len(subset), uas, n))
                if fraction == 1.0:
                    rows.append((name, probe, uas, n, len(subset), "ok"))
        if s_i == 0:
            uas, n = right_branching(test)
            rows.append(("none", "right-branching", uas, n, 0, "ok"))
    return rows, curve
