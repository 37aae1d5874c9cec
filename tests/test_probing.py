"""Probing family (Clark et al. 2019 sections 4-5): word-level maps, syntax and coreference
heads, the attention probe, and the tables against `transformers` attentions."""

from __future__ import annotations

import h5py
import numpy as np
import pandas as pd
import pytest
import torch

from attnscope.analyses.probing.coreference import CorefCounts, gender
from attnscope.analyses.probing.corpus_pass import coref_pass, syntax_pass
from attnscope.analyses.probing.probe import (
    Probe,
    Sequence,
    batches,
    right_branching,
    train_and_score,
)
from attnscope.analyses.probing.settings import ProbingSettings
from attnscope.analyses.probing.syntax import (
    OFFSETS,
    SyntaxCounts,
    best_table,
    fold_relation,
    gold_arrays,
)
from attnscope.analyses.probing.word_maps import word_level
from attnscope.architectures import canonical_weights
from attnscope.core.store import HiddenStates
from attnscope.data.corpora.ewt import conllu_documents, ud_split
from conftest import tiny_model

# --- word-level maps --------------------------------------------------------------------------


def test_word_level_sums_to_and_averages_from():
    """Pieces [CLS] a1 a2 b c1 c2 c3 [SEP]: to = sum over pieces, from = mean (or first)."""
    torch.manual_seed(0)
    word_ids = torch.tensor([[-1, 0, 0, 1, 2, 2, 2, -1]])
    mask = torch.ones(1, 8, dtype=torch.long)
    A = torch.softmax(torch.randn(1, 2, 8, 8), -1)
    words = word_level(A, word_ids, mask, 3, "mean")
    groups = [[1, 2], [3], [4, 5, 6], [0, 7]]  # last: the special pseudo-word
    for h in range(2):
        for i, rows in enumerate(groups):
            for j, cols in enumerate(groups):
                direct = A[0, h][rows][:, cols].sum(1).mean()
                assert torch.isclose(words[0, h, i, j], direct, atol=1e-6)
    # rows still sum to 1 over words + specials
    torch.testing.assert_close(words.sum(-1), torch.ones(1, 2, 4))
    first = word_level(A, word_ids, mask, 3, "first")
    for i, rows in enumerate(groups[:3]):
        for j, cols in enumerate(groups):
            assert torch.isclose(first[0, 0, i, j], A[0, 0, rows[0], cols].sum(), atol=1e-6)
    with pytest.raises(ValueError, match="mode"):
        word_level(A, word_ids, mask, 3, "last")


def test_padding_and_missing_words_stay_zero():
    word_ids = torch.tensor([[-1, 0, 1, -1, -1], [-1, 0, 1, 2, -1]])
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    A = torch.rand(2, 1, 5, 5)
    words = word_level(A, word_ids, mask, 3, "mean")
    assert not words[0, :, 2].any() and not words[0, :, :, 2].any()
    # the padding piece (index 4 of sequence 0) does not count as a special token
    assert torch.isclose(words[0, 0, 0, 3], A[0, 0, 1, [0, 3]].sum())


CONLLU = """# newdoc id = d1
# sent_id = s1
1-2\tdon't\t_\t_\t_\t_\t_\t_\t_\t_
1\tdo\tdo\tAUX\t_\t_\t3\taux\t_\t_
2\tn't\tnot\tPART\t_\t_\t3\tadvmod\t_\t_
3\tgo\tgo\tVERB\t_\t_\t0\troot\t_\t_
3.1\tgo\tgo\tVERB\t_\t_\t_\t_\t3:conj\t_
4\thome\thome\tNOUN\t_\t_\t3\tobl:npmod\t_\tSpaceAfter=No
5\t.\t.\tPUNCT\t_\t_\t3\tpunct\t_\t_

"""


def test_conllu_multiword_tokens_and_empty_nodes(tmp_path):
    """`1-2` lines give no word (their parts do), `3.1` empty nodes are no word either; heads
    keep pointing at the right words; relations fold their subtype."""
    path = tmp_path / "en_ewt-ud-test.conllu"
    path.write_text(CONLLU)
    (doc,) = list(conllu_documents([str(path)]))
    (sentence,) = doc
    assert sentence["words"] == ["do", "n't", "go", "home", "."]
    assert sentence["heads"] == [3, 3, 0, 3, 3]
    assert sentence["upos"][-1] == "PUNCT"
    assert sentence["spaces"] == [False, False, True, True, False]
    assert ud_split(str(path)) == "test"
    assert fold_relation("obl:npmod") == "obl"


# --- syntax -----------------------------------------------------------------------------------


def planted(metas, n_words, H=2, wrong_head=1):
    """Word maps [B, H, W, W]: head 0 attends from every dependent to its gold head (ROOT
    words to themselves), head `wrong_head` to the next word."""
    B = len(metas)
    maps = torch.full((B, H, n_words, n_words), 0.01)
    for b, m in enumerate(metas):
        for d, g in enumerate(m["heads"]):
            maps[b, 0, d, g if g >= 0 else d] = 1
            maps[b, wrong_head, d, min(d + 1, len(m["heads"]) - 1)] = 1
    return maps


META = [
    {
        "words": list("abcde"),
        "heads": [1, -1, 1, 4, 1],
        "relations": ["det", "root", "obj", "amod", "obl:tmod"],
    },
    {"words": list("abc"), "heads": [2, 2, -1], "relations": ["nsubj", "aux", "root"]},
]


def test_planted_head_scores_one_and_offset_baseline_is_a_direct_count():
    relations = sorted(
        {
            fold_relation(r)
            for m in META
            for r, h in zip(m["relations"], m["heads"], strict=True)
            if h >= 0
        }
    )
    counts = SyntaxCounts(relations)
    heads, rels = gold_arrays(META, 5, relations)
    counts.add_baseline(heads, rels, causal=False)
    n_words = torch.tensor([5, 3])
    counts.add("weights", 1, np.array([1, 2]), planted(META, 5), heads, rels, n_words, False)
    table = counts.heads_table()
    dep_head = table[(table["direction"] == "dep->head") & (table["head"] == 1)]
    assert (dep_head["accuracy"].dropna() == 1).all()
    assert dep_head.set_index("relation").loc["all", "n"] == 6
    assert dep_head.set_index("relation").loc["obl", "n"] == 1  # obl:tmod folded
    # direct count of the best offset for "all", dep->head: gold head - dependent
    deltas = [g - d for m in META for d, g in enumerate(m["heads"]) if g >= 0]
    direct = max(sum(x == k for x in deltas) for k in OFFSETS) / len(deltas)
    baseline = counts.baseline_table().set_index(["relation", "direction"])
    assert baseline.loc[("all", "dep->head"), "baseline_accuracy"] == pytest.approx(direct)
    # head->dep of head 2 (next word): correct exactly when the head's next word is the dep
    best = best_table(table, counts.baseline_table())
    assert set(best.columns) == {
        "source",
        "relation",
        "direction",
        "layer",
        "head",
        "accuracy",
        "baseline_offset",
        "baseline_accuracy",
        "n",
    }
    assert best.set_index(["relation", "direction"]).loc[("det", "dep->head"), "head"] == 1


def test_causal_rows_mark_what_cannot_be_seen():
    relations = ["amod", "aux", "det", "nsubj", "obj", "obl"]
    counts = SyntaxCounts(relations)
    heads, rels = gold_arrays(META, 5, relations)
    counts.add(
        "weights", 1, np.array([1, 2]), planted(META, 5), heads, rels, torch.tensor([5, 3]), True
    )
    table = counts.heads_table().set_index(["head", "relation", "direction"])
    # det: dependent 0 -> head 1 comes later: dep->head cannot be seen in a causal model
    row = table.loc[(1, "det", "dep->head")]
    assert row["n"] == 0 and np.isnan(row["accuracy"])
    assert row["n_unseen"] == 1 and row["status"].startswith("not applicable")
    assert table.loc[(1, "det", "head->dep"), "n"] == 1  # the head's row sees the dependent
    assert (table["status"] != "").all()


# --- coreference ------------------------------------------------------------------------------


def gap_meta(words, pronoun, a, b, a_coref):
    return {
        "words": words,
        "pronoun": pronoun,
        "a": a,
        "b": b,
        "a_coref": a_coref,
        "b_coref": not a_coref,
    }


def test_coreference_on_hand_built_rows():
    metas = [
        gap_meta(["Ann", "met", "Bob", ".", "She", "left"], [4], [0], [2], True),
        gap_meta(["Ann", "met", "Bob", ".", "He", "left"], [4], [0], [2], False),
        gap_meta(["Mary", "Lee", "saw", "Jo", ";", "her", "dog"], [5], [0, 1], [3], True),
        {**gap_meta(["X", "and", "Y", "it"], [3], [0], [2], True), "b_coref": True},  # unusable
    ]
    assert [gender(m) for m in metas] == ["feminine", "masculine", "feminine", "other"]
    W = 7
    maps = torch.zeros(4, 2, W, W)
    for b, m in enumerate(metas):
        right = m["a"] if m["a_coref"] else m["b"]
        maps[b, 0, m["pronoun"][0], right] = 1.0  # head 1 always right
        maps[b, 1, m["pronoun"][0], m["a"]] = 1.0  # head 2 always picks A
    counts = CorefCounts()
    counts.add_examples(metas, W, causal=False)
    counts.add("weights", 1, np.array([1, 2]), maps, metas, causal=False)
    table = counts.heads_table().set_index("head")
    assert table.loc[1, "accuracy"] == 1 and table.loc[1, "n"] == 3
    assert table.loc[2, "accuracy"] == pytest.approx(2 / 3)
    assert table.loc[2, "accuracy_masculine"] == 0 and table.loc[2, "accuracy_feminine"] == 1
    best = counts.best_table(counts.heads_table()).set_index("method")
    # nearest candidate: B (Bob, Bob, Jo) in all three; first candidate: A in all three
    assert best.loc["nearest candidate", "accuracy"] == pytest.approx(1 / 3)
    assert best.loc["first candidate", "accuracy"] == pytest.approx(2 / 3)
    assert best.loc["nearest candidate", "ratio_f_m"] == 0  # right only for the "He" row
    assert best.loc["best head", "ratio_f_m"] == 1


# --- probe ------------------------------------------------------------------------------------


def synthetic_sequences(n, seed, planted_map: bool, n_maps=4, d=8):
    """Random dependency trees; map 0 is the gold tree (planted) or everything is noise."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        w = int(rng.integers(4, 12))
        heads = np.array([-1 if i == 0 else int(rng.integers(0, w)) for i in range(w)])
        heads[1:] = np.where(heads[1:] == np.arange(1, w), 0, heads[1:])
        maps = rng.random((n_maps, w + 1, w + 1)).astype(np.float32)
        if planted_map:
            maps[0] = 0.01
            maps[0, np.arange(w), np.where(heads >= 0, heads, w)] = 1
        maps /= maps.sum(-1, keepdims=True)
        out.append(
            Sequence(
                maps.astype(np.float16),
                rng.normal(size=(w, d)).astype(np.float32),
                heads,
                np.zeros(w, np.int64),
                np.ones(w, bool),
            )
        )
    return out


def test_probe_recovers_a_planted_map_and_is_at_chance_on_noise():
    for planted_map, check in ((True, lambda u: u > 0.95), (False, lambda u: u < 0.35)):
        train = batches(synthetic_sequences(60, 0, planted_map), "attn")
        test = batches(synthetic_sequences(40, 1, planted_map), "attn")
        uas, n = train_and_score("attn", train, test, seed=0, epochs=30, learning_rate=0.05)
        assert n > 100 and check(uas), (planted_map, uas)
    seqs = synthetic_sequences(10, 2, True)
    for s in seqs:
        s.heads[:] = np.r_[np.arange(1, len(s.heads)), -1]
    assert right_branching(seqs)[0] == 1


def test_probe_scores_are_the_papers_bilinear_sum_over_maps_and_embeddings():
    """score(i, j) = sum_k A_k[i, j] (b + D e_i + H e_j)_k + A_k[j, i] (...)_{F + k}, with
    ROOT's embedding `root`, by loops over the padded batch (float64)."""
    seqs = synthetic_sequences(5, 3, False, n_maps=3, d=6)
    batch = batches(seqs, "attn", size=8)[0]
    torch.manual_seed(1)
    probe = Probe(6, 6, with_embeddings=True)
    with torch.no_grad():
        for p in probe.parameters():
            p.normal_()
        scores = probe(batch.feats, batch.feats_by_candidate, batch.emb).double()
    b, D, H = (t.detach().double() for t in (probe.bias, probe.dep.weight, probe.head.weight))
    root = probe.root.detach().double()
    W = batch.words.shape[1]  # the batch's ROOT column
    for k, s in enumerate(sorted(seqs, key=lambda s: len(s.heads))):
        w, e = len(s.heads), torch.from_numpy(s.word_vectors).double()
        maps = torch.from_numpy(s.maps.astype(np.float64))  # [F, w + 1, w + 1], ROOT at w
        for i in range(w):
            for j in range(w + 1):
                e_j = root if j == w else e[j]
                x = torch.cat([maps[:, i, j], maps[:, j, i]])
                expected = float(x @ (b + D @ e[i] + H @ e_j))
                got = float(scores[k, i, W if j == w else j])
                assert abs(got - expected) < 1e-4 * (1 + abs(expected)), (k, i, j)
    assert (scores[batch.words.logical_not()] == 0).all()  # padded rows score nothing


# --- tables against transformers ---------------------------------------------------------------

RELATIONS = ["det", "nsubj", "obj", "amod:x"]


def tiny_corpus(tmp_path, architecture, seed=3):
    """A tiny store whose words span 1-2 pieces, with random gold trees and GAP mentions."""
    from attnscope.model.extract import ExtractSettings, extract
    from conftest import write_tiny_encoded

    model = tiny_model(architecture)
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", architecture, batch=5, length=16)
    rng = np.random.default_rng(seed)
    metas = []
    with h5py.File(encoded, "r+") as f:
        category, mask = f["category"][()], f["attention_mask"][()]
        word_ids = np.full(category.shape, -1, np.int32)
        for b in range(len(category)):
            real = np.flatnonzero((category[b] >= 0) & (category[b] != 1) & (category[b] != 2))
            real = real[mask[b, real] == 1]
            w = 0
            for k, p in enumerate(real):  # every third piece continues the word before
                if k and k % 3 == 2 and real[k - 1] == p - 1:
                    word_ids[b, p] = w - 1
                else:
                    word_ids[b, p] = w
                    w += 1
            heads = [-1] + [int(rng.integers(0, w)) for _ in range(w - 1)]
            heads = [h if h != i else -1 for i, h in enumerate(heads)]
            metas.append(
                {
                    "words": [f"w{i}" for i in range(w)],
                    "heads": heads,
                    "relations": [
                        RELATIONS[i % 4] if h >= 0 else "root" for i, h in enumerate(heads)
                    ],
                    "pronoun": [w - 1],
                    "a": [0, 1],
                    "b": [w - 3],
                    "a_coref": bool(b % 2),
                    "b_coref": not b % 2,
                    "upos": ["PUNCT" if i == 2 else "NOUN" for i in range(w)],
                    "split": "dev" if b < 3 else "test",
                    "segment_a_words": w // 2,
                }
            )
        del f["word_ids"]
        f["word_ids"] = word_ids
    store = tmp_path / "hidden_states.h5"
    extract(model, encoded, store, ExtractSettings(batch_size=3))
    return store, model, metas


def direct_word_map(a, word_ids):
    """Word-level map by loops over words (independent of word_maps.py): a [n, n]."""
    W = word_ids.max() + 1
    out = np.zeros((W, W))
    for i in range(W):
        rows = np.flatnonzero(word_ids == i)
        for j in range(W):
            out[i, j] = a[rows][:, word_ids == j].sum(1).mean()
    return out


@pytest.mark.parametrize("architecture", ["bert", "gpt2"])
def test_tables_match_transformers_attentions(tmp_path, architecture):
    store_path, model, metas = tiny_corpus(tmp_path, architecture)
    causal = architecture == "gpt2"
    L = model.config.num_hidden_layers
    # a hand-written mixing maps.h5 (the mixing family's contract): mean attention over heads
    with HiddenStates(store_path) as store:
        ids = torch.from_numpy(store.input_ids).long()
        mask = torch.from_numpy(store.attention_mask).long()
        types = torch.from_numpy(store.token_type_ids).long()
        word_ids, lengths = store.word_ids, store.lengths
    inputs = {"input_ids": ids, "attention_mask": mask}
    if not causal:
        inputs["token_type_ids"] = types
    with torch.no_grad():
        attentions = model(**inputs, output_attentions=True).attentions
    with h5py.File(tmp_path / "maps.h5", "w") as f:
        f.attrs["scopes"] = ["Attn-w"]
        for l in range(L):
            f[f"Attn-w/{l + 1}"] = attentions[l].mean(1).numpy()
    weights = canonical_weights(model)
    settings = ProbingSettings(("weights", "norms", "Attn-w"), batch_size=2, word_mode="mean")
    with (
        HiddenStates(store_path) as store,
        h5py.File(tmp_path / "maps.h5") as mixing,
        h5py.File(tmp_path / "features.h5", "w") as features,
    ):
        heads_table, best = syntax_pass(store, weights, metas, settings, features, mixing=mixing)
    with HiddenStates(store_path) as store, h5py.File(tmp_path / "maps.h5") as mixing:
        coref, coref_best = coref_pass(store, weights, metas, settings, mixing=mixing)

    H = model.config.num_attention_heads
    rows = heads_table.set_index(["source", "layer", "head", "relation", "direction"])
    coref_rows = coref.set_index(["source", "layer", "head"])
    for l in range(L):
        for h, source in [*[(h, "weights") for h in range(H)], (-1, "Attn-w")]:
            hits = {}
            coref_hits = []
            for s, n in enumerate(lengths):
                a = attentions[l][s].numpy()
                a = a.mean(0) if h < 0 else a[h]
                m = direct_word_map(a[:n, :n], word_ids[s, :n])
                W = m.shape[0]
                if causal:
                    m = np.where(np.tril(np.ones((W, W), bool)), m, -np.inf)
                pred = m.argmax(1)
                for d, g in enumerate(metas[s]["heads"]):
                    if g < 0:
                        continue
                    rel = metas[s]["relations"][d].split(":")[0]
                    for direction, ok, visible in (
                        ("dep->head", pred[d] == g, g < d),
                        ("head->dep", pred[g] == d, d < g),
                    ):
                        if causal and not visible:
                            continue
                        for key in (rel, "all"):
                            hits.setdefault((key, direction), []).append(ok)
                meta = metas[s]
                p = meta["pronoun"][0]
                if not causal or max(meta["a"] + meta["b"]) <= p:
                    score_a, score_b = m[p, meta["a"]].sum(), m[p, meta["b"]].sum()
                    coref_hits.append(
                        (score_a > score_b) if meta["a_coref"] else (score_b > score_a)
                    )
            head = 0 if h < 0 else h + 1
            for (rel, direction), ok in hits.items():
                row = rows.loc[(source, l + 1, head, rel, direction)]
                assert row["n"] == len(ok)
                assert row["accuracy"] == pytest.approx(np.mean(ok)), (source, l, h, rel)
            if coref_hits:
                assert coref_rows.loc[(source, l + 1, head), "accuracy"] == pytest.approx(
                    np.mean(coref_hits)
                )
    # every source has its heads; norms carry the head-summed map as head 0
    assert set(heads_table.query("source == 'norms'")["head"]) == set(range(H + 1))
    assert set(heads_table.query("source == 'Attn-w'")["head"]) == {0}
    assert heads_table["accuracy"].dropna().between(0, 1).all()
    if causal:
        # every pair whose target comes later is counted as unseen and the rows say so
        unseen = heads_table["n_unseen"] > 0
        assert unseen.any() and heads_table.loc[unseen, "status"].str.contains("causal").all()
        assert (heads_table.loc[~unseen, "status"] == "ok").all()
        coref_unseen = coref["n_unseen"] > 0
        assert coref.loc[coref_unseen, "status"].str.contains("causal").all()
    assert set(best["source"]) == set(settings.sources)
    assert set(coref_best["method"]) == {"best head", "nearest candidate", "first candidate"}
    # written as whole numbers (issue 19, item 16): "2", not "2.0"; baselines have none
    written = coref_best.to_csv(sep="\t", index=False).splitlines()
    cells = [line.split("\t") for line in written[1:]]
    for method, layer, head in ((c[1], c[2], c[3]) for c in cells):
        if method == "best head":
            assert layer.isdigit() and head.isdigit(), written
        else:
            assert layer == head == "", written


def test_probe_tables_and_figures_from_a_tiny_run(tmp_path):
    """The probe trains from the features file of a syntax pass; all four figures draw from
    the tables; the family gives EWT only its syntax outputs and GAP only coreference."""
    import matplotlib

    from attnscope.analyses.probing import plots
    from attnscope.analyses.probing.outputs import FAMILY
    from attnscope.analyses.probing.probe import ProbeTraining, probe_tables

    store_path, model, metas = tiny_corpus(tmp_path, "bert")
    weights = canonical_weights(model)
    settings = ProbingSettings(("weights", "norms"), batch_size=2, word_mode="mean")
    with HiddenStates(store_path) as store, h5py.File(tmp_path / "features.h5", "w") as f:
        heads, best = syntax_pass(store, weights, metas, settings, f)
    with HiddenStates(store_path) as store:
        coref_settings = ProbingSettings(("weights",), batch_size=2, word_mode="mean")
        coref, coref_best = coref_pass(store, weights, metas, coref_settings)
    probe, curve = probe_tables(
        str(tmp_path / "features.h5"),
        metas,
        ["weights", "norms"],
        ProbeTraining(seed=0, epochs=2, learning_rate=0.02, fractions=(0.5,)),
    )
    n_test = sum(1 for m in metas[3:] for u in m["upos"] if u != "PUNCT")
    assert set(probe["probe"]) == {"attn", "attn+emb", "dist+emb", "right-branching"}
    assert (probe["n_words"] == n_test).all() and probe["uas"].between(0, 1).all()
    assert len(probe) == 2 * 2 + 2  # attn, attn+emb per source; dist+emb, right-branching
    assert set(curve["train_fraction"]) == {0.5, 1.0}
    # the same training subsets for every source
    sizes = curve.groupby(["train_fraction", "source"])["n_train"].first().unstack()
    assert (sizes.nunique(axis=1) == 1).all()
    tables = {
        "syntax_best": best,
        "syntax_heads": heads,
        "probe": probe,
        "probe_learning_curve": curve,
        "coref_heads": coref,
        "coref_best": coref_best,
    }
    for figure in FAMILY.figures:
        kwargs = {t.split(".")[0]: tables[t.split(".")[0]] for t in figure.tables}
        if "heatmap_relations" in figure.settings:
            kwargs["heatmap_relations"] = ["det", "obj"]
        fig = getattr(plots, figure.name)(title="tiny", **kwargs)
        fig.savefig(tmp_path / f"{figure.name}.png")
        matplotlib.pyplot.close(fig)
    settings = {"syntax_corpus": "ewt", "coref_corpus": "gap"}
    targets = FAMILY.targets(settings, ["m"])
    assert "results/m/ewt/probing/syntax_heads.tsv" in targets
    assert "results/m/gap/probing/coref_heads.tsv" in targets
    assert not any("gap/probing/syntax" in t or "ewt/probing/coref" in t for t in targets)
    assert FAMILY.corpora(settings) == ["ewt", "gap"]


def _features_in_order(path, sequences, order, n_layers=2, heads=3, d=4):
    """A features file and metas of `sequences` (n_words, split, seed) stored in `order`, each
    meta keeping its place in `sequences` as "read_order"; random maps and embeddings."""
    from attnscope.analyses.probing.features import FeatureWriter

    metas, rows = [], [sequences[k] for k in order]
    n_words = np.array([w for w, _, _ in rows])
    with h5py.File(path, "w") as f:
        writer = FeatureWriter(f, n_words, n_layers, d)
        for s, (k, (w, split, seed)) in enumerate(zip(order, rows, strict=True)):
            rng = np.random.default_rng(seed)
            for layer in range(1, n_layers + 1):
                maps = torch.from_numpy(rng.random((1, heads, w + 1, w + 1)))
                writer.add_maps("weights", layer, list(range(heads)), maps, s, s + 1)
            words = torch.from_numpy(rng.normal(size=(1, w + 1, d)).astype(np.float32))
            writer.add_embeddings(words[:, :w], torch.eye(w)[None], s, s + 1)
            heads_of = [-1] + [int(h) for h in rng.integers(0, w, size=w - 1)]
            heads_of = [h if h != i else -1 for i, h in enumerate(heads_of)]
            upos = ["PUNCT" if i == 1 else "NOUN" for i in range(w)]
            words_of = [f"w{i}" for i in range(w)]
            meta = {"words": words_of, "heads": heads_of, "upos": upos, "split": split}
            metas.append({**meta, "read_order": k})
    return metas


def test_the_probes_do_not_depend_on_the_order_of_the_store(tmp_path):
    """The same sentences stored in reading order and longest first (as EWT is stored) give
    the same probe and learning-curve tables: the probe reads each split in reading order."""
    from attnscope.analyses.probing.probe import ProbeTraining, probe_tables

    sequences = [(3 + k % 5, "dev" if k < 8 else "test", k) for k in range(12)]
    longest_first = sorted(range(12), key=lambda k: -sequences[k][0])
    assert longest_first != list(range(12))
    training = ProbeTraining(seed=0, epochs=3, learning_rate=0.05, fractions=(0.5,))
    tables = []
    for name, order in (("read", list(range(12))), ("sorted", longest_first)):
        metas = _features_in_order(tmp_path / f"{name}.h5", sequences, order)
        tables.append(probe_tables(str(tmp_path / f"{name}.h5"), metas, ["weights"], training))
    for read, stored in zip(*tables, strict=True):
        pd.testing.assert_frame_equal(read, stored)


def test_probe_without_a_test_split_says_so(tmp_path):
    from attnscope.analyses.probing.probe import ProbeTraining, probe_tables

    metas = [{"words": ["a"], "heads": [-1], "relations": ["root"], "split": "dev"}]
    probe, curve = probe_tables(
        str(tmp_path / "unused.h5"),
        metas,
        ["weights"],
        ProbeTraining(seed=0, epochs=1, learning_rate=0.1),
    )
    assert probe["uas"].isna().all() and probe["status"].str.contains("no test").all()
