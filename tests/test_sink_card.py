"""The attention-sink card: Sink^eps and the stream on constructed attention, the control
input, Sun et al.'s massive-entry criterion on constructed states, and the intervention's
forward from a stored layer against known losses of tiny decoders."""

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
)
from attnscope.analyses.norms.sink_card import (
    SinkAttention,
    kobayashi_summary,
    repeated_token_ids,
    sink_attention,
    sink_epsilon,
    sink_heads,
    sink_stream,
    stream_bins,
)
from attnscope.architectures import canonical_weights, prediction_head
from attnscope.core.forward_from_layer import forward_from_layer, next_token_loss
from attnscope.core.store import HiddenStates
from attnscope.core.tokens import CLS, OTHER, PAD, PUNCT, SEP
from attnscope.pipeline.extract import ExtractSettings, extract
from attnscope.pipeline.models import open_model
from conftest import tiny_model, write_tiny_encoded, write_tiny_model_run, write_tiny_store


def attention_with_first(first: torch.Tensor) -> torch.Tensor:
    """Row-stochastic alpha [B, H, n, n] whose column 0 is `first` [B, H, n] and whose rest
    of each row is spread evenly over keys 1..n-1."""
    B, H, n = first.shape
    alpha = ((1 - first) / (n - 1))[..., None].expand(B, H, n, n).clone()
    alpha[..., 0] = first
    return alpha


def test_sink_epsilon_is_the_share_of_heads_above_eps_within_the_first_positions():
    """Layer 1: heads with mean first-position weights 0.5, 0.1, 0.31, 0.29 over rows i < 4 (rows
    past 4 put everything on it, row 0 is not counted): 2 of 4 are sinks.
    Layer 2: the same heads at 0.2 in the counted rows: none. Sink^eps = 2 / 8; the control
    (every head at 0.9): 8 / 8."""
    B, n, positions = 2, 7, 4
    means = torch.tensor([0.5, 0.1, 0.31, 0.29])
    rows = torch.ones(B, n, dtype=torch.bool)
    rows[:, 0] = False  # a causal layer's row 0
    rows[1, 6] = False  # padding
    found = SinkAttention(2, 4, n, positions)
    control = SinkAttention(2, 4, n, positions)
    for layer, level in ((0, means), (1, torch.full((4,), 0.2))):
        first = torch.ones(B, 4, n)  # rows >= positions and row 0: weight 1, not counted
        # rows 1..3: mean `level`, spread +-0.05 around it
        first[:, :, 1:positions] = level[None, :, None] + torch.tensor([-0.05, 0.0, 0.05])
        found.add_batch(layer, attention_with_first(first), rows)
        control.add_batch(layer, attention_with_first(torch.full((B, 4, n), 0.9)), rows)
    heads = sink_heads(found, control, 0.3)
    np.testing.assert_allclose(heads["alpha_first"], [0.5, 0.1, 0.31, 0.29, 0.2, 0.2, 0.2, 0.2])
    assert heads["n_rows"].tolist() == [2 * 3] * 8
    table = sink_epsilon(heads, 0.3, positions).set_index("layer")
    assert table.loc["1", "sink_share"] == 0.5 and table.loc["2", "sink_share"] == 0
    assert table.loc["all", "sink_share"] == 0.25 and table.loc["all", "sink_share_control"] == 1
    assert (table["epsilon"] == 0.3).all() and (table["positions"] == positions).all()


def test_the_stream_averages_the_first_weight_per_log_spaced_bin():
    """alpha_i0 = 1 / (i + 1) in every head: bins [1, 2), [2, 4), [4, 8), [8, 10) of a
    10-piece sequence hold the means of 1 / (i + 1) over their counted rows."""
    n = 10
    assert stream_bins(n).tolist() == [0, 1, 2, 4, 8]
    assert stream_bins(8).tolist() == [0, 1, 2, 4]
    first = (1 / (torch.arange(n) + 1.0)).expand(1, 3, n)
    rows = torch.ones(1, n, dtype=torch.bool)
    rows[0, 0] = False
    found = SinkAttention(1, 3, n, 64)
    found.add_batch(0, attention_with_first(first), rows)
    table = sink_stream(found, n)
    assert table["position_from"].tolist() == [1, 2, 4, 8]
    assert table["position_to"].tolist() == [1, 3, 7, 9]
    assert table["n_rows"].tolist() == [1, 2, 4, 2]
    want = [np.mean(1 / (np.arange(a, b + 1) + 1)) for a, b in ((1, 1), (2, 3), (4, 7), (8, 9))]
    np.testing.assert_allclose(table["alpha_first"], want)


def test_the_control_repeats_the_first_plain_piece_and_keeps_the_specials():
    ids = np.array([[2, 10, 11, 4, 3, 12, 3, 0], [2, 3, 3, 0, 0, 0, 0, 0]])
    category = np.array(
        [
            [CLS, OTHER, OTHER, PUNCT, SEP, OTHER, SEP, PAD],
            [CLS, SEP, SEP, PAD, PAD, PAD, PAD, PAD],
        ]
    )
    control = repeated_token_ids(ids, category)
    assert control[0].tolist() == [2, 10, 10, 10, 3, 10, 3, 0]
    assert control[1].tolist() == ids[1].tolist()  # nothing to repeat


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


def test_massive_entries_need_both_100_and_1000_times_the_layers_median():
    """State 0: every real entry 0.1 (median 0.1) but 150 (massive), 99 (not above 100) and
    a padded 10^6 (not real, not in the median). State 1: median 0.2, so 150 (750 x) is not
    massive and 250 is."""
    mask = np.array([[1, 1, 1], [1, 1, 0]])
    X0 = np.full((2, 3, 4), 0.1, dtype=np.float32)
    X0[0, 0, 2], X0[1, 1, 3], X0[1, 2, 0] = -150.0, 99.0, 1e6
    X1 = np.full((2, 3, 4), 0.2, dtype=np.float32)
    X1[0, 0, 2], X1[1, 0, 1] = 150.0, 250.0
    assert layer_median(X0, mask) == pytest.approx(0.1)
    assert massive_entries(X0, mask, 0.1).tolist() == [[0, 0, 2]]
    assert massive_entries(X1, mask, layer_median(X1, mask)).tolist() == [[1, 0, 1]]
    ids = np.array([[5, 6, 7], [8, 9, 0]])
    table = massive_dimensions([(0, X0), (1, X1)], mask, ids, lambda ids: [f"p{i}" for i in ids])
    assert table[["state", "dim", "sequence", "position", "piece"]].values.tolist() == [
        [0, 2, 0, 0, "p5"],
        [1, 1, 1, 0, "p8"],
    ]
    np.testing.assert_allclose(table["value"], [-150.0, 250.0])
    np.testing.assert_allclose(table["ratio"], [1500.0, 1250.0], rtol=1e-6)


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
        entries = pd.DataFrame({"sequence": s, "position": p, "dim": k, "value": 1.0})
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
    table (<= 1e-5), and so do the Sink^eps means."""
    path, model, manifest = write_tiny_model_run(tmp_path, "llama", head="causal")
    entries = pd.DataFrame(
        {"state": [1], "dim": [3], "sequence": [0], "position": [0], "value": [0.0]}
    )
    tables, sinks = {}, {}
    for route in ("whole-model", "layer-streamed"):
        loaded = open_model(manifest, with_head=True, loading=route)
        assert loaded.route == route
        with HiddenStates(path) as store:
            entries["value"] = store.hidden(1)[0, 0, 3]
            tables[route] = massive_intervention(store, entries, loaded.weights, loaded.head, 3)
            sinks[route] = sink_attention(store, loaded.weights, 64, 3).head_means()
    whole = tables["whole-model"].set_index("variant")
    with HiddenStates(path) as store:
        want = own_loss(model, store)
    assert whole.loc["unmodified", "loss"] == pytest.approx(want, abs=1e-5)
    assert whole.loc["mean", "loss_difference"] == pytest.approx(0, abs=1e-6)
    assert whole.loc["zeroed", "loss_difference"] != 0
    assert whole.loc["zeroed", "dims"] == "3" and whole.loc["zeroed", "n_entries"] == 1
    streamed = tables["layer-streamed"].set_index("variant")
    np.testing.assert_allclose(streamed["loss"], whole["loss"], rtol=1e-5)
    np.testing.assert_allclose(sinks["layer-streamed"], sinks["whole-model"], rtol=1e-5)


def test_the_card_over_the_first_sequences_averages_only_their_rows(tmp_path):
    """`sink_attention(..., limit=2)` of a tiny Llama's 4-sequence store: per layer and head,
    the mean of the model's own alpha_i0 over rows 1 <= i < 5 of the first 2 sequences
    (every row real: the tiny sequences have no padding in those rows)."""
    path, model, manifest = write_tiny_model_run(tmp_path, "llama", head="causal")
    loaded = open_model(manifest, loading="whole-model")
    with HiddenStates(path) as store:
        limited = sink_attention(store, loaded.weights, 5, 3, limit=2).head_means()
        every = sink_attention(store, loaded.weights, 5, 3).head_means()
        ids = torch.from_numpy(store.input_ids[:2].astype(np.int64))
        mask = torch.from_numpy(store.attention_mask[:2].astype(np.int64))
    assert mask[:, :5].all()
    with torch.no_grad():
        attentions = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    want = np.stack([a[:, :, 1:5, 0].mean((0, 2)).numpy() for a in attentions])  # [L, H]
    np.testing.assert_allclose(limited, want, rtol=1e-5)
    assert not np.allclose(limited, every)  # the other two sequences count without the limit
