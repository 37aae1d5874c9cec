"""The attend family (`analyses/attend`): the corpus sums of what lifts the attended keys
and the key classes, and the tr_t profiles of the embedding terms, equal a direct computation
from `maps.attend`'s [n, n, C, C] terms."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from attnscope.analyses.attend.corpus_pass import corpus_pass
from attnscope.analyses.attend.lift import key_classes
from attnscope.analyses.attend.settings import AttendSettings
from attnscope.analyses.attend.statistics import head_rows
from attnscope.analyses.attend.trt_terms import EMBED_PAIRS, OFFSETS, PROFILES, term_profiles
from attnscope.architectures import architecture, canonical_weights
from attnscope.core.checks import CheckError
from attnscope.core.store import HiddenStates
from attnscope.core.tokens import CATEGORY_NAMES
from attnscope.maps.attend import attend_split
from attnscope.model.extract import ExtractSettings, extract
from attnscope.model.loaded import as_loaded
from conftest import tiny_model, write_tiny_encoded, write_tiny_model_run, write_tiny_store

SEQUENCES = 2


def sequence_inputs(store: HiddenStates, model, s: int) -> dict:
    n = int(store.lengths[s])
    arrays = {
        name: torch.from_numpy(getattr(store, name)[s : s + 1, :n].astype(np.int64))
        for name in ("input_ids", "attention_mask", "token_type_ids")
    }
    return architecture(model.config.model_type).model_inputs(model, **arrays)


def write_repeated_store(tmp_path, architecture: str):
    """(hidden_states.h5 path, model): `write_tiny_store`'s corpus with pieces 4..7 repeated
    at 9..12 where both lie inside the sequence's first segment or the second, so that the
    token classes (induction, duplicate) have keys; [SEP] is repeated in every sequence."""
    import h5py

    model = tiny_model(architecture)
    encoded = write_tiny_encoded(tmp_path / f"{architecture}-encoded.h5", architecture)
    with h5py.File(encoded, "r+") as f:
        ids, mask = f["input_ids"][...], f["attention_mask"][...]
        for b in range(ids.shape[0]):
            n = int(mask[b].sum())
            for source, target in zip(range(4, 8), range(9, 13), strict=True):
                if target < n - 1 and n // 2 not in (source, target):
                    ids[b, target] = ids[b, source]
        f["input_ids"][...] = ids
    path = tmp_path / f"{architecture}-hidden_states.h5"
    extract(model, encoded, path, ExtractSettings(batch_size=3))
    return path, model


def direct_lifts(found, alpha, pieces, causal) -> dict[str, tuple[np.ndarray, int, float]]:
    """{keys: (sum over counted rows of lift_i(c, c') [C, C], rows, their max |T_ij(c, c')|
    summed: the float32 rounding's scale)} straight from the terms T_ij(c, c') [n, n, C, C]
    and the module's weights alpha [n, n], row by row; pieces (category [n], ids [n])."""
    category, ids = pieces
    T = found.terms.double()
    n = T.shape[0]
    out = {}
    for keys in ["attended", *key_classes(causal)]:
        total, rows, size = torch.zeros(T.shape[2:], dtype=torch.float64), 0, 0.0
        for i in range(n):
            seen = list(range(i + 1)) if causal else list(range(n))
            if keys == "attended":
                chosen = seen
            elif keys == "first":
                chosen = [0]
            elif keys == "previous":
                chosen = [i - 1] if i >= 1 else []
            elif keys == "self":
                chosen = [i]
            elif keys == "induction":  # the piece after an earlier (or later) occurrence
                chosen = [j for j in seen if j >= 1 and j != i + 1 and ids[j - 1] == ids[i]]
            elif keys == "duplicate":  # another occurrence of the query's piece
                chosen = [j for j in seen if j != i and ids[j] == ids[i]]
            else:
                chosen = [j for j in seen if CATEGORY_NAMES[int(category[j])] == keys]
            if len(seen) < 2 or not chosen:
                continue
            if keys == "attended":
                at_keys = torch.einsum("j,jcd->cd", alpha[i].double(), T[i])
            else:
                at_keys = T[i, chosen].mean(0)
            total += at_keys - T[i, seen].mean(0)
            rows += 1
            size += float(T[i].abs().max())
        out[keys] = (total.numpy(), rows, size)
    return out


@pytest.mark.parametrize("architecture", ["bert", "gpt2", "llama"])
def test_the_sums_equal_the_terms_of_attend_row_by_row(tmp_path, architecture):
    """Every weighting's sums, the token classes' included (induction, duplicate: on a corpus
    with repeated pieces), equal a direct computation from the terms and the definition."""
    path, model = write_repeated_store(tmp_path, architecture)
    weights = canonical_weights(model)
    with HiddenStates(path) as store:
        sums, check = corpus_pass(
            store,
            as_loaded(model, weights),
            AttendSettings(sequences=SEQUENCES, max_rel_residual=1e-4),
        )
        first = ["state", "attention output", "lift", "lift pairs"]
        tokens = ["lift (token classes)", "lift pairs (token classes)"]
        assert list(dict.fromkeys(check["stage"])) == first + tokens  # the new ones after
        assert check["max_rel"].max() <= 1e-4
        for layer in range(weights.n_layers):
            want = {}
            for s in range(SEQUENCES):
                inputs = sequence_inputs(store, model, s)
                for head in range(weights.n_heads):
                    found = attend_split(model, weights, inputs, layer, head)
                    with torch.no_grad():
                        out = model(**inputs, output_attentions=True)
                    alpha = out.attentions[layer][0, head]
                    causal = weights.layers[layer].causal
                    n = int(store.lengths[s])
                    pieces = store.category[s, :n], store.input_ids[s, :n]
                    direct = direct_lifts(found, alpha, pieces, causal)
                    for keys, found_sums in direct.items():
                        old = want.get((head, keys), (0, 0, 0.0))
                        added = zip(old, found_sums, strict=True)
                        want[head, keys] = tuple(a + b for a, b in added)
                    assert sums.components[layer + 1] == found.components
            for (head, keys), (total, rows, size) in want.items():
                k = sums.keys[layer + 1].index(keys)
                got = sums.sums[layer + 1, head + 1]
                close = dict(rtol=0, atol=1e-5 * size)
                np.testing.assert_allclose(got["pairs"][k], total, **close)
                np.testing.assert_allclose(got["query"][k], total.sum(1), **close)
                np.testing.assert_allclose(got["key"][k], total.sum(0), **close)
                assert sums.rows[layer + 1][k] == rows
                if keys in ("induction", "duplicate"):
                    assert rows >= SEQUENCES  # the repeated pieces, [SEP]
                # the rotary bands (one where there is no rotation) sum to the same lift
                bands = got["bands"][k]
                np.testing.assert_allclose(bands.sum(), total.sum(), rtol=0, atol=1e-5 * size)
            # the tables: every pair of a head and weighting (top_k above C^2), means per
            # counted row, sum to its total; key_classes.tsv has them for every key class
            for classes in (False, True):
                table = sums.lift_table(top_k=10**6, classes=classes)
                table = table[table["layer"] == layer + 1]
                assert set(table["keys"]) == ({*key_classes(causal)} if classes else {"attended"})
                for (head, keys), rows in table.groupby(["head", "keys"]):
                    total, n_rows, size = want[head - 1, keys]
                    pairs = rows[rows["side"] == "pair"]
                    C = len(sums.components[layer + 1])
                    assert len(pairs) == C * C and (rows["n_rows"] == n_rows).all()
                    names = sums.components[layer + 1]
                    index = [
                        (names.index(q), names.index(k))
                        for q, k in pairs[["query", "key"]].to_numpy()
                    ]
                    direct = np.array([total[c, d] for c, d in index]) / max(n_rows, 1)
                    atol = 1e-5 * size / max(n_rows, 1)
                    np.testing.assert_allclose(pairs["lift"], direct, rtol=0, atol=atol)
                    whole = rows.loc[rows["side"] == "total", "lift"].item()
                    np.testing.assert_allclose(pairs["lift"].sum(), whole, rtol=0, atol=atol)
    if architecture == "llama":
        assert sums.sums[1, 1]["bands"].shape[1] == weights.layers[0].d_head // 2


@pytest.mark.parametrize(
    ("architecture", "names"),
    [
        ("bert", ["embed.word", "embed.position", "embed.type", "bias"]),
        ("llama", ["embed", "bias"]),
    ],
)
def test_the_first_layer_lifts_only_embedding_and_bias_pairs(tmp_path, architecture, names):
    path, model = write_tiny_store(tmp_path, architecture)
    with HiddenStates(path) as store:
        sums, _ = corpus_pass(
            store,
            as_loaded(model, canonical_weights(model)),
            AttendSettings(sequences=1, max_rel_residual=1e-4),
        )
    table = sums.lift_table(top_k=100, classes=False)
    first = table[table["layer"] == 1]
    assert set(first["query"]) - {"all"} == set(names) == set(first["key"]) - {"all"}
    assert len(sums.components[2]) == len(names) + 4 + 1  # + 4 heads and the FF block of layer 1


def test_head_rows_keep_the_top_pairs_and_marginals_with_their_share():
    pairs = np.array([[1.0, -3.0], [0.5, 0.0]])
    mean = {"pairs": pairs, "query": pairs.sum(1), "key": pairs.sum(0)}
    rows = list(head_rows(mean, ["a", "b"], top_k=1))
    assert rows[0] == ("total", "all", "all", -1.5, 1.0)
    assert rows[1] == ("pair", "a", "b", -3.0, 2.0)
    assert rows[2] == ("query", "a", "all", -2.0, pytest.approx(4 / 3))  # rows sum: a -2, b 0.5
    assert rows[3] == ("key", "all", "b", -3.0, 2.0)  # columns sum: a 1.5, b -3


@pytest.mark.parametrize(
    ("changed", "message"),
    [
        (lambda layer: layer.W_O, "layer 1: attend stage attention output"),
        (lambda layer: layer.ln_ff.gamma, "layer 2: attend stage state"),
    ],
)
def test_weights_that_miss_the_stored_states_fail_by_layer_and_stage(tmp_path, changed, message):
    path, model = write_tiny_store(tmp_path, "bert")
    weights = canonical_weights(model)
    with torch.no_grad():
        changed(weights.layers[0]).mul_(1.01)  # the stored states come from the unchanged model
    with HiddenStates(path) as store, pytest.raises(CheckError, match=message):
        corpus_pass(
            store, as_loaded(model, weights), AttendSettings(sequences=1, max_rel_residual=1e-4)
        )


@pytest.mark.parametrize("architecture", ["bert", "llama"])
def test_a_layer_subset_store_gives_the_whole_stores_sums_for_its_layers(tmp_path, architecture):
    """`layers: [3]` of a 3-layer model keeps hidden/2 and hidden/3 alone: the split starts
    from the embeddings it rebuilds, layer 1's output is recomputed, and layer 3's sums are
    the whole store's."""
    model = tiny_model(architecture, layers=3)
    weights = canonical_weights(model)
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", architecture)
    found = {}
    for layers in ("all", [3]):
        path = tmp_path / f"states-{layers}.h5"
        extract(model, encoded, path, ExtractSettings(batch_size=3, layers=layers))
        with HiddenStates(path) as store:
            assert store.stores(1) == (layers == "all")
            found[str(layers)] = corpus_pass(
                store, as_loaded(model, weights), AttendSettings(sequences=2, max_rel_residual=1e-4)
            )[0]
    whole, subset = found["all"], found["[3]"]
    assert sorted(subset.sums) == [(3, h) for h in range(1, 5)]
    for key, sums in subset.sums.items():
        for name, value in sums.items():
            np.testing.assert_allclose(value, whole.sums[key][name], rtol=1e-4, atol=1e-6)


def test_the_streamed_route_gives_the_same_sums_reading_no_layer_after_the_last_analysed(
    tmp_path,
):
    """`loading: layer-streamed`: the sums of a `layers: [2]` store of a 4-layer Llama equal
    the whole model's, and each sequence reads layers 1 and 2 only."""
    from attnscope.model.loaded import open_model
    from attnscope.model.sources import manifest_attrs, read_manifest

    _, model, manifest = write_tiny_model_run(tmp_path, "llama", layers=4)
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", "llama")
    path = tmp_path / "states-2.h5"
    attrs = manifest_attrs(read_manifest(manifest))
    extract(model, encoded, path, ExtractSettings(batch_size=3, layers=[2]), attrs=attrs)
    found = {}
    for loading in ("whole-model", "layer-streamed"):
        loaded = open_model(manifest, loading=loading)
        with HiddenStates(path) as store:
            found[loading] = corpus_pass(
                store,
                loaded,
                AttendSettings(sequences=2, max_rel_residual=1e-4),
            )[0]
    assert loaded.weights.layers.reads == 2 * 2  # 2 sequences x layers 1, 2
    whole, streamed = found["whole-model"], found["layer-streamed"]
    assert sorted(streamed.sums) == [(2, h) for h in range(1, 5)]
    for key, sums in streamed.sums.items():
        for name, value in sums.items():
            np.testing.assert_allclose(value, whole.sums[key][name], rtol=1e-5, atol=1e-7)


def direct_profiles(found, visible: torch.Tensor) -> torch.Tensor:
    """[P, T] tr_t of word x word, word x position, position x word, position x position,
    the rest and the logit, straight from `attend`'s [n, n, C, C] terms, diagonal by
    diagonal."""
    T = found.terms.double()
    pairs = [found.term(f"embed.{a}", f"embed.{b}").double() for a, b in EMBED_PAIRS]
    maps = [*pairs, T.sum((-1, -2)) - sum(pairs), found.logits.double()]
    n = T.shape[0]
    out = torch.zeros(len(maps), len(OFFSETS), dtype=torch.float64)
    for p, M in enumerate(maps):
        for k, t in enumerate(OFFSETS):
            out[p, k] = sum(
                float(M[i, i + t]) for i in range(n) if 0 <= i + t < n and visible[i, i + t]
            )
    return out


@pytest.mark.parametrize("architecture", ["bert", "gpt2"])
def test_trt_term_profiles_equal_the_diagonals_of_attend_terms(tmp_path, architecture):
    """trt_terms.tsv is the mean over sequences of the diagonal sums of `attend`'s terms, and
    the four embedding pairs and the rest sum to the logit's profile."""
    path, model = write_tiny_store(tmp_path, architecture)
    weights = canonical_weights(model)
    with HiddenStates(path) as store:
        sums, _ = corpus_pass(
            store,
            as_loaded(model, weights),
            AttendSettings(sequences=SEQUENCES, max_rel_residual=1e-4),
        )
        table = sums.trt_table()
        assert list(table.columns) == ["layer", "head", "pair", "t", "value"]
        assert set(table["pair"]) == set(PROFILES) and sorted(set(table["t"])) == list(OFFSETS)
        for layer in range(weights.n_layers):
            causal = weights.layers[layer].causal
            for head in range(weights.n_heads):
                want = 0
                for s in range(SEQUENCES):
                    found = attend_split(
                        model, weights, sequence_inputs(store, model, s), layer, head
                    )
                    n = found.logits.shape[0]
                    visible = torch.ones(n, n).tril().bool() if causal else torch.ones(n, n).bool()
                    want = want + direct_profiles(found, visible) / SEQUENCES
                rows = table[(table["layer"] == layer + 1) & (table["head"] == head + 1)]
                got = rows.pivot(index="pair", columns="t", values="value").loc[list(PROFILES)]
                size = float(want.abs().max())
                np.testing.assert_allclose(got.to_numpy(), want.numpy(), rtol=0, atol=1e-5 * size)
                terms = got.loc[list(PROFILES[:-1])].sum(axis=0)
                np.testing.assert_allclose(terms, got.loc["logit"], rtol=0, atol=1e-5 * size)
                if causal:  # keys after the query are masked
                    assert (got.loc[:, [t for t in OFFSETS if t > 0]].to_numpy() == 0).all()


@pytest.mark.parametrize("architecture", ["bert", "gpt2", "llama"])
def test_zeroed_position_embeddings_give_zero_position_profiles(tmp_path, architecture):
    """With the position embeddings set to 0 in the model that makes the states, every term
    with a position side is exactly 0; a rotary model has no profiles at all."""
    model = tiny_model(architecture)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "position_embeddings" in name or name.endswith("wpe.weight"):
                p.zero_()
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", architecture)
    path = tmp_path / "states.h5"
    extract(model, encoded, path, ExtractSettings(batch_size=3))
    with HiddenStates(path) as store:
        sums, _ = corpus_pass(
            store,
            as_loaded(model, canonical_weights(model)),
            AttendSettings(sequences=1, max_rel_residual=1e-4),
        )
    table = sums.trt_table()
    if architecture == "llama":
        assert table.empty and not sums.trt
        return
    positional = table["pair"].str.contains("position")
    assert positional.sum() == 3 * 2 * 4 * len(OFFSETS)  # 3 pairs, layers, heads, offsets
    assert (table.loc[positional, "value"] == 0).all()
    assert table.loc[table["pair"] == "word x word", "value"].abs().max() > 0


def diagonal_sums_by_hand(M: torch.Tensor, visible: torch.Tensor) -> torch.Tensor:
    n = M.shape[0]
    return torch.tensor(
        [sum(float(M[i, i + t]) for i in range(n) if 0 <= i + t < n and visible[i, i + t])
         for t in OFFSETS],
        dtype=torch.float64,
    )  # fmt: skip


def test_term_profiles_known_answer():
    """Constructed queries and keys: word parts a constant vector (a . a = 2) in its own
    dimension, position parts one-hot with q_i(position) . k_j(position) = 1 iff j = i - 1,
    a random bias on both sides; all keys visible, then the causal ones."""
    n, scale = 6, 0.5
    Q, K = torch.zeros(2, 1, 3, n, n + 1, dtype=torch.float64)
    Q[0, 0, :, n] = K[0, 0, :, n] = 2**0.5  # embed.word
    for i in range(1, n):
        Q[0, 1, i, i - 1] = 1.0  # embed.position
    K[0, 1] = torch.eye(n, n + 1, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    Q[0, 2], K[0, 2] = torch.randn(2, n, n + 1, generator=g, dtype=torch.float64)  # bias
    logits = Q.sum(1) @ K.sum(1).transpose(-1, -2) * scale
    names = ["embed.word", "embed.position", "bias"]
    offsets = torch.tensor(OFFSETS, dtype=torch.float64)
    length = (n - offsets.abs()).clamp_min(0)  # the diagonal's length
    for causal in (False, True):
        visible = torch.ones(n, n).bool()
        visible = visible.tril() if causal else visible
        profiles = term_profiles(Q, K, logits, visible, scale, names)[0]
        got = dict(zip(PROFILES, profiles, strict=True))
        seen = (offsets <= 0).double() if causal else torch.ones_like(offsets)
        torch.testing.assert_close(got["word x word"], scale * 2 * length * seen)
        assert (got["word x position"] == 0).all() and (got["position x word"] == 0).all()
        peak = scale * (n - 1) * (offsets == -1).double()
        torch.testing.assert_close(got["position x position"], peak)
        rest = Q[0].sum(0) @ K[0].sum(0).T - Q[0, :2].sum(0) @ K[0, :2].sum(0).T
        torch.testing.assert_close(got["rest"], diagonal_sums_by_hand(rest * scale, visible))
        torch.testing.assert_close(got["logit"], diagonal_sums_by_hand(logits[0], visible))


def test_the_trt_terms_figure_draws_the_heads_with_the_strongest_peaks():
    """Head (1, 2) peaks at t = -1, head (2, 1) at t = +1, head (1, 1) is flat (a large
    constant offset, which the median removes); a causal table (t > 0 all 0) skips t = +1."""
    import matplotlib.pyplot as plt

    from attnscope.analyses.attend.plots import peak_heads, trt_terms

    rows = []
    for layer, head, t_peak, base in ((1, 1, None, 50.0), (1, 2, -1, 0.0), (2, 1, 1, 0.0)):
        for pair in PROFILES:
            for t in OFFSETS:
                value = base + (3.0 if t == t_peak else 0.0)
                rows.append([layer, head, pair, t, value])
    table = pd.DataFrame(rows, columns=["layer", "head", "pair", "t", "value"])
    assert peak_heads(table, figure_heads=1) == [(-1, 1, 2), (1, 2, 1)]
    causal = table.assign(value=table["value"].where(table["t"] <= 0, 0.0))
    assert peak_heads(causal, figure_heads=1) == [(-1, 1, 2)]
    fig = trt_terms(table, title="tiny", figure_heads=1)
    assert len(fig.axes) == 2 and fig.axes[0].get_title().startswith("L1 H2")
    plt.close(fig)


def test_the_lift_pairs_figure_draws_the_attended_and_the_chosen_class_pairs():
    """Head (2, 1) lifts the first position most, head (1, 2) the previous token: each gets a
    column whose upper panel is its attended keys' pair grid and whose lower panel is the
    grid of the class it was chosen for, each pair at its place (0 where not a top pair)."""
    import matplotlib.pyplot as plt

    from attnscope.analyses.attend.plots import chosen_heads, lift_pairs

    columns = ["layer", "head", "keys", "side", "query", "key", "n_rows", "lift", "share"]

    def rows(layer, head, keys, total, pairs):
        out = [[layer, head, keys, "total", "all", "all", 10, total, 1.0]]
        out += [[layer, head, keys, "pair", q, k, 10, v, v / total] for q, k, v in pairs]
        return out

    lift, classes = [], []
    for layer, head in ((1, 2), (2, 1)):
        lift += rows(
            layer, head, "attended", 4.0, [("embed", "embed", 3.0), ("L1.FF", "bias", 1.0)]
        )
    classes += rows(2, 1, "first", 9.0, [("L1.FF", "L1.H1", 7.0), ("bias", "embed", 2.0)])
    classes += rows(1, 2, "first", 1.0, [("embed", "embed", 1.0)])
    classes += rows(1, 2, "previous", 5.0, [("embed", "embed", -5.0), ("bias", "bias", 10.0)])
    classes += rows(2, 1, "previous", 0.5, [("embed", "embed", 0.5)])
    lift, classes = pd.DataFrame(lift, columns=columns), pd.DataFrame(classes, columns=columns)
    assert chosen_heads(classes, figure_heads=1) == [("first", 2, 1), ("previous", 1, 2)]
    fig = lift_pairs(lift, classes, title="tiny", figure_heads=1)
    panels = [ax for ax in fig.axes if ax.get_images()]
    assert len(panels) == 4  # 2 rows x 2 heads, in row-major order
    upper_first, upper_previous, lower_first, lower_previous = panels
    assert "attended keys: lift 4.00" in upper_first.get_title()
    assert "first keys: lift 9.00" in lower_first.get_title()
    assert "previous keys: lift 5.00" in lower_previous.get_title()

    def grid(ax):
        labels = (
            [t.get_text() for t in ax.get_yticklabels()],
            [t.get_text() for t in ax.get_xticklabels()],
        )
        values = np.asarray(ax.get_images()[0].get_array())
        return {
            (q, k): values[i, j] for i, q in enumerate(labels[0]) for j, k in enumerate(labels[1])
        }

    assert grid(lower_first) == {
        ("L1.FF", "L1.H1"): 7.0,
        ("L1.FF", "embed"): 0.0,
        ("bias", "L1.H1"): 0.0,
        ("bias", "embed"): 2.0,
    }
    assert grid(upper_previous)[("L1.FF", "bias")] == 1.0
    assert grid(lower_previous)[("bias", "bias")] == 10.0
    assert grid(lower_previous)[("embed", "embed")] == -5.0
    plt.close(fig)


@pytest.mark.parametrize("architecture", ["bert", "llama", "mixtral"])
def test_a_component_window_merges_the_earlier_layers_exactly(tmp_path, architecture):
    """`window` 1 on a 4-layer model: at layer l the components of layers 1 .. l - 2 are two,
    `L1-{l-2}.heads` and `L1-{l-2}.FF`; every sum equals the whole split's summed over the
    members of each merged component (the split is linear), and C no longer grows."""
    model = tiny_model(architecture, layers=4)
    weights = canonical_weights(model)
    encoded = write_tiny_encoded(tmp_path / "encoded.h5", architecture)
    path = tmp_path / "states.h5"
    extract(model, encoded, path, ExtractSettings(batch_size=3))
    found = {}
    with HiddenStates(path) as store:
        for window in (0, 1):
            settings = AttendSettings(2, max_rel_residual=1e-4, component_window=window)
            found[window] = corpus_pass(store, as_loaded(model, weights), settings)[0]
    whole, windowed = found[0], found[1]
    embed = [c for c in whole.components[1] if c.startswith("embed")]
    H = weights.n_heads
    for layer in (1, 2):  # nothing to merge yet
        assert windowed.components[layer] == whole.components[layer]
    for layer in (3, 4):
        names = windowed.components[layer]
        last = layer - 2
        assert names[: len(embed) + 2] == [*embed, f"L1-{last}.heads", f"L1-{last}.FF"]
        group = np.zeros((len(whole.components[layer]), len(names)))
        for c, name in enumerate(whole.components[layer]):
            layer_of = int(name[1:].split(".")[0]) if name.startswith("L") else None
            if layer_of is not None and layer_of <= last:
                kind = "FF" if name.split(".")[1] == "FF" else "heads"
                group[c, names.index(f"L1-{last}.{kind}")] = 1
            else:
                group[c, names.index(name)] = 1
        for head in range(1, H + 1):
            full, merged = whole.sums[(layer, head)], windowed.sums[(layer, head)]
            np.testing.assert_allclose(
                merged["pairs"], group.T @ full["pairs"] @ group, rtol=1e-4, atol=1e-6
            )
            for side in ("query", "key"):
                np.testing.assert_allclose(merged[side], full[side] @ group, rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(merged["bands"], full["bands"], rtol=1e-4, atol=1e-6)
    assert len(windowed.components[4]) == len(windowed.components[3])
