"""Circuits from the exact split (`analyses/attend`: the token key classes, `groups.tsv`):
known answers on constructed models, the token classes against their definition, and every
grouping and direction split summing to the ungrouped totals on tiny random models."""

from __future__ import annotations

import h5py
import numpy as np
import pandas as pd
import pytest
import torch

from attnscope.analyses.attend.corpus_pass import corpus_pass
from attnscope.analyses.attend.groups import block_of, groups_table, head_of
from attnscope.analyses.attend.lift import key_weights
from attnscope.analyses.attend.settings import AttendSettings
from attnscope.architectures import canonical_weights
from attnscope.core.checks import CheckError
from attnscope.core.store import HiddenStates
from attnscope.core.tokens import CLS, OTHER
from attnscope.model.extract import ExtractSettings, extract
from attnscope.model.loaded import as_loaded
from conftest import tiny_model, write_tiny_encoded

BOUND = 1e-4


def write_encoded(path, ids: np.ndarray):
    """An encoded.h5 of the sequences `ids` [N, n] (every position real; position 0 [CLS]-like,
    the rest ordinary pieces)."""
    category = np.full(ids.shape, OTHER, dtype=np.int8)
    category[:, 0] = CLS
    with h5py.File(path, "w") as f:
        f["input_ids"] = ids.astype(np.int32)
        f["attention_mask"] = np.ones(ids.shape, dtype=np.int8)
        f["token_type_ids"] = np.zeros(ids.shape, dtype=np.int8)
        f["category"] = category
        f["word_ids"] = np.tile(np.arange(ids.shape[1], dtype=np.int32), (len(ids), 1))
        f.create_dataset("meta", data=["{}"] * len(ids), dtype=h5py.string_dtype())
    return path


def run(tmp_path, model, encoded, directions=(), sequences=4):
    """corpus_pass on the states of `model` over `encoded`, and groups.tsv with its check."""
    path = tmp_path / "states.h5"
    extract(model, encoded, path, ExtractSettings(batch_size=4))
    settings = AttendSettings(sequences=sequences, max_rel_residual=BOUND)
    with HiddenStates(path) as store:
        weights = canonical_weights(model)
        sums, check = corpus_pass(store, as_loaded(model, weights), settings, None, directions)
    groups, groups_check = groups_table(sums, BOUND)
    return sums, check, groups, groups_check


def one(groups: pd.DataFrame, **where) -> float:
    rows = groups
    for column, value in where.items():
        rows = rows[rows[column] == value]
    assert len(rows) == 1, where
    return float(rows["share"].iloc[0])


# ---- the token key classes --------------------------------------------------------------


def test_the_token_classes_are_the_keys_after_and_at_earlier_occurrences():
    """ids 1 5 6 5 6 6 (positions 0..5), by hand: induction keys have the query's piece just
    before them (the key right after the query itself excluded), duplicate keys hold it (the
    query itself excluded); causal rows see keys up to themselves."""
    ids = torch.tensor([1, 5, 6, 5, 6, 6])
    n = len(ids)
    want = {
        True: {  # causal
            "induction": {3: {2}, 4: {3}, 5: {3, 5}},
            "duplicate": {3: {1}, 4: {2}, 5: {2, 4}},
        },
        False: {
            "induction": {1: {4}, 2: {5}, 3: {2}, 4: {3}, 5: {3, 5}},
            "duplicate": {1: {3}, 2: {4, 5}, 3: {1}, 4: {2, 5}, 5: {2, 4}},
        },
    }
    alpha = torch.full((1, n, n), 1.0 / n)
    pieces = {"category": torch.full((n,), OTHER), "ids": ids}
    for causal, classes in want.items():
        visible = torch.ones(n, n, dtype=torch.bool)
        visible = visible.tril() if causal else visible
        names, W, rows = key_weights(alpha, visible, pieces, causal)
        for name, members in classes.items():
            k = names.index(name)
            assert {i for i in range(n) if rows[k, i]} == set(members)
            for i, keys in members.items():
                seen = visible[i].nonzero().flatten().tolist()
                w = torch.tensor([(j in keys) / len(keys) - 1 / len(seen) for j in range(n)])
                torch.testing.assert_close(W[0, k, i], w * visible[i])
        assert names[-2:] == ["induction", "duplicate"]


# ---- constructed models: K-composition and a massive dimension ---------------------------

V, POSITIONS, REPEAT = 16, 32, 8  # pieces, positions, the repeated length


def induction_model():
    """A 2-layer attention-only GPT-2 (width 64, 2 heads of 32) with hand-set weights.
    Residual dimensions: the piece one-hot 0..15, the position one-hot 16..47 and a "previous
    piece" subspace 48..63, every embedding row centred (mean 0) so that LayerNorm is a fixed
    scale. L1 H1 attends to the previous position (query position i and key position i - 1
    meet in head dimension i) and copies that key's piece into 48..63; L2 H1's query reads
    the piece, its key the previous piece: it attends to the position after an earlier
    occurrence of the query's piece (and writes the piece it finds into 0..15, which nothing
    reads). Every other head, FF block and bias is 0."""
    from transformers import GPT2Config, GPT2Model

    config = GPT2Config(
        vocab_size=V, n_embd=64, n_layer=2, n_head=2, n_positions=POSITIONS, n_inner=16
    )
    config._attn_implementation = "eager"
    model = GPT2Model(config).eval()
    a, gain = 4.0, 2.0
    words, positions = range(0, 16), range(16, 48)  # 48..63: the previous piece
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for block in (*[b.ln_1 for b in model.h], *[b.ln_2 for b in model.h], model.ln_f):
            block.weight.fill_(1.0)
        model.wte.weight[:, list(words)] = a * (torch.eye(V) - 1 / V)
        model.wpe.weight[:, list(positions)] = a * (torch.eye(POSITIONS) - 1 / POSITIONS)
        d = 64  # c_attn: x @ [W_Q | W_K | W_V], head 1 the first 32 columns of each
        first, second = model.h[0].attn.c_attn.weight, model.h[1].attn.c_attn.weight
        for p in range(POSITIONS - 1):
            first[16 + p, p] = gain  # query position p: dimension p
            first[16 + p, d + p + 1] = gain  # key position p: dimension p + 1 (query p + 1)
        for t in range(V):
            first[t, 2 * d + t] = 1.0  # value: the piece ...
            model.h[0].attn.c_proj.weight[t, 48 + t] = 1.0  # ... written into 48..63
            second[t, t] = gain  # query: the piece
            second[48 + t, d + t] = gain  # key: the previous piece
            second[t, 2 * d + t] = 1.0  # value: the piece, written back (nothing reads it)
            model.h[1].attn.c_proj.weight[t, t] = 1.0
    return model


def test_the_induction_head_is_k_composed_with_the_previous_token_head(tmp_path):
    """On BOS + r + r (r: 8 distinct pieces): at least 90% of L2 H1's lift towards the
    induction keys comes on the key side from L1 H1 (the previous-token head), its query from
    the embedding; L1 H1's lift towards the previous token comes from the position
    embeddings on the key side."""
    g = torch.Generator().manual_seed(0)
    r = torch.stack([torch.randperm(V - 1, generator=g)[:REPEAT] + 1 for _ in range(4)])
    ids = torch.cat([torch.zeros(4, 1, dtype=torch.long), r, r], 1).numpy()
    encoded = write_encoded(tmp_path / "encoded.h5", ids)
    sums, _, groups, _ = run(tmp_path, induction_model(), encoded)
    induction = groups[(groups["layer"] == 2) & (groups["head"] == 1)]
    induction = induction[induction["keys"] == "induction"]
    assert one(induction, side="key", kind="head", group="L1.H1") >= 0.9
    assert one(induction, side="key", kind="block", group="L1.attn") >= 0.9
    assert one(induction, side="query", kind="block", group="embed") >= 0.9
    k = sums.keys[2].index("induction")
    assert sums.rows[2][k] == 4 * REPEAT  # every query of the second copy
    total = float(sums.sums[2, 1]["query"][k].sum()) / sums.rows[2][k]
    assert total > 5  # the head attends there: the logit well above the row's mean
    previous = groups[(groups["layer"] == 1) & (groups["head"] == 1)]
    previous = previous[(previous["keys"] == "previous") & (previous["kind"] == "block")]
    assert one(previous, side="key", group="embed") >= 0.9


def test_a_massive_dimension_carries_the_first_position_lift_of_the_head_reading_it(tmp_path):
    """A random Llama whose first piece's embedding is large in dimension 0 (so the state is,
    at the first position, at every depth), and whose layer-2 head 1 has a key that reads
    dimension 0 and a query bias along the same slow rotary dimension: at least 90% of that
    head's first-position lift on the key side lies along dimension 0, and the direction
    rows sum to the key side's total."""
    model = tiny_model("llama")
    attention = model.layers[1].self_attn
    with torch.no_grad():
        model.embed_tokens.weight[2, 0] = 50.0  # id 2 starts every sequence
        slow = 3  # head dimension 3: the lowest-frequency rotary band of a head of 8
        attention.k_proj.weight[slow, 0] = 10.0  # key head 1 reads dimension 0
        attention.q_proj.bias[slow] = 5.0  # query head 1 along that key dimension
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "llama")
    sums, check, groups, groups_check = run(tmp_path, model, encoded, directions=(0,))
    head = groups[(groups["layer"] == 2) & (groups["head"] == 1) & (groups["keys"] == "first")]
    assert one(head, side="key", kind="direction", group="dir.massive") >= 0.9
    assert "lift directions" in set(check["stage"])
    assert check["max_rel"].max() <= BOUND and groups_check["max_rel"].max() <= BOUND


# ---- the groupings sum to the totals -------------------------------------------------------


@pytest.mark.parametrize("architecture", ["bert", "gpt2", "llama"])
def test_every_grouping_sums_to_the_ungrouped_total(tmp_path, architecture):
    """groups.tsv on a tiny random model: per head, keys, side and kind the lifts sum to the
    total of lift.tsv / key_classes.tsv (shares to 1); each group is the sum of its members'
    marginals (the query and key rows of the tables with every component kept); the direction
    split along all dimensions is the whole key side, and it is linear in the dimensions."""
    model = tiny_model(architecture)
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", architecture)
    splits = {}
    for dims in ((0, 5), (0,), (5,), tuple(range(32))):
        folder = tmp_path / "-".join(map(str, dims[:3]))
        folder.mkdir()
        sums, check, groups, _ = run(folder, model, encoded, directions=dims, sequences=2)
        splits[dims] = groups[groups["kind"] == "direction"]
        if dims == (0, 5):
            whole = (sums, check, groups)
    sums, check, groups = whole
    assert check["max_rel"].max() <= BOUND
    tables = pd.concat([sums.lift_table(10**6, classes=c) for c in (False, True)])
    totals = tables[tables["side"] == "total"].set_index(["layer", "head", "keys"])["lift"]
    sided = groups.groupby(["layer", "head", "keys", "side", "kind"])
    assert len(sided) == len(totals) * 5  # query block, head; key block, head, direction
    for (layer, head, keys, side, kind), rows in sided:
        total = totals[layer, head, keys]
        k = sums.keys[layer].index(keys)
        scale = sums.sums[layer, head]["scale"][k] / max(sums.rows[layer][k], 1)
        assert abs(rows["lift"].sum() - total) <= BOUND * scale
        assert abs(rows["share"].sum() - 1) <= BOUND * scale / abs(total)
        if kind == "direction":
            assert side == "key" and list(rows["group"]) == ["dir.massive", "dir.rest"]
            continue
        marginal = tables[
            (tables["layer"] == layer)
            & (tables["head"] == head)
            & (tables["keys"] == keys)
            & (tables["side"] == side)
        ]
        names = marginal["query" if side == "query" else "key"]
        of = block_of if kind == "block" else head_of
        want = marginal.groupby(names.map(of).to_numpy())["lift"].sum()
        got = rows.set_index("group")["lift"]
        assert set(got.index) == set(want.index)
        np.testing.assert_allclose(got[want.index], want, rtol=1e-9, atol=1e-12)
    # by hand: the names of the groups
    names = set(groups.loc[(groups["layer"] == 2) & (groups["kind"] == "block"), "group"])
    assert names == {"embed", "L1.attn", "L1.FF", "bias"}
    heads = set(groups.loc[(groups["layer"] == 2) & (groups["kind"] == "head"), "group"])
    assert heads == {"embed", "L1.H1", "L1.H2", "L1.H3", "L1.H4", "L1.FF", "bias"}
    # the direction split is linear in the dimensions chosen, and all of them is the key side
    key = ["layer", "head", "keys"]
    part = {d: s[s["group"] == "dir.massive"].set_index(key)["lift"] for d, s in splits.items()}
    scale = groups["lift"].abs().max()
    np.testing.assert_allclose(part[(0, 5)], part[(0,)] + part[(5,)], rtol=0, atol=1e-5 * scale)
    if architecture != "llama":  # no rotated key bias: the rest of the key is constant, it cancels
        everything = part[tuple(range(32))]
        want = totals[everything.index]
        np.testing.assert_allclose(everything, want, rtol=0, atol=1e-5 * scale)


def test_a_grouping_that_misses_its_total_fails(tmp_path):
    """A key marginal changed after the pass: groups.tsv's check names the layer."""
    model = tiny_model("gpt2")
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "gpt2")
    sums, *_ = run(tmp_path, model, encoded, sequences=1)
    stored = sums.sums._rest[2, 3]["key"]
    stored[1, 0] += 1.0 + abs(stored[1]).sum()
    with pytest.raises(CheckError, match="layer 2: attend stage groups"):
        groups_table(sums, BOUND)


@pytest.mark.parametrize(
    "architecture",
    ["electra", "roberta", "gemma2", "olmo2", "stablelm", "cohere", "gpt_neox", "mixtral"],
)
def test_the_direction_split_and_the_groupings_add_up_on_every_anatomy(tmp_path, architecture):
    """QK-norms (per head, over all heads), sandwich norms, soft-capping, partial rotary,
    parallel blocks, experts: the direction split's sum matches the logits (stage "lift
    directions", checked in the pass) and every grouping its total (stage "groups")."""
    model = tiny_model(architecture)
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", architecture)
    sums, check, groups, groups_check = run(tmp_path, model, encoded, (0, 7), sequences=1)
    assert {"lift directions", "lift (token classes)"} <= set(check["stage"])
    assert check["max_rel"].max() <= BOUND and groups_check["max_rel"].max() <= BOUND
    kinds = groups.groupby(["side", "kind"]).size()
    assert set(kinds.index) == {
        ("query", "block"), ("query", "head"), ("key", "block"), ("key", "head"),
        ("key", "direction"),
    }  # fmt: skip
