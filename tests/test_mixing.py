"""Whole-layer mixing (Kobayashi et al. 2021, 2024): exact decomposition, IG split, statistics."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from attnscope import architectures
from attnscope.architectures import canonical_weights
from attnscope.core.activation_split import (
    closed_form_coefficients,
    ig_coefficients,
)
from attnscope.core.store import HiddenStates
from attnscope.maps.layer_decomposition import (
    VECTOR_SCOPES,
    LayerInput,
    closing_layer_norm,
    factored_stages,
)
from attnscope.model.loaded import as_loaded
from conftest import write_tiny_store


@pytest.mark.parametrize("ig_steps", [0])
def test_every_stage_rebuilds_the_real_outputs(tmp_path, classic_architecture, ig_steps):
    """sum_j z_ij + bias_i equals the real output of every stage; the last residual state equals
    the model's stored next hidden state hidden/{l+1}."""
    architecture = classic_architecture
    from attnscope.core.attention import feed_forward

    path, model = write_tiny_store(tmp_path, architecture)
    weights = canonical_weights(model)
    module_attention = architectures.architecture(model.config.model_type).attention_output
    with HiddenStates(path) as store:
        for l, layer in enumerate(weights.layers):
            closing = closing_layer_norm(weights.layers, weights.final_ln, l)
            X = torch.from_numpy(store.hidden(l))
            X_next = torch.from_numpy(store.hidden(l + 1))
            mask = torch.from_numpy(store.attention_mask.astype(np.int64))
            real = mask.bool()
            with torch.no_grad():
                y = module_attention(model, l, X, mask)
                h = X + y
                ln_in = layer.ln_ff(h) if layer.pre_ln else layer.ln_attn(h)
                ff = feed_forward(ln_in, layer)
                if layer.pre_ln:
                    expected = {
                        "Attn": y,
                        "AttnRes": h,
                        "AttnResLn": ln_in,
                        "AttnResLnFf": ff,
                        "AttnResLnFfRes": X_next,
                        "AttnResLnFfResLn": torch.nn.functional.layer_norm(
                            X_next, X.shape[-1:], closing.gamma, closing.beta, closing.eps
                        ),
                    }
                else:
                    expected = {
                        "Attn": y,
                        "AttnRes": h,
                        "AttnResLn": ln_in,
                        "AttnResLnFf": ff,
                        "AttnResLnFfRes": ln_in + ff,
                        "AttnResLnFfResLn": X_next,
                    }
                seen = []
                for stage in factored_stages(LayerInput(X, mask, layer, closing, ig_steps)):
                    seen.append(stage.scope)
                    got = stage.total()[real]
                    want = expected[stage.scope][real]
                    rel = ((got - want).norm(dim=-1) / want.norm(dim=-1)).max()
                    assert rel < 1e-5, (architecture, l, stage.scope, float(rel))
                    invisible = ~(real[:, :, None] & real[:, None, :])
                    if layer.causal:
                        invisible |= torch.ones_like(invisible[0]).triu(1)
                    assert stage.parts[real[:, :, None] & invisible].abs().max() < 1e-6
            assert tuple(seen) == VECTOR_SCOPES


def test_head_factors_rebuild_the_parts_and_the_ff_split(tmp_path, architecture):
    """The AttnResLn stage's factored form gives its parts exactly (times the identity), z_ij W
    for query chunks at any offset (the residual on the diagonal), and the same FF split as
    the parts themselves, for every architecture (padding and causal masks included)."""
    from attnscope.maps.layer_decomposition import feed_forward_parts

    path, model = write_tiny_store(tmp_path, architecture)
    weights = canonical_weights(model)
    with HiddenStates(path) as store:
        X = torch.from_numpy(store.hidden(1))
        mask = torch.from_numpy(store.attention_mask.astype(np.int64))
    layer = weights.layers[1]
    closing = closing_layer_norm(weights.layers, weights.final_ln, 1)
    with torch.no_grad():
        stages = factored_stages(LayerInput(X, mask, layer, closing))
        stage = next(s for s in stages if s.scope == "AttnResLn")
        parts, factors = stage.parts, stage.factors
        n, d = parts.shape[2], parts.shape[3]
        identity = factors.times(torch.eye(d, dtype=parts.dtype))
        assert torch.allclose(identity(0, n).transpose(1, 2), parts, atol=1e-5, rtol=1e-5)
        W = torch.randn(d, 24, generator=torch.Generator().manual_seed(0))
        into_ff = factors.times(W)
        for i0, i1 in [(0, 1), (1, 4), (3, n)]:
            want = parts[:, i0:i1].transpose(1, 2) @ W
            assert torch.allclose(into_ff(i0, i1), want, atol=1e-5, rtol=1e-4), (architecture, i0)
        plain = feed_forward_parts(parts, stage.bias, layer, 3)
        factored = feed_forward_parts(parts, stage.bias, layer, 3, factors)
        for a, b in zip(plain, factored, strict=True):
            assert torch.allclose(a, b, atol=1e-5, rtol=1e-4), architecture


@pytest.mark.parametrize("rows, ig_steps", [(1, 0), (5, 3)])
def test_query_chunks_give_the_whole_layers_maps(tmp_path, architecture, rows, ig_steps):
    """Issue 37: a layer decomposed in chunks of `rows` queries (the budget that
    `query_chunk` turns into them) gives the maps and mixing ratios of the whole layer at
    once, to 1e-6 relative; chunks of 5 of 16 queries split the sliding windows (4 keys) of
    gemma2 and mixtral. (3 IG steps split the FF inexactly: the residuals are not checked.)"""
    from attnscope.analyses.mixing.statistics import vector_mixing_ratio
    from attnscope.core.checks import ResidualLog
    from attnscope.maps.layer_decomposition import STAGE_COPIES, query_chunk
    from attnscope.maps.layer_maps import LayerBatch, layer_scope_maps

    path, model = write_tiny_store(tmp_path, architecture)
    weights = canonical_weights(model)
    windows = [layer.sliding_window for layer in weights.layers if layer.sliding_window]
    with HiddenStates(path) as store:
        mask = torch.from_numpy(store.attention_mask.astype(np.int64))
        states = [torch.from_numpy(store.hidden(l)) for l in range(weights.n_layers + 1)]
    B, n, d = states[0].shape
    budget = rows * STAGE_COPIES * B * n * d * 4 / 2**20
    assert query_chunk(B, n, d, 4, budget) == rows
    assert query_chunk(B, n, d, 4, 1e-9) == 1 and query_chunk(B, n, d, 4, 1e9) == n
    if architecture in ("gemma2", "mixtral"):
        assert windows and max(windows) < n and rows % max(windows)
    for l in range(weights.n_layers):
        found = []
        for budget_mb in (1e9, budget):
            ratios = {}

            def keep(stage, ratios=ratios):
                ratio = ratios.setdefault(stage.scope, torch.full((B, n), torch.nan))
                ratio[:, stage.queries()] = vector_mixing_ratio(stage.parts, stage.offset)

            with torch.no_grad():
                maps = layer_scope_maps(
                    model, weights, LayerBatch(l, states[l], mask, states[l + 1]), ig_steps,
                    ResidualLog(float("inf"), None), keep, budget_mb,
                )  # fmt: skip
            found.append((maps, ratios))
        (whole, whole_ratios), (chunked, chunked_ratios) = found
        for scope, full in whole.items():
            error = (chunked[scope] - full).abs().max() / full.abs().max()
            assert error <= 1e-6, (architecture, l, scope, float(error))
        for scope, full in whole_ratios.items():
            assert not chunked_ratios[scope].isnan().any()
            assert torch.allclose(chunked_ratios[scope], full, rtol=1e-6, atol=1e-7), scope


def activation_of(name: str):
    from transformers.activations import ACT2FN

    return ACT2FN[name]


ACTIVATIONS = ["gelu", "gelu_new", "gelu_pytorch_tanh", "relu"]


@pytest.mark.parametrize("name", ACTIVATIONS)
@pytest.mark.parametrize("steps", [0, 7])
def test_ig_shares_equal_captum(name, steps):
    """u_p * c equals captum's IntegratedGradients attribution of every part of U = sum_p u_p
    through g (zero baselines, straight path, midpoint Riemann sum with the same steps; the
    closed form is compared with captum at many steps)."""
    from captum.attr import IntegratedGradients

    g = activation_of(name)
    torch.manual_seed(0)
    parts = tuple(torch.randn(5, 16, dtype=torch.float64) for _ in range(3))
    U = sum(parts)
    c = ig_coefficients(g, U, steps)
    ig = IntegratedGradients(lambda *p: g(sum(p)).sum(-1))
    captum_steps = steps or 4000
    expected = ig.attribute(
        parts,
        baselines=tuple(torch.zeros_like(p) for p in parts),
        n_steps=captum_steps,
        method="riemann_middle",
    )
    tolerance = 1e-6 if steps else 1e-5  # captum builds its alphas in float32
    for p, e in zip(parts, expected, strict=True):
        assert torch.allclose(p * c, e, atol=tolerance, rtol=0), (name, steps)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_riemann_converges_to_closed_form_and_closed_form_is_complete(name):
    """m-step IG approaches g(U)/U as m grows (midpoint rule: error O(1/m^2) for smooth g);
    sum_p u_p c = g(U) exactly for the closed form; U = 0 gives g'(0)."""
    g = activation_of(name)
    torch.manual_seed(1)
    U = torch.randn(200, dtype=torch.float64) * 3
    U[0] = 0.0
    exact = closed_form_coefficients(g, U)
    assert torch.allclose(U * exact, g(U), atol=1e-12)
    assert float(exact[0]) == pytest.approx(0.0 if name == "relu" else 0.5)
    errors = [float((ig_coefficients(g, U, m) - exact).abs().max()) for m in (4, 16, 64, 256)]
    assert all(b <= a for a, b in zip(errors, errors[1:], strict=False)), errors
    assert errors[-1] < (1e-2 if name == "relu" else 1e-4), errors


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_stages_rebuild_outputs_with_every_activation(tmp_path, name):
    """The FF split is exact with the closed form for every activation variant."""
    from attnscope.core.attention import layer_forward

    path, model = write_tiny_store(tmp_path, "bert")
    weights = canonical_weights(model)
    ff = dataclasses.replace(weights.layers[0].ff, activation=activation_of(name))
    layer = dataclasses.replace(weights.layers[0], ff=ff)
    with HiddenStates(path) as store:
        X = torch.from_numpy(store.hidden(0))
        mask = torch.from_numpy(store.attention_mask.astype(np.int64))
    with torch.no_grad():
        want = layer_forward(X, mask, layer)[mask.bool()]
        *_, last = factored_stages(LayerInput(X, mask, layer))
        got = last.total()[mask.bool()]
    assert ((got - want).norm(dim=-1) / want.norm(dim=-1)).max() < 1e-5


def test_mixing_ratio_known_answers():
    """Identity attention mixes nothing (0); uniform attention over n tokens gives (n-1)/n; a
    part only on the diagonal gives 0 for vectors, parts only off it give 1."""
    from attnscope.analyses.mixing.statistics import vector_mixing_ratio, weight_mixing_ratio

    n = 7
    eye = torch.eye(n).expand(2, n, n)
    assert torch.equal(weight_mixing_ratio(eye), torch.zeros(2, n))
    uniform = torch.full((2, n, n), 1 / n)
    assert torch.allclose(weight_mixing_ratio(uniform), torch.full((2, n), (n - 1) / n))
    diagonal = torch.zeros(1, n, n, 3)
    diagonal[0, range(n), range(n)] = torch.randn(n, 3)
    assert torch.equal(vector_mixing_ratio(diagonal), torch.zeros(1, n))
    off = torch.randn(1, n, n, 3)
    off[0, range(n), range(n)] = 0
    assert torch.allclose(vector_mixing_ratio(off), torch.ones(1, n))


def test_rsa_of_a_scope_with_itself_is_one():
    from attnscope.analyses.mixing.statistics import ScopeRSA

    torch.manual_seed(0)
    maps = torch.rand(3, 6, 6)
    rsa = ScopeRSA(("a", "b"), 1)
    rsa.add(0, {"a": maps, "b": maps.clone()}, torch.ones(3, 6, 6, dtype=torch.bool))
    table = rsa.table()
    assert np.allclose(table["spearman"], 1.0)


def test_rsa_refuses_a_nan_map_but_skips_a_constant_one():
    """Issue 35, item 2: a constant map's correlation is undefined (NaN) and left out of the
    mean, as documented; a NaN entry, whose ranks would be NaN too, raises instead."""
    from attnscope.analyses.mixing.statistics import ScopeRSA
    from attnscope.core.checks import NonFiniteError

    torch.manual_seed(0)
    maps = torch.rand(2, 5, 5)
    pairs = torch.ones(2, 5, 5, dtype=torch.bool)
    rsa = ScopeRSA(("a", "b"), 1)
    constant = maps.clone()
    constant[1] = 0.5
    rsa.add(0, {"a": maps, "b": constant}, pairs)
    assert rsa.count[0, 0] == 1  # the constant sequence is left out
    broken = maps.clone()
    broken[1, 2, 3] = float("nan")
    with pytest.raises(NonFiniteError, match="b maps ranked for the RSA: 1 of 50 values"):
        rsa.add(0, {"a": maps, "b": broken}, pairs)


def run_corpus(tmp_path, architecture):
    import h5py

    from attnscope.analyses.mixing.corpus_pass import corpus_pass
    from attnscope.analyses.mixing.settings import MixingSettings
    from attnscope.core.store import atomic_h5

    path, model = write_tiny_store(tmp_path, architecture)
    weights = canonical_weights(model)
    maps_path = tmp_path / "maps.h5"
    with HiddenStates(path) as store, atomic_h5(maps_path) as maps:
        result = corpus_pass(
            store,
            as_loaded(model, weights),
            maps,
            MixingSettings(batch_size=3, ig_steps=0, max_rel_residual=1e-4, maps_dtype="float32"),
        )
    return path, model, h5py.File(maps_path, "r"), result


def test_corpus_tables_against_independent_recomputation(tmp_path, architecture):
    """maps.h5, mixing_ratio, rsa and ff_pairs (read back from maps.h5) against numpy/scipy
    recomputations from the `transformers` attention weights, the norms family's head-summed
    maps and maps.h5."""
    from scipy.stats import spearmanr

    from attnscope.analyses.mixing.tables import example_maps_table, ff_pairs_table
    from attnscope.core.attention import value_vectors
    from attnscope.maps.head_norms import head_summed_norms
    from attnscope.maps.layer_decomposition import SCOPES

    path, model, maps, result = run_corpus(tmp_path, architecture)
    with HiddenStates(path) as store:
        ids = torch.from_numpy(store.input_ids.astype(np.int64))
        mask_np = store.attention_mask.astype(bool)
        mask = torch.from_numpy(mask_np.astype(np.int64))
        N, L = store.n_sequences, store.length
        X = [torch.from_numpy(store.hidden(l)) for l in range(model.config.num_hidden_layers)]
        input_ids = store.input_ids
        types = torch.from_numpy(store.token_type_ids.astype(np.int64))
    assert sorted(maps.attrs["scopes"]) == sorted(SCOPES)
    inputs = architectures.architecture(model.config.model_type).model_inputs(
        model, ids, mask, types
    )
    with torch.no_grad():
        attentions = model(**inputs, output_attentions=True).attentions
    weights = canonical_weights(model)
    ratios = result.ratios.table().set_index(["scope", "layer"])
    for l, alpha in enumerate(attentions):
        attn_w = alpha.mean(1).numpy()
        visible = mask_np[:, :, None] & mask_np[:, None, :]
        if weights.causal:
            visible &= np.tril(np.ones((L, L), dtype=bool))
        window = weights.layers[l].sliding_window
        if window is not None:
            visible &= np.triu(np.ones((L, L), dtype=bool), 1 - window)
        for scope in SCOPES:
            assert maps[f"{scope}/{l + 1}"].shape == (N, L, L)
            assert np.all(maps[f"{scope}/{l + 1}"][()][~visible] == 0)
        assert np.allclose(maps[f"Attn-w/{l + 1}"][()], attn_w * visible, atol=1e-6)
        own = np.einsum("bii->bi", attn_w)[mask_np]
        assert ratios.loc[("Attn-w", str(l + 1)), "mean"] == pytest.approx((1 - own).mean())
        assert ratios.loc[("AttnRes-w", str(l + 1)), "mean"] == pytest.approx(
            (1 - (own + 1) / 2).mean()
        )
        with torch.no_grad():
            layer = weights.layers[l]
            fx = value_vectors(X[l], layer)
            expected = head_summed_norms(alpha, fx).numpy() * visible
            post = layer.post_attn  # Gemma-2: the Attn stage is the block's normed output
            if post is not None:
                parts = torch.einsum("bhij,bhjd->bijd", alpha, fx)
                s = post.scale(parts.sum(2) + layer.b_O)[:, :, None]
                expected = (post.gamma * post.centre(parts) / s).norm(dim=-1).numpy() * visible
        assert np.allclose(maps[f"Attn/{l + 1}"][()], expected, atol=1e-5)
        rsa = result.rsa.table().set_index(["layer", "scope_a", "scope_b"])["spearman"]
        before, after = maps[f"AttnResLn/{l + 1}"][()], maps[f"AttnResLnFf/{l + 1}"][()]
        rhos = [spearmanr(before[b][visible[b]], after[b][visible[b]])[0] for b in range(N)]
        assert rsa[(str(l + 1), "AttnResLn", "AttnResLnFf")] == pytest.approx(np.mean(rhos))
        with np.errstate(invalid="ignore"):  # padding rows: 0 / 0, never visible
            change = after / after.sum(-1, keepdims=True) - before / before.sum(-1, keepdims=True)
        pairs: dict = {}
        for b, i, j in zip(*np.nonzero(visible), strict=True):
            if i != j:
                key = (f"t{input_ids[b, j]}", f"t{input_ids[b, i]}")
                pairs.setdefault(key, []).append(change[b, i, j])
        table = ff_pairs_table(maps, input_ids, mask_np.astype(np.int8), 3, 3, lambda t: f"t{t}")
        for row in table[table["layer"] == l + 1].itertuples():
            values = pairs[(row.key_token, row.query_token)]
            assert row.count == len(values) >= 2
            assert row.mean_change == pytest.approx(np.mean(values), abs=1e-6)
        top = max(np.mean(v) for v in pairs.values() if len(v) >= 2)
        amplified = table[(table["layer"] == l + 1) & (table["change"] == "amplified")]
        assert amplified["mean_change"].iloc[0] == pytest.approx(top, abs=1e-6)
    check = result.check
    assert set(check["stage"]) == {*SCOPES[1:2], *SCOPES[3:], "FfCompleteness"}
    assert (check["max_rel"] < 1e-5).all()
    example = example_maps_table(maps, input_ids, mask_np, 1, 5, lambda t: f"t{t}")
    assert len(example) == len(SCOPES) * len(attentions) * 25
    for row in example.sample(20, random_state=0).itertuples():
        stored = maps[f"{row.scope}/{row.layer}"][1, row.query - 1, row.key - 1]
        assert row.value == stored and row.query_token == f"t{input_ids[1, row.query - 1]}"
    with pytest.raises(ValueError, match="example_sequence 9"):
        example_maps_table(maps, input_ids, mask_np, 9, 5, str)


def test_run_fails_when_the_ff_split_is_incomplete(tmp_path):
    """A coarse m-step IG misses g(U) by more than the bound: the run stops naming the stage,
    and the maps file is not left under its final name."""
    from attnscope.analyses.mixing.corpus_pass import corpus_pass
    from attnscope.analyses.mixing.settings import MixingSettings
    from attnscope.core.checks import CheckError
    from attnscope.core.store import atomic_h5

    path, model = write_tiny_store(tmp_path, "bert")
    maps_path = tmp_path / "maps.h5"
    with pytest.raises(CheckError, match="AttnResLnFf"):
        with HiddenStates(path) as store, atomic_h5(maps_path) as maps:
            corpus_pass(
                store,
                as_loaded(model, canonical_weights(model)),
                maps,
                MixingSettings(
                    batch_size=3, ig_steps=1, max_rel_residual=1e-4, maps_dtype="float32"
                ),
            )
    assert not maps_path.exists()


def test_ff_pairs_figure_lists_every_pair_of_its_table_under_its_layer():
    """The FF pairs figure is text: each change's column names every layer, and under it
    each (key -> query) pair of the table with its mean change and count, in rank order."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from attnscope.analyses.mixing.plots import ff_pairs

    rows = [
        (layer, change, rank, f"k{layer}{rank}", f"q{layer}{rank}", sign * 0.01 * rank, rank + 1)
        for layer in (1, 2)
        for change, sign in (("amplified", 1), ("suppressed", -1))
        for rank in (1, 2)
        if (layer, change) != (2, "suppressed")
    ]
    columns = ["layer", "change", "rank", "key_token", "query_token", "mean_change", "count"]
    fig = ff_pairs(pd.DataFrame(rows, columns=columns), title="t")
    texts = {ax.get_title(): ax.texts[0].get_text().splitlines() for ax in fig.axes}
    assert set(texts) == {"amplified", "suppressed"}
    amplified = texts["amplified"]
    assert amplified.index("layer 1") < amplified.index("layer 2")
    for layer in (1, 2):
        pairs = [line.split() for line in amplified if line.startswith(f"  k{layer}")]
        assert pairs == [
            [f"k{layer}{r}", "->", f"q{layer}{r}", f"+{0.01 * r:.4f}", str(r + 1)] for r in (1, 2)
        ]
    assert "layer 2: no pair seen twice" in texts["suppressed"]
    plt.close(fig)


def test_scope_maps_figure_shows_each_map_row_normalised_in_its_own_tile():
    """One image per layer; scope c's tile (columns c (n + 1) .. + n, blank columns between)
    is its map with each query row summed to 1, shaded from 0 to its own largest entry."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from attnscope.analyses.mixing.plots import scope_maps

    n, rng = 3, np.random.default_rng(0)
    maps = {(layer, scope): rng.random((n, n)) for layer in (1, 2) for scope in ("Attn", "AttnRes")}
    rows = [
        (scope, layer, i + 1, j + 1, f"t{i}", f"t{j}", m[i, j])
        for (layer, scope), m in maps.items()
        for i in range(n)
        for j in range(n)
    ]
    columns = ["scope", "layer", "query", "key", "query_token", "key_token", "value"]
    fig = scope_maps(pd.DataFrame(rows, columns=columns), title="t")
    assert len(fig.axes) == 2
    for ax, layer in zip(fig.axes, (1, 2), strict=True):
        image = ax.get_images()[0].get_array()
        assert image.shape == (n, 2 * n + 1) and image.mask[:, n].all()
        for c, scope in enumerate(("Attn", "AttnRes")):
            m = maps[layer, scope] / maps[layer, scope].sum(1, keepdims=True)
            np.testing.assert_allclose(image[:, c * (n + 1) : c * (n + 1) + n], m / m.max())
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["Attn", "AttnRes"]
    assert [t.get_text() for t in fig.axes[-1].get_yticklabels()] == ["t0", "t1", "t2"]
    plt.close(fig)
