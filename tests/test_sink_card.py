"""The attention-sink card: Sink^eps and the stream on constructed attention, the control
input, Sun et al.'s massive-entry criterion on constructed states, and the intervention's
forward from a stored layer against known losses of tiny decoders."""

import h5py
import numpy as np
import pandas as pd
import pytest
import torch

from attnscope.analyses.norms.massive_activations import (
    layer_median,
    massive_dimensions,
    massive_entries,
)
from attnscope.analyses.norms.massive_intervention import (
    edited_states,
    intervention_losses,
    massive_intervention,
    sink_entries,
)
from attnscope.analyses.norms.settings import MassiveCriterion
from attnscope.analyses.norms.sink_card import (
    INPUTS,
    StreamAttention,
    first_key_importance,
    key_importance,
    kobayashi_summary,
    sink_epsilon,
    sink_heads,
    sink_inputs,
    sink_stream,
    stream_attention,
    stream_bins,
)
from attnscope.architectures import canonical_weights, prediction_head
from attnscope.core.forward_from_layer import forward_from_layer, next_token_loss
from attnscope.core.store import TOKEN_ARRAYS, HiddenStates
from attnscope.core.tokens import CLS, OTHER, PAD, PUNCT, SEP
from attnscope.model.extract import ExtractSettings, extract
from attnscope.model.loaded import open_model
from conftest import tiny_model, write_tiny_encoded, write_tiny_model_run, write_tiny_store


def attention_with_first(first: torch.Tensor) -> torch.Tensor:
    """Row-stochastic alpha [B, H, n, n] whose column 0 is `first` [B, H, n] and whose rest
    of each row is spread evenly over keys 1..n-1."""
    B, H, n = first.shape
    alpha = ((1 - first) / (n - 1))[..., None].expand(B, H, n, n).clone()
    alpha[..., 0] = first
    return alpha


def causal_with_importance(importance: torch.Tensor, T: int) -> torch.Tensor:
    """Causal row-stochastic alpha [B, H, T, T] whose key 0 has Gu's importance
    `importance` [B, H]: alpha_00 = 1, alpha_i0 = a for i >= 1 with (1 + (T - 1) a) / T =
    importance, the rest of row i spread evenly over keys 1..i."""
    a = (importance * T - 1) / (T - 1)
    B, H = importance.shape
    alpha = torch.zeros(B, H, T, T, dtype=torch.float64)
    alpha[:, :, 0, 0] = 1
    for i in range(1, T):
        alpha[:, :, i, 0] = a
        alpha[:, :, i, 1 : i + 1] = ((1 - a) / i)[..., None]
    return alpha


def test_key_importance_is_gus_formula():
    """Every key k of random causal attention: sum over rows i of alpha(i, k) / (T - k), as
    Gu et al.'s `compute_attention_sink` divides by arange(T, 0, -1) over the key axis."""
    T = 6
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, T, T, generator=g).masked_fill(
        torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")
    )
    alpha = scores.softmax(-1)
    want = torch.stack([alpha[..., k:, k].sum(-1) / (T - k) for k in range(T)], -1)
    torch.testing.assert_close(key_importance(alpha), want)
    importance = torch.tensor([[0.5, 0.2]], dtype=torch.float64)
    torch.testing.assert_close(
        key_importance(causal_with_importance(importance, T))[..., 0], importance
    )


def test_sink_epsilon_thresholds_each_sequence_then_averages():
    """Two sequences, two layers of two heads, eps 0.3. Importances of key 0 per sequence:
    L1H1 0.5 / 0.2 (mean 0.35), L1H2 0.25 / 0.32 (mean 0.285), L2H1 0.9 / 0.9, L2H2 0.1 /
    0.1. Gu's Sink^eps = mean of the per-sequence indicator = (1 + 1 + 2 + 0) / 8 = 0.5; the
    pooled variant thresholds the means: L1H1 and L2H1 -> 2 of 4 heads. Layer 1: Gu 0.5,
    pooled 0.5; the control (importance 1 / T everywhere): 0."""
    T = 8
    per_sequence = torch.tensor(
        [[[0.5, 0.25], [0.9, 0.1]], [[0.2, 0.32], [0.9, 0.1]]], dtype=torch.float64
    )  # [N, L, H]
    found = np.stack(
        [key_importance(causal_with_importance(per_sequence[:, l], T))[..., 0] for l in range(2)],
        1,
    )
    np.testing.assert_allclose(found, per_sequence)
    uniform = np.full_like(found, 1 / T)
    heads = sink_heads({"corpus": found, "control": uniform, "anchored": found}, 0.3)
    np.testing.assert_allclose(heads["sink_rate"], [0.5, 0.5, 1.0, 0.0])
    assert heads["sink_pooled"].tolist() == [True, False, True, False]
    np.testing.assert_allclose(heads["importance"], [0.35, 0.285, 0.9, 0.1])
    table = sink_epsilon(heads, 0.3, T).set_index("layer")
    assert table.loc["all", "sink_share"] == 0.5  # Gu's aggregation
    assert table.loc["all", "sink_share_pooled"] == 0.5
    assert table.loc["1", "sink_share"] == 0.5 and table.loc["1", "sink_share_pooled"] == 0.5
    assert table.loc["2", "sink_share"] == 0.5
    assert table.loc["all", "sink_share_control"] == 0
    assert table.loc["all", "sink_share_anchored"] == 0.5
    assert (table["n_heads"].tolist(), table["n_sequences"].iloc[0]) == ([2, 2, 4], 2)
    assert (table["epsilon"] == 0.3).all() and (table["positions"] == T).all()
    # where the two aggregations differ: one head at 0.5 in one sequence, 0.2 in three
    skew = np.array([0.5, 0.2, 0.2, 0.2])[:, None, None]
    one = sink_epsilon(sink_heads({"corpus": skew, "control": skew, "anchored": skew}, 0.3), 0.3, T)
    assert one["sink_share"].iloc[-1] == 0.25 and one["sink_share_pooled"].iloc[-1] == 0


def test_the_stream_averages_the_first_weight_per_log_spaced_bin():
    """alpha_i0 = 1 / (i + 1) in every head: bins [1, 2), [2, 4), [4, 8), [8, 10) of a
    10-piece sequence hold the means of 1 / (i + 1) over their counted rows."""
    n = 10
    assert stream_bins(n).tolist() == [0, 1, 2, 4, 8]
    assert stream_bins(8).tolist() == [0, 1, 2, 4]
    first = (1 / (torch.arange(n) + 1.0)).expand(1, 3, n)
    rows = torch.ones(1, n, dtype=torch.bool)
    rows[0, 0] = False
    found = StreamAttention(1, n)
    found.add_batch(0, attention_with_first(first), rows)
    table = sink_stream(found, n)
    assert table["position_from"].tolist() == [1, 2, 4, 8]
    assert table["position_to"].tolist() == [1, 3, 7, 9]
    assert table["n_rows"].tolist() == [1, 2, 4, 2]
    want = [np.mean(1 / (np.arange(a, b + 1) + 1)) for a, b in ((1, 1), (2, 3), (4, 7), (8, 9))]
    np.testing.assert_allclose(table["alpha_first"], want)


def test_the_control_is_one_piece_everywhere_as_gu_et_al_state():
    """T = 5. Sequence 0 (BOS, two words, "." and [SEP] in its first 5): the control is its
    first plain piece 10 at all 5 positions, no BOS, every position real; the anchored input
    keeps BOS and [SEP] in place; the corpus input is its first 5 pieces. Sequence 1 (4
    pieces) is left out; sequence 2 starts with a plain piece (no BOS): its control is 7."""
    ids = np.array(
        [[2, 10, 11, 4, 3, 12, 3, 0], [2, 8, 9, 3, 0, 0, 0, 0], [7, 6, 5, 4, 3, 2, 2, 2]]
    )
    category = np.array(
        [
            [CLS, OTHER, OTHER, PUNCT, SEP, OTHER, SEP, PAD],
            [CLS, OTHER, OTHER, SEP, PAD, PAD, PAD, PAD],
            [OTHER, OTHER, OTHER, PUNCT, SEP, CLS, CLS, CLS],
        ]
    )
    mask = (category != PAD).astype(np.int8)
    tokens = {
        "input_ids": ids.astype(np.int32),
        "attention_mask": mask,
        "token_type_ids": np.zeros_like(mask),
        "category": category.astype(np.int8),
        "word_ids": np.zeros_like(ids, dtype=np.int32),
    }
    inputs = sink_inputs(tokens, 5)
    assert inputs.pop("kept").tolist() == [True, False, True]
    corpus, control, anchored = np.split(inputs["input_ids"], 3)
    assert corpus.tolist() == [[2, 10, 11, 4, 3], [7, 6, 5, 4, 3]]
    assert control.tolist() == [[10] * 5, [7] * 5]
    assert anchored.tolist() == [[2, 10, 10, 10, 3], [7, 7, 7, 7, 3]]
    assert inputs["attention_mask"].all() and inputs["attention_mask"].dtype == np.int8
    control_category = np.split(inputs["category"], 3)[1]
    assert (control_category == OTHER).all()  # no special piece kept
    assert (np.split(inputs["token_type_ids"], 3)[1] == 0).all()
    assert sink_inputs(tokens, 9)["kept"].tolist() == [False] * 3  # no sequence so long


def test_kobayashi_summary_averages_heads_per_layer_and_overall():
    sinks = pd.DataFrame(
        {
            "layer": [1, 1, 2, 2],
            "head": [1, 2, 1, 2],
            "alpha_first": [0.8, 0.6, 0.4, 0.2],
            "norm_share": [0.2, 0.1, 0.1, 0.1],
        }
    )
    table = kobayashi_summary(sinks).set_index("layer")
    np.testing.assert_allclose(table.loc["1", ["alpha_first", "norm_share"]], [0.7, 0.15])
    np.testing.assert_allclose(table.loc["all", ["alpha_first", "norm_share"]], [0.5, 0.125])
    assert table.loc["2", "norm_over_alpha"] == pytest.approx(0.1 / 0.3)


def test_massive_entries_need_both_100_and_the_ratio_times_the_layers_median():
    """State 0: every real entry 0.1 (median 0.1) but 150 (massive), 99 (not above 100) and
    a padded 10^6 (not real, not in the median). State 1: median 0.2, so 150 (750 x) is
    massive at a ratio of 500 but not at 1000, and 250 is at both."""
    mask = np.array([[1, 1, 1], [1, 1, 0]])
    X0 = np.full((2, 3, 4), 0.1, dtype=np.float32)
    X0[0, 0, 2], X0[1, 1, 3], X0[1, 2, 0] = -150.0, 99.0, 1e6
    X1 = np.full((2, 3, 4), 0.2, dtype=np.float32)
    X1[0, 0, 2], X1[1, 0, 1] = 150.0, 250.0
    paper, lower = MassiveCriterion(), MassiveCriterion(ratio=500)
    assert layer_median(X0, mask) == pytest.approx(0.1)
    assert massive_entries(X0, mask, 0.1, paper).tolist() == [[0, 0, 2]]
    assert massive_entries(X1, mask, layer_median(X1, mask), paper).tolist() == [[1, 0, 1]]
    assert massive_entries(X1, mask, 0.2, lower).tolist() == [[0, 0, 2], [1, 0, 1]]
    tokens = {
        "attention_mask": mask,
        "input_ids": np.array([[5, 6, 7], [8, 9, 0]]),
        "category": np.array([[CLS, OTHER, OTHER], [CLS, OTHER, PAD]]),
    }
    table = massive_dimensions([(0, X0), (1, X1)], tokens, pieces, paper)
    assert table[["state", "dim", "sequence", "position", "piece"]].values.tolist() == [
        [0, 2, 0, 0, "p5"],
        [1, 1, 1, 0, "p8"],
    ]
    np.testing.assert_allclose(table["value"], [-150.0, 250.0])
    np.testing.assert_allclose(table["ratio"], [1500.0, 1250.0], rtol=1e-6)
    assert table["position_kind"].tolist() == ["first", "first"]
    assert table["kind"].tolist() == ["massive", "massive"]


def pieces(ids):
    return [f"p{i}" for i in ids]


def test_outliers_on_ordinary_tokens_are_kept_apart_and_never_edited():
    """The Gemma case, constructed: 4 sequences of 6 pieces, width 8, median 0.01. Dim 1 is
    massive (>= 1000 x) from state 1 at the first position and on every ordinary piece;
    dim 5 only at the first position and at the "." (a delimiter), from state 3. Dim 1 is an
    outlier recurring on ordinary tokens at states 1-3; the intervention edits dim 5 at
    state 3, at the first position and the delimiter, not dim 1 (which massive entries
    alone would pick: the first state holding any is 1)."""
    N, n, d = 4, 6, 8
    category = np.full((N, n), OTHER)
    category[:, 0], category[:, 3] = CLS, PUNCT
    tokens = {
        "attention_mask": np.ones((N, n), dtype=np.int8),
        "input_ids": np.arange(N * n).reshape(N, n),
        "category": category,
    }
    states = []
    for state in range(4):
        X = np.full((N, n, d), 0.01, dtype=np.float32)
        if state >= 1:
            X[:, :, 1] = 500.0  # every position, the first included
        if state >= 3:
            X[:, 0, 5] = 2000.0 + np.arange(N)  # the first position ...
            X[:, 3, 5] = -300.0  # ... and the delimiter
        states.append((state, X))
    table = massive_dimensions(states, tokens, pieces, MassiveCriterion())
    kinds = table.groupby(["state", "dim"])["kind"].first()
    assert kinds.to_dict() == {
        (1, 1): "ordinary",
        (2, 1): "ordinary",
        (3, 1): "ordinary",
        (3, 5): "massive",
    }
    assert table.groupby(["state", "dim"])["ordinary_share"].first()[(3, 1)] == 1.0
    edited = sink_entries(table)
    assert set(edited["state"]) == {3} and set(edited["dim"]) == {5}
    assert sorted(edited["position_kind"].unique()) == ["delimiter", "first"]
    assert len(edited) == 2 * N
    # a share above the setting's: dim 1 counts as massive again (and is edited at state 1)
    loose = massive_dimensions(states, tokens, pieces, MassiveCriterion(ordinary_share=1.0))
    assert set(sink_entries(loose)["state"]) == {1}


def test_the_mean_is_taken_per_position_kind():
    """Dim 2 at the first position (10 and 20) and at a delimiter (100): set to its mean
    the first positions hold 15, the delimiter 100; zeroed, all three are 0."""
    X = torch.ones(2, 4, 3)
    entries = pd.DataFrame(
        {
            "sequence": [0, 1, 1],
            "position": [0, 0, 2],
            "dim": 2,
            "value": [10.0, 20.0, 100.0],
            "position_kind": ["first", "first", "delimiter"],
        }
    )
    states = edited_states(X, entries)
    assert states["mean"][[0, 1, 1], [0, 0, 2], 2].tolist() == [15.0, 15.0, 100.0]
    assert (states["zeroed"][[0, 1, 1], [0, 0, 2], 2] == 0).all()
    assert states["mean"].sum() == X.sum() - 3 + 15 + 15 + 100  # nothing else moved


def test_first_key_importance_of_the_cut_inputs_is_the_models_own(tmp_path):
    """A tiny Llama's store, cut to T = 6 pieces (`sink_inputs`) and extracted: per sequence,
    layer and head, the sum over rows of the model's own alpha(i, 0) on the T-piece input,
    over T; the control's input rows hold one piece."""
    path, model, manifest = write_tiny_model_run(tmp_path, "llama", head="causal")
    T = 6
    with HiddenStates(path) as store:
        tokens = {name: getattr(store, name) for name in TOKEN_ARRAYS}
    inputs = sink_inputs(tokens, T)
    assert inputs.pop("kept").all()
    encoded, states = tmp_path / "sink-encoded.h5", tmp_path / "sink-states.h5"
    with h5py.File(encoded, "w") as f:
        for name, values in inputs.items():
            f[name] = values
    extract(model, encoded, states, ExtractSettings(batch_size=5))
    loaded = open_model(manifest, loading="whole-model")
    with HiddenStates(states) as store:
        found = first_key_importance(store, loaded.weights, 5)
    ids = torch.from_numpy(inputs["input_ids"].astype(np.int64))
    with torch.no_grad():
        attentions = model(input_ids=ids, output_attentions=True).attentions
    want = np.stack([a[:, :, :, 0].sum(-1).numpy() / T for a in attentions], 1)  # [3N, L, H]
    np.testing.assert_allclose(found, want, rtol=1e-5)
    assert found.shape == (3 * len(tokens["input_ids"]), 2, 4) and len(INPUTS) == 3


@pytest.fixture(params=["llama", "gpt2"])
def causal_store(request, tmp_path):
    """(hidden_states.h5, the tiny causal LM that made it)."""
    return write_tiny_store(tmp_path, request.param, batch=4, length=16, head="causal")


def own_loss(model, store: HiddenStates, inputs_embeds=None) -> float:
    """The model's own mean next-token loss over the corpus (`labels`, padding ignored)."""
    ids = torch.from_numpy(store.input_ids.astype(np.int64))
    mask = torch.from_numpy(store.attention_mask.astype(np.int64))
    labels = ids.masked_fill(mask == 0, -100)
    given = {"input_ids": ids} if inputs_embeds is None else {"inputs_embeds": inputs_embeds}
    with torch.no_grad():
        return float(model(**given, attention_mask=mask, labels=labels).loss)


def test_the_unmodified_forward_from_any_layer_gives_the_models_own_loss(causal_store):
    path, model = causal_store
    weights, head = canonical_weights(model), prediction_head(model)
    with HiddenStates(path) as store:
        want = own_loss(model, store)
        mask = torch.from_numpy(store.attention_mask.astype(np.int64))
        for start in range(weights.n_layers + 1):
            X = torch.from_numpy(store.hidden(start))
            last = forward_from_layer(weights, X, mask, start, batch_size=3)
            loss, count = next_token_loss(head, weights, last, store.input_ids, mask, 3)
            assert loss == pytest.approx(want, abs=1e-5), start
            assert count == int((store.attention_mask[:, 1:] * store.attention_mask[:, :-1]).sum())


def test_zeroing_a_dimension_the_model_never_uses_changes_nothing(tmp_path):
    """Llama with feature k unread (0 in every norm weight) and unwritten (0 in the embedding
    column and in every matrix and bias writing to the stream): zeroing it at every real position of
    layer 1's input leaves the loss as it was (<= 1e-6); zeroing a used feature does not."""
    k = 5
    model = tiny_model("llama", head="causal")
    with torch.no_grad():
        model.model.embed_tokens.weight[:, k] = 0
        model.model.norm.weight[k] = 0
        for block in model.model.layers:
            block.input_layernorm.weight[k] = 0
            block.post_attention_layernorm.weight[k] = 0
            for writer in (block.self_attn.o_proj, block.mlp.down_proj):
                writer.weight[k] = 0
                if writer.bias is not None:
                    writer.bias[k] = 0
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "llama", batch=4, length=16)
    extract(model, encoded, tmp_path / "states.h5", ExtractSettings(batch_size=3))
    weights, head = canonical_weights(model), prediction_head(model)
    with HiddenStates(tmp_path / "states.h5") as store:
        X = torch.from_numpy(store.hidden(1))
        mask = torch.from_numpy(store.attention_mask.astype(np.int64))
        s, p = np.nonzero(store.attention_mask)
        assert (X[..., k] == 0).all()  # unwritten

        def losses(dim):
            entries = pd.DataFrame(
                {"sequence": s, "position": p, "dim": dim, "value": X[s, p, dim].numpy()}
                | {"position_kind": "first"}
            )
            found = intervention_losses(
                edited_states(X, entries), 1, weights, head, store.input_ids, mask, 3
            )
            return {name: loss for name, (loss, _) in found.items()}

        unused, used = losses(k), losses(0)
    assert abs(unused["zeroed"] - unused["unmodified"]) <= 1e-6
    assert abs(used["zeroed"] - used["unmodified"]) > 1e-3


def test_zeroing_every_feature_of_the_embeddings_gives_the_uniform_input_loss(tmp_path):
    """X_0 = 0 at every real position: the loss of Llama's own forward on all-zero input
    embeddings (every position reads the same input; rotary positions remain)."""
    path, model = write_tiny_store(tmp_path, "llama", batch=4, length=16, head="causal")
    weights, head = canonical_weights(model), prediction_head(model)
    with HiddenStates(path) as store:
        X = torch.from_numpy(store.hidden(0))
        mask = torch.from_numpy(store.attention_mask.astype(np.int64))
        s, p, k = np.nonzero(store.attention_mask[..., None] * np.ones(X.shape[-1], dtype=int))
        entries = pd.DataFrame(
            {"sequence": s, "position": p, "dim": k, "value": 1.0, "position_kind": "first"}
        )
        found = intervention_losses(
            edited_states(X, entries), 0, weights, head, store.input_ids, mask, 3
        )
        want = own_loss(model, store, inputs_embeds=torch.zeros_like(X))
        base = own_loss(model, store)
    assert found["zeroed"][0] == pytest.approx(want, abs=1e-5)
    assert abs(want - base) > 1e-3  # the uniform input is another input


def test_the_intervention_table_on_both_loading_routes(tmp_path):
    """One massive entry planted in the stored state 1 of a tiny Llama: the table's
    unmodified loss is the forward from the store; zeroing it and setting it to its own value
    (the mean of one entry) give the known losses; the layer-streamed route gives the same
    table (<= 1e-5), and so does the stream."""
    path, model, manifest = write_tiny_model_run(tmp_path, "llama", head="causal")
    entries = pd.DataFrame(
        {"state": [1], "dim": [3], "sequence": [0], "position": [0], "value": [0.0]}
        | {"position_kind": ["first"], "kind": ["massive"]}
    )
    tables, sinks = {}, {}
    for route in ("whole-model", "layer-streamed"):
        loaded = open_model(manifest, with_head=True, loading=route)
        assert loaded.route == route
        with HiddenStates(path) as store:
            entries["value"] = store.hidden(1)[0, 0, 3]
            tables[route] = massive_intervention(store, entries, loaded.weights, loaded.head, 3)
            sinks[route] = stream_attention(store, loaded.weights, 3).stream.total
    whole = tables["whole-model"].set_index("variant")
    with HiddenStates(path) as store:
        want = own_loss(model, store)
    assert whole.loc["unmodified", "loss"] == pytest.approx(want, abs=1e-5)
    assert whole.loc["mean", "loss_difference"] == pytest.approx(0, abs=1e-6)
    assert whole.loc["zeroed", "loss_difference"] != 0
    assert whole.loc["zeroed", "dims"] == "3" and whole.loc["zeroed", "n_entries"] == 1
    np.testing.assert_allclose(whole["perplexity"], np.exp(whole["loss"]))
    streamed = tables["layer-streamed"].set_index("variant")
    np.testing.assert_allclose(streamed["loss"], whole["loss"], rtol=1e-5)
    np.testing.assert_allclose(sinks["layer-streamed"], sinks["whole-model"], rtol=1e-5)


def test_the_stream_over_the_first_sequences_averages_only_their_rows(tmp_path):
    """`stream_attention(..., limit=2)` of a tiny Llama's 4-sequence store: per layer, the
    bin [1, 2) holds the mean over heads of the model's own alpha_10 in the first 2
    sequences."""
    path, model, manifest = write_tiny_model_run(tmp_path, "llama", head="causal")
    loaded = open_model(manifest, loading="whole-model")
    with HiddenStates(path) as store:
        limited = sink_stream(stream_attention(store, loaded.weights, 3, limit=2), store.length)
        every = sink_stream(stream_attention(store, loaded.weights, 3), store.length)
        ids = torch.from_numpy(store.input_ids[:2].astype(np.int64))
        mask = torch.from_numpy(store.attention_mask[:2].astype(np.int64))
    with torch.no_grad():
        attentions = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    first_bin = limited[limited["position_from"] == 1]
    want = [a[:, :, 1, 0].mean().item() for a in attentions]
    np.testing.assert_allclose(first_bin["alpha_first"], want, rtol=1e-5)
    assert (first_bin["n_rows"] == 2).all()
    assert not np.allclose(limited["alpha_first"], every["alpha_first"])
