"""The heads family: role scores on the repeated corpus (known answers, and against a plain
transformers forward on every architecture's tiny model), the in-context loss, the role
table, circuits.tsv from a constructed groups.tsv, and the atlas page in Chromium."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pandas as pd
import pytest
import torch

from attnscope.analyses.heads.atlas import atlas_data, overview, render, role_counts
from attnscope.analyses.heads.circuits import circuits
from attnscope.analyses.heads.patterns import natural_pattern, repeated_pattern
from attnscope.analyses.heads.repeat_scores import (
    SCORES,
    RepeatScores,
    in_context_loss,
    repeat_length,
    role_scores,
)
from attnscope.analyses.heads.roles import ROLE_NAMES, head_roles, threshold_problems
from attnscope.architectures import architecture, canonical_weights, prediction_head
from attnscope.core.store import HiddenStates
from attnscope.core.tokens import CLS, OTHER
from attnscope.model.extract import ExtractSettings, extract
from conftest import TINY, Opened, tiny_model

START = 2


def repeated_ids(batch: int, length: int, seed: int = 0, vocab: int = TINY["vocab"]):
    """START r r per row, r distinct random pieces of the vocabulary.  [B, 1 + 2 length]"""
    rng = np.random.default_rng(seed)
    pieces = np.arange(5, vocab)
    rows = [rng.choice(pieces, size=length, replace=False) for _ in range(batch)]
    return np.array([[START, *r, *r] for r in rows], dtype=np.int32)


def write_repeated_store(tmp_path, architecture: str, batch=3, length=6, head="base", model=None):
    """(hidden_states.h5, model) of a tiny model (or `model`) over a repeated corpus."""
    vocab = TINY["vocab"] if model is None else model.config.vocab_size
    ids = repeated_ids(batch, length, vocab=vocab)
    category = np.full(ids.shape, OTHER, dtype=np.int8)
    category[:, 0] = CLS
    encoded = tmp_path / f"{architecture}-repeated.h5"
    with h5py.File(encoded, "w") as f:
        f["input_ids"] = ids
        f["attention_mask"] = np.ones(ids.shape, dtype=np.int8)
        f["token_type_ids"] = np.zeros(ids.shape, dtype=np.int8)
        f["category"] = category
        f["word_ids"] = np.tile(np.arange(-1, 2 * length, dtype=np.int32), (batch, 1))
        f.create_dataset("meta", data=["{}"] * batch, dtype=h5py.string_dtype())
    model = tiny_model(architecture, head=head) if model is None else model
    store = tmp_path / f"{architecture}-repeated-states.h5"
    extract(model, encoded, store, ExtractSettings(batch_size=2))
    return store, model


def plain_attentions(model, ids: np.ndarray) -> list[np.ndarray]:
    """A plain transformers forward's attention weights.  L x [B, H, n, n]"""
    ids = torch.from_numpy(ids.astype(np.int64))
    mask, types = torch.ones_like(ids), torch.zeros_like(ids)
    with torch.no_grad():
        inputs = architecture(model.config.model_type).model_inputs(model, ids, mask, types)
        out = model(**inputs, output_attentions=True)
    return [a.double().numpy() for a in out.attentions]


# ---------------------------------------------------------------- known answers


def test_repeat_length_refuses_what_is_not_start_r_r():
    assert repeat_length(np.array([2, 7, 8, 9, 7, 8, 9]), 7) == 3
    with pytest.raises(ValueError, match="kind repeated_random"):
        repeat_length(np.array([2, 7, 8, 9, 7, 8, 5]), 7)
    with pytest.raises(ValueError, match="kind repeated_random"):
        repeat_length(np.array([2, 7, 8, 9, 7, 8]), 6)


def test_scores_of_hand_made_patterns():
    """Head 0 attends from each second-copy query to the piece after the first occurrence
    (induction 1), head 1 to the first occurrence (duplicate 1), head 2 to the previous piece
    everywhere (previous_token 1, and induction 0: the second copy's previous piece is never
    the first copy's next one)."""
    m = 4
    n = 1 + 2 * m
    s = 1 + m
    alpha = torch.zeros(1, 3, n, n)
    alpha[0, :, 0, 0] = 1
    for i in range(1, n):
        alpha[0, 2, i, i - 1] = 1
        alpha[0, :2, i, 0] = 1  # the first copy's rows: on START
    for k in range(m):
        alpha[0, 0, s + k, :] = 0
        alpha[0, 0, s + k, 2 + k] = 1
        alpha[0, 1, s + k, :] = 0
        alpha[0, 1, s + k, 1 + k] = 1
    ids = np.array([[2, 7, 8, 9, 10, 7, 8, 9, 10]])
    found = RepeatScores(1, 3)
    found.add(0, alpha, ids, np.array([n]))
    table = found.table().set_index("head")
    assert table.loc[1, "induction"] == 1 and table.loc[1, "duplicate"] == 0
    assert table.loc[2, "duplicate"] == 1 and table.loc[2, "induction"] == 0
    assert table.loc[3, "previous_token"] == 1 and table.loc[3, "induction"] == 0
    # head 0: of its 2m previous-token rows only row 1 (on START, its previous piece) counts
    assert table.loc[1, "previous_token"] == pytest.approx(1 / (2 * m))
    assert (table["n_queries"] == m).all()


def induction_circuit_model():
    """A two-layer GPT-2 of two heads per layer with hand-set weights and no FF block: layer
    1 head 1 attends to the previous piece (query: the position; key: the position + 1) and
    copies its piece's embedding into a subspace of its own (dims 32..47); layer 2 head 1 is
    an induction head: its query reads the piece, its key that subspace, so it attends to the
    piece after an earlier occurrence of the query's piece. Every other head has zero weights
    (uniform attention, nothing written). Pieces: dims 0..15; positions: dims 16..31."""
    from transformers import GPT2Config, GPT2LMHeadModel

    V, d, beta = 16, 64, 10.0
    config = GPT2Config(vocab_size=V, n_positions=16, n_embd=d, n_layer=2, n_head=2,
                        resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)  # fmt: skip
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for name, p in model.named_parameters():
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.fill_(1.0)
        model.transformer.wte.weight[:, :V] = torch.eye(V)
        model.transformer.wpe.weight[:, V : 2 * V] = torch.eye(16)
        first, second = (block.attn for block in model.transformer.h)
        for p in range(15):  # query: position p; key: position p + 1
            first.c_attn.weight[V + p, p] = beta
            first.c_attn.weight[V + p, d + p + 1] = 1.0
        for t in range(V):
            first.c_attn.weight[t, 2 * d + t] = 1.0  # value: the piece
            first.c_proj.weight[t, 2 * V + t] = 1.0  # written to dims 32..47
            second.c_attn.weight[t, t] = beta  # query: the piece
            second.c_attn.weight[2 * V + t, d + t] = 1.0  # key: the previous piece's copy
    model.config._attn_implementation = "eager"
    return model.eval()


def test_the_atlas_labels_the_previous_token_and_the_induction_head_alone(tmp_path):
    """On the hand-set induction circuit the role table gives exactly two heads a role:
    previous_token to layer 1 head 1, induction to layer 2 head 1, none elsewhere."""
    store_path, model = write_repeated_store(
        tmp_path, "gpt2", length=6, model=induction_circuit_model()
    )
    with HiddenStates(store_path) as store:
        scores = role_scores(store, canonical_weights(model), 2)
    roles, _ = head_roles([1, 2], 2, {"role_scores": scores}, {})
    assert roles["roles"].tolist() == ["previous_token", "none", "induction", "none"]
    assert scores["previous_token"].iloc[0] > 0.99 and scores["induction"].iloc[2] > 0.99


# ---------------------------------------------------------------- against transformers


def test_role_scores_equal_a_plain_forward_on_every_architecture(tmp_path, architecture):
    """The scores from the stored states equal those computed directly from the attention
    weights of a plain transformers forward on the stored sequences."""
    store_path, model = write_repeated_store(tmp_path, architecture)
    with HiddenStates(store_path) as store:
        table = role_scores(store, canonical_weights(model), batch_size=2)
        ids = store.input_ids
    m = (ids.shape[1] - 1) // 2
    s = 1 + m
    for l, att in enumerate(plain_attentions(model, ids)):
        for h in range(att.shape[1]):
            a = att[:, h]
            expected = {
                "induction": np.mean([a[b, s + k, 2 + k] for b in range(len(a)) for k in range(m)]),
                "duplicate": np.mean([a[b, s + k, 1 + k] for b in range(len(a)) for k in range(m)]),
                "previous_token": np.mean(
                    [a[b, i, i - 1] for b in range(len(a)) for i in range(1, 1 + 2 * m)]
                ),
            }
            row = table[(table["layer"] == l + 1) & (table["head"] == h + 1)].iloc[0]
            for name in SCORES:
                assert row[name] == pytest.approx(expected[name], abs=2e-5), (l, h, name)


@pytest.mark.parametrize("architecture", ["gpt2", "llama"])
def test_in_context_loss_equals_the_models_own_logits(tmp_path, architecture):
    store_path, model = write_repeated_store(tmp_path, architecture, head="causal")
    weights = canonical_weights(model)

    head = prediction_head(model)
    with HiddenStates(store_path) as store:
        loss = in_context_loss(store, head, weights.final_ln, 2)
        ids = store.input_ids
    with torch.no_grad():
        logits = model(torch.from_numpy(ids.astype(np.int64))).logits.double()
    logp = torch.log_softmax(logits, -1).numpy()
    m = (ids.shape[1] - 1) // 2

    def nll(rows):
        return -np.mean([logp[b, t, ids[b, t + 1]] for b in range(len(ids)) for t in rows])

    first, second = nll(range(1, m)), nll(range(m + 1, 2 * m))
    assert loss["loss_first"].iloc[0] == pytest.approx(first, rel=1e-5)
    assert loss["loss_second"].iloc[0] == pytest.approx(second, rel=1e-5)
    assert loss["loss_drop"].iloc[0] == pytest.approx(first - second, rel=1e-4, abs=1e-6)
    assert loss["n_predictions"].iloc[0] == len(ids) * (m - 1)


# ---------------------------------------------------------------- roles and circuits


def score_table(values: dict, layers=2, heads=2) -> pd.DataFrame:
    grid = pd.DataFrame(
        [(l, h) for l in range(1, layers + 1) for h in range(1, heads + 1)],
        columns=["layer", "head"],
    )
    for name, column in values.items():
        grid[name] = column
    return grid


def test_roles_follow_the_thresholds_and_say_what_they_cannot_judge():
    scores = score_table(
        {"induction": [0.0, 0.1, 0.9, 0.2], "duplicate": [0.5, 0, 0, 0],
         "previous_token": [0.05, 0.8, 0.1, 0.0], "n_queries": 4}
    )  # fmt: skip
    roles, rules = head_roles([1, 2], 2, {"role_scores": scores}, {})
    assert roles["roles"].tolist() == ["duplicate", "previous_token", "induction", "none"]
    assert set(roles["not_judged"].iloc[0].split(",")) == set(ROLE_NAMES) - {
        "induction",
        "duplicate",
        "previous_token",
    }
    status = rules.set_index("role")["status"]
    assert status["induction"] == "judged"
    assert status["sink"].startswith("not judged: this run makes no norms sink_heads.tsv")
    assert rules.set_index("role")["n_heads"]["induction"] == 1
    # a threshold moves the role; several roles per head
    weights = score_table(
        {"prev": [0.9, 0, 0, 0], "next": 0.0, "self": 0.0, "cls": [0, 0, 0, 0.7], "sep": 0.0,
         "punct": 0.0, "entropy": [1.0, 4.0, 1.0, 1.0]}
    )  # fmt: skip
    tables = {"role_scores": scores, "weights_heads": weights}
    roles, _ = head_roles([1, 2], 2, tables, {"induction": 0.05, "broad": 5.0})
    assert roles["roles"].tolist() == [
        "duplicate,prev",
        "induction,previous_token",
        "induction",
        "induction,cls",
    ]
    sinks = pd.DataFrame({"status": ["not applicable: no layer 0"]})
    _, rules = head_roles([1, 2], 2, tables | {"norms_sink_heads": sinks}, {})
    assert "says not applicable" in rules.set_index("role")["status"]["sink"]


def test_threshold_problems_name_the_role():
    assert threshold_problems({"induction": 0.3, "broad": 4.2}) == []
    (unknown,) = threshold_problems({"inductoin": 0.3})
    assert "thresholds names role 'inductoin'" in unknown
    (out,) = threshold_problems({"sink": 1.5})
    assert "thresholds.sink is 1.5, out of its range" in out


def constructed_groups() -> pd.DataFrame:
    """groups.tsv of a 2-layer model: head L2.H1's lift towards the induction keys, split by
    block and by head on both sides (shares of each partition sum to 1)."""
    rows = []
    for side, parts in {
        "key": {"embed": 0.5, "L1.H1": 9.0, "L1.H2": 0.3, "L1.FF": 0.2, "bias": 0.0},
        "query": {"embed": 6.0, "L1.H1": 0.5, "L1.H2": 0.5, "L1.FF": 3.0, "bias": 0.0},
    }.items():
        total = sum(parts.values())
        for group, lift in parts.items():
            kind = "head" if ".H" in group else "block"
            rows.append((2, 1, "induction", side, group, kind, lift, lift / total))
        attn = parts["L1.H1"] + parts["L1.H2"]
        rows.append((2, 1, "induction", side, "L1.attn", "block", attn, attn / total))
    return pd.DataFrame(
        rows, columns=["layer", "head", "keys", "side", "group", "kind", "lift", "share"]
    )


def test_circuits_keep_the_large_shares_and_a_rest_that_completes_them():
    roles = pd.DataFrame(
        {"layer": [1, 1, 2, 2], "head": [1, 2, 1, 2],
         "roles": ["previous_token", "none", "induction", "broad"]}
    )  # fmt: skip
    found = circuits(roles, constructed_groups(), min_share=0.1)
    key = found[found["side"] == "key"].set_index("source")
    assert list(key.index) == ["L1.H1", "rest"]
    assert key.loc["L1.H1", "share"] == pytest.approx(0.9)
    query = found[found["side"] == "query"].set_index("source")
    assert list(query.index) == ["embed", "L1.FF", "rest"]
    for _, part in found.groupby("side"):
        assert part["share"].sum() == pytest.approx(1.0)
        assert part["lift"].sum() == pytest.approx(10.0)
    assert set(found["role"]) == {"induction"} and set(found["keys"]) == {"induction"}
    # the previous-token head has no rows in the groups: no circuit rows
    assert not ((found["layer"] == 1) & (found["head"] == 1)).any()
    # kind head rows that carry the non-head blocks as well: the same circuits
    groups = constructed_groups()
    blocks = groups[(groups["kind"] == "block") & ~groups["group"].str.endswith(".attn")]
    both = pd.concat([groups, blocks.assign(kind="head")], ignore_index=True)
    pd.testing.assert_frame_equal(circuits(roles, both, min_share=0.1), found)


# ---------------------------------------------------------------- the page


def atlas_inputs(tmp_path):
    store_path, model = write_repeated_store(tmp_path, "gpt2")
    weights = canonical_weights(model)
    with HiddenStates(store_path) as store:
        scores = role_scores(store, weights, 2)
        labels = lambda ids: [f"p{i}" for i in ids]  # noqa: E731
        patterns = {
            "natural": natural_pattern(store, weights, 5, labels),
            "repeated": repeated_pattern(store, weights, 4, labels),
        }
    scores.loc[(scores["layer"] == 1) & (scores["head"] == 1), "previous_token"] = 0.93
    scores.loc[(scores["layer"] == 2) & (scores["head"] == 1), "induction"] = 0.87
    roles, rules = head_roles([1, 2], 4, {"role_scores": scores}, {})
    found = circuits(roles, constructed_groups(), 0.1)
    loss = pd.DataFrame({"loss_first": [5.0], "loss_second": [1.5], "loss_drop": [3.5]})
    return roles, rules, found, patterns, loss


def test_patterns_are_the_recomputed_weights(tmp_path):
    _, _, _, patterns, _ = atlas_inputs(tmp_path)
    repeated = patterns["repeated"]
    assert repeated["query_positions"] == [7, 8, 9, 10] and repeated["key_positions"] == list(
        range(6)
    )
    assert len(repeated["weights"]) == 2 and np.array(repeated["weights"][0]).shape == (4, 4, 6)
    natural = np.array(patterns["natural"]["weights"][1])
    assert np.allclose(natural.sum(-1), 1, atol=5e-3)  # causal rows within the first pieces


def test_the_atlas_card_shows_the_tables_and_follows_a_circuit_edge(tmp_path, browser):
    roles, rules, found, patterns, loss = atlas_inputs(tmp_path)
    links = [("views", "../../texts/views/index.html")]
    page = tmp_path / "atlas.html"
    data = atlas_data("tiny", roles, rules, found, patterns, loss, links, constructed_groups())
    page.write_text(render(data, "t"))
    opened = Opened(browser, page)
    try:
        p = opened.page
        assert p.get_attribute("#cell-L2H1", "data-roles") == "induction"
        assert p.get_attribute("#cell-L1H1", "data-roles") == "previous_token"
        p.select_option("#role-filter", "induction")
        dimmed = p.eval_on_selector_all("#grid td.dim", "cells => cells.map(c => c.id)")
        assert "cell-L2H1" not in dimmed and len(dimmed) == len(roles) - 1
        p.click("#cell-L2H1")
        p.wait_for_selector("#card[data-layer='2'][data-head='1']")
        row = roles[(roles["layer"] == 2) & (roles["head"] == 1)].iloc[0]
        shown = p.eval_on_selector_all(
            "#card tr[data-score] td.value",
            "cells => cells.map(c => [c.parentElement.dataset.score, c.dataset.value,"
            " c.textContent])",
        )
        numeric = {s: (float(v), float(t)) for s, v, t in shown if s in SCORES}
        assert set(numeric) == set(SCORES)
        for score, (value, text) in numeric.items():
            assert value == pytest.approx(row[score], rel=1e-12)
            assert text == pytest.approx(row[score], rel=1e-3, abs=1e-6)
        edges = p.eval_on_selector_all(
            "#card tr.edge",
            "rows => rows.map(r => [...r.children].map(c => c.dataset.value || c.textContent))",
        )
        mine = found[(found["layer"] == 2) & (found["head"] == 1)]
        assert len(edges) == len(mine)
        for edge, (_, expected) in zip(edges, mine.iterrows(), strict=True):
            assert edge[:4] == expected[["role", "keys", "side", "source"]].tolist()
            assert float(edge[4]) == pytest.approx(expected.lift, rel=1e-12)
            assert float(edge[5]) == pytest.approx(expected.share, rel=1e-12)
        blocks = p.eval_on_selector_all(
            "#card tr.block",
            "rows => rows.map(r => [...r.children].map(c => c.dataset.value || c.textContent))",
        )
        expected = constructed_groups().query("kind == 'block'")
        assert [b[:3] for b in blocks] == expected[["keys", "side", "group"]].values.tolist()
        assert [float(b[3]) for b in blocks] == pytest.approx(expected["lift"].tolist())
        assert p.locator("#card canvas[data-pattern='repeated']").count() == 1
        p.click("#card a.upstream[data-layer='1'][data-head='1']")
        p.wait_for_selector("#card[data-layer='1'][data-head='1']")
        assert p.text_content("#card .roles") == "previous_token"
        assert "cell-L1H1" in p.eval_on_selector_all(
            "#grid td.chosen", "cells => cells.map(c => c.id)"
        )
        assert p.get_attribute("#links a", "href") == "../../texts/views/index.html"
        assert "drop 3.5" in p.text_content("#loss")
        assert opened.errors == [] and opened.requests == [opened.url]
    finally:
        opened.close()


def test_the_overview_counts_roles_per_layer(tmp_path):
    roles = pd.DataFrame(
        {"layer": [1, 1, 2, 2], "head": [1, 2, 1, 2],
         "roles": ["previous_token", "none", "induction,sink", "sink"]}
    )  # fmt: skip
    counts = role_counts(roles).set_index(["layer", "role"])["n_heads"]
    assert counts[2, "sink"] == 2 and counts[2, "induction"] == 1 and counts[1, "none"] == 1
    assert counts[1, "sink"] == 0
    text = overview({"a": roles, "b": roles}, {"a": "a/atlas.html", "b": "b/atlas.html"})
    assert text.count('<section class="model"') == 2
    assert '<td data-role="sink" data-layer="2">2</td>' in text
    assert json.dumps("x")  # the module's pages carry no external reference
    assert "http" not in text
