"""Norm-based analysis (Kobayashi et al. 2020): decomposition, singular values, statistics."""

from __future__ import annotations

import dataclasses

import h5py
import numpy as np
import pandas as pd
import pytest
import torch
from scipy.stats import rankdata, spearmanr

from attnscope import architectures
from attnscope.analyses.norms.affine import affine_singular_value_table
from attnscope.analyses.norms.corpus_pass import corpus_pass
from attnscope.analyses.norms.massive_activations import MassiveActivations
from attnscope.analyses.norms.outputs import FAMILY as NORMS
from attnscope.analyses.norms.settings import NormsSettings
from attnscope.analyses.norms.sinks import SinkStatistics
from attnscope.analyses.norms.statistics import NormsAccumulator, spearman
from attnscope.architectures import base_model, canonical_weights
from attnscope.core.attention import (
    attention_output,
    attention_probs,
    head_outputs,
    head_values,
    value_vectors,
)
from attnscope.core.checks import CheckError, NonFiniteError, ResidualLog
from attnscope.core.checks import residual as residual_of
from attnscope.core.store import HiddenStates, atomic_h5
from attnscope.core.streaming import BottomKSample, Moments
from attnscope.core.tokens import CATEGORY_NAMES, CLS, OTHER, PUNCT, SEP
from attnscope.maps.head_norms import head_summed_norms
from attnscope.maps.storage import map_bytes, read_map
from attnscope.model.loaded import as_loaded
from conftest import tiny_batch, tiny_model, write_tiny_store


def run_model(model, ids, mask, token_types=None):
    """Hidden states (inputs of every layer) and attention maps from `transformers` itself."""
    inputs = {"input_ids": ids, "attention_mask": mask}
    if token_types is not None and model.config.model_type in ("bert", "roberta", "electra"):
        inputs["token_type_ids"] = token_types
    with torch.no_grad():
        out = model(**inputs, output_hidden_states=True, output_attentions=True)
    return out.hidden_states, out.attentions


def module_values(model, layer: int, X: torch.Tensor) -> torch.Tensor:
    """f^h(x_j) [B, H, n, d] straight from the module weights (nn.Linear or Conv1D); a
    grouped-query decoder's value heads repeated for the query heads that share them."""
    core, H = base_model(model), model.config.num_attention_heads
    if hasattr(core, "layers"):  # the rotary decoders (Llama anatomy)
        block = core.layers[layer]
        v = block.self_attn.v_proj(block.input_layernorm(X))
        W_O = block.self_attn.o_proj.weight.T  # [H*d', d]
        B, n, _ = v.shape
        v = v.reshape(B, n, model.config.num_key_value_heads, -1).permute(0, 2, 1, 3)
        v = v.repeat_interleave(H // v.shape[1], dim=1)
        return torch.einsum("bhne,hed->bhnd", v, W_O.reshape(H, -1, W_O.shape[-1]))
    if model.config.model_type == "gpt2":
        block = core.h[layer]
        d = X.shape[-1]
        x = block.ln_1(X)
        v = x @ block.attn.c_attn.weight[:, 2 * d :] + block.attn.c_attn.bias[2 * d :]
        W_O = block.attn.c_proj.weight  # [H*d', d]
    else:
        attention = core.encoder.layer[layer].attention
        v = attention.self.value(X)
        W_O = attention.output.dense.weight.T
    B, n, _ = v.shape
    v = v.reshape(B, n, H, -1).permute(0, 2, 1, 3)  # [B, H, n, d']
    return torch.einsum("bhne,hed->bhnd", v, W_O.reshape(H, -1, W_O.shape[-1]))


def test_decomposition_rebuilds_module_output(classic_architecture):
    """sum_h sum_j alpha f(x_j) + b_O equals the module's output, and that output (the
    independent route of the run-time check) rebuilds the model's own next hidden state.
    Each head's output from its values, (sum_j alpha_ij v_j) W_O^h (the norms pass's), equals
    sum_j alpha_ij f^h(x_j) summed in float64, and its sum over heads plus b_O that output."""
    architecture = classic_architecture
    model = tiny_model(architecture)
    weights = canonical_weights(model)
    ids, mask = tiny_batch(architecture)
    hidden, _ = run_model(model, ids, mask)
    real = mask.bool()
    for l, layer in enumerate(weights.layers):
        X = hidden[l]
        alpha = attention_probs(X, mask, layer)
        y = attention_output(alpha, value_vectors(X, layer), layer)
        y_real = architectures.architecture(architecture).attention_output(model, l, X, mask)
        torch.testing.assert_close(y[real], y_real[real], rtol=1e-5, atol=1e-6)
        z = head_outputs(alpha, head_values(X, layer), layer)  # [B, H, n, d]
        direct = alpha.double() @ value_vectors(X, layer).double()
        torch.testing.assert_close(z.double(), direct, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close((z.sum(1) + layer.b_O)[real], y_real[real], rtol=1e-5, atol=1e-6)
        core = base_model(model)
        with torch.no_grad():
            if architecture == "gpt2":
                block = core.h[l]
                h = X + y_real
                after = h + block.mlp(block.ln_2(h))
            else:
                module = core.encoder.layer[l]
                h = module.attention.output.LayerNorm(y_real + X)
                after = module.output(module.intermediate(h), h)
        if l + 1 < weights.n_layers or architecture != "gpt2":  # GPT-2's last state is after ln_f
            torch.testing.assert_close(after[real], hidden[l + 1][real], rtol=1e-5, atol=1e-5)


def test_analysis_fails_when_decomposition_breaks(tmp_path):
    store_path, model = write_tiny_store(tmp_path, "bert")
    weights = canonical_weights(model)
    broken = dataclasses.replace(weights.layers[1], b_O=weights.layers[1].b_O + 1.0)
    weights = dataclasses.replace(weights, layers=[weights.layers[0], broken])
    with HiddenStates(store_path) as store, pytest.raises(CheckError, match="layer 2"):
        with atomic_h5(tmp_path / "maps.h5") as maps:
            corpus_pass(
                store,
                as_loaded(model, weights),
                maps,
                NormsSettings(batch_size=3, spearman_sample_size=10, seed=0, max_rel_residual=1e-4),
            )
    assert not (tmp_path / "maps.h5").exists()


def assert_top_k_of(whole: np.ndarray, keys: np.ndarray, values: np.ndarray, rebuilt) -> None:
    """keys, values [N, L, k] are each row's k largest entries of the whole maps [N, L, L],
    largest first; `rebuilt` [N, L, L] keeps exactly those entries and 0 elsewhere."""
    k = keys.shape[-1]
    np.testing.assert_array_equal(values, -np.sort(-whole, axis=-1)[..., :k])
    np.testing.assert_array_equal(np.take_along_axis(whole, keys.astype(np.int64), -1), values)
    kept = np.zeros(whole.shape, bool)
    np.put_along_axis(kept, keys.astype(np.int64), True, -1)
    np.testing.assert_array_equal(rebuilt, np.where(kept, whole, 0))


@pytest.mark.parametrize("architecture", ["bert", "gpt2"])
def test_top_k_maps_are_the_whole_maps_top_k(tmp_path, architecture):
    """With `maps_top_k` 5 each layer's map is stored as each query row's 5 largest entries
    (keys and values, largest first) of the whole map the default stores, and `read_map`
    gives the whole map with every other entry 0 (a 16-piece store in batches of 3: rows
    shorter than their batch and padding rows included)."""
    store_path, model = write_tiny_store(tmp_path, architecture)
    weights = canonical_weights(model)
    for k in (0, 5):
        with HiddenStates(store_path) as store, atomic_h5(tmp_path / f"maps{k}.h5") as maps:
            corpus_pass(
                store,
                as_loaded(model, weights),
                maps,
                NormsSettings(
                    batch_size=3,
                    spearman_sample_size=10,
                    seed=0,
                    max_rel_residual=1e-4,
                    maps_top_k=k,
                ),
            )
    with h5py.File(tmp_path / "maps0.h5") as whole, h5py.File(tmp_path / "maps5.h5") as top:
        for l in range(1, weights.n_layers + 1):
            dense = whole[f"maps/{l}"][()]
            N, L, _ = dense.shape
            keys, values = top[f"maps/{l}/key"][()], top[f"maps/{l}/value"][()]
            assert keys.shape == values.shape == (N, L, 5) and keys.dtype == np.uint16
            assert_top_k_of(dense, keys, values, read_map(top, f"maps/{l}", 0, N, L))
            assert keys.nbytes + values.nbytes == map_bytes(N, L, "float32", 5)  # the estimate
            assert dense.nbytes == map_bytes(N, L, "float32")
            np.testing.assert_array_equal(read_map(whole, f"maps/{l}", 0, N, L), dense)


@pytest.mark.parametrize("architecture", ["bert", "gpt2"])
def test_singular_values_match_dense_svd(architecture):
    """The QR route gives the top d'+1 singular values of the dense augmented product."""
    model = tiny_model(architecture)
    table = affine_singular_value_table(canonical_weights(model))
    H, d = model.config.num_attention_heads, model.config.hidden_size
    dh = d // H
    core = base_model(model)
    for l in range(model.config.num_hidden_layers):
        if architecture == "gpt2":
            attn = core.h[l].attn
            W_V, b_V = attn.c_attn.weight[:, 2 * d :], attn.c_attn.bias[2 * d :]
            W_O = attn.c_proj.weight
        else:
            attention = core.encoder.layer[l].attention
            W_V, b_V = attention.self.value.weight.T, attention.self.value.bias
            W_O = attention.output.dense.weight.T
        W_V, b_V, W_O = (t.detach().double().numpy() for t in (W_V, b_V, W_O))
        for h in range(H):
            cols = slice(h * dh, (h + 1) * dh)
            wv = np.block([[W_V[:, cols], np.zeros((d, 1))], [b_V[None, cols], np.ones((1, 1))]])
            wo = np.block([[W_O[cols], np.zeros((dh, 1))], [np.zeros((1, d)), np.ones((1, 1))]])
            dense = np.linalg.svd(wv @ wo, compute_uv=False)
            rows = table[(table["layer"] == l + 1) & (table["head"] == h + 1)]
            assert rows["index"].tolist() == list(range(1, dh + 2))
            np.testing.assert_allclose(rows["singular_value"], dense[: dh + 1], rtol=1e-10)
            assert np.all(dense[dh + 1 :] < 1e-12 * dense[0])


def test_head_summed_norms_equal_direct():
    g = torch.Generator().manual_seed(0)
    alpha = torch.softmax(torch.randn(2, 3, 5, 5, generator=g), -1)
    fx = torch.randn(2, 3, 5, 7, generator=g)
    direct = (alpha[..., None] * fx[:, :, None]).sum(1).norm(dim=-1)  # [B, H, n, n, d] route
    torch.testing.assert_close(head_summed_norms(alpha, fx), direct, rtol=1e-5, atol=1e-6)
    # issue 37: in query chunks (a budget of 2 rows of 3 float64 [B, H, n] slices: 5 = 2+2+1)
    whole = head_summed_norms(alpha, fx)
    two_rows = 2 * 3 * 8 * 2 * 3 * 5 / 2**20
    for budget in (two_rows, 1e-9):
        chunked = head_summed_norms(alpha, fx, memory_budget_mb=budget)
        torch.testing.assert_close(chunked, whole, rtol=1e-6, atol=0)


def test_moments_equal_numpy():
    g = torch.Generator().manual_seed(0)
    values = torch.randn(3, 1000, generator=g, dtype=torch.float64) * 2 + 5
    moments = Moments((2, 3))
    for chunk in values.split(137, dim=1):
        moments.add(1, chunk)
    table = moments.frame(("layer", "head"))
    row = table[table["layer"] == 2]
    v = values.numpy()
    np.testing.assert_allclose(row["mean"], v.mean(1))
    np.testing.assert_allclose(row["sd"], v.std(1))
    np.testing.assert_allclose(row["cv"], v.std(1) / v.mean(1))
    np.testing.assert_array_equal(row["max"], v.max(1))
    np.testing.assert_array_equal(row["min"], v.min(1))
    assert table[table["layer"] == 1]["mean"].isna().all()  # empty slots stay undefined
    pooled = moments.pooled().frame()
    np.testing.assert_allclose(pooled[["mean", "sd"]].iloc[0], [v.mean(), v.std()])


def test_bottom_k_sample_keeps_smallest_keys():
    g = torch.Generator().manual_seed(0)
    keys = torch.rand(500, generator=g, dtype=torch.float64)
    rows = torch.arange(500, dtype=torch.float64)[:, None]
    sample = BottomKSample(size=50, n_fields=1)
    for k, r in zip(keys.split(64), rows.split(64), strict=True):
        sample.offer(k[k < sample.threshold()], r[k < sample.threshold()], seen=len(k))
    sample.compact()
    assert sample.seen == 500
    assert set(sample.rows[:, 0].tolist()) == set(torch.argsort(keys)[:50].tolist())
    p = float(torch.sort(keys).values[20])  # 20 keys lie below p
    assert sorted(sample.below(p, 50)[:, 0].tolist()) == sorted(torch.argsort(keys)[:20].tolist())
    assert len(sample.below(p, 5)) == 5


SAMPLE_PEAK = """
import sys, torch
from attnscope.core.streaming import BottomKSample
from attnscope.model import allocator
allocator.keep_freed_memory()  # the allocator settings of a layer-streamed norms job
allocator.release_freed_memory()
def peak():
    return int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0]) * 1024
size, batches = int(sys.argv[1]), int(sys.argv[2])
g = torch.Generator().manual_seed(0)
sample = BottomKSample(size, 4)
start = peak()
for _ in range(batches):  # one layer's pairs a batch, filtered by the threshold as in the norms
    keys = torch.rand(size // 4, generator=g, dtype=torch.float64)
    keys = keys[keys < sample.threshold()]
    sample.offer(keys, torch.rand(len(keys), 4, generator=g), size // 4)
sample.compact()
print(peak() - start)
"""


def test_bottom_k_sample_memory_does_not_grow_with_the_stream():
    """The norms' Spearman sample: a stream 8 times longer (32 layers' pairs against 4, which
    just fill it) takes less than one sample size more memory. A sample rebuilt by
    concatenation at each cut took 5 times its own size (about 3 sample sizes more)."""
    import subprocess
    import sys
    from pathlib import Path

    size = 1_000_000
    sample_bytes = size * 5 * 8  # 4 float64 fields and a float64 key a row
    scripts = str(Path(__file__).resolve().parents[1] / "scripts")

    def peak(batches: int) -> int:
        command = [sys.executable, "-c", SAMPLE_PEAK, str(size), str(batches)]
        done = subprocess.run(
            command, capture_output=True, text=True, check=True, env={"PYTHONPATH": scripts}
        )
        return int(done.stdout.split()[-1])

    short, long = peak(4), peak(32)
    assert long < short + sample_bytes, (short / 2**20, long / 2**20)


def one_layer_batch(alpha, fx_norm_per_key, category):
    """||f(x_j)|| [1, H, n] of the given norms per key."""
    H, n = alpha.shape[1], alpha.shape[2]
    fx_norm = torch.zeros(1, H, n)
    fx_norm[0] = torch.as_tensor(fx_norm_per_key, dtype=torch.float32)
    return dict(
        x=torch.ones(1, n, 4),
        alpha=alpha,
        fx_norm=fx_norm,
        mask=torch.ones(1, n),
        category=np.array([category]),
        causal=False,
    )


def test_constant_fx_norm_gives_cv_zero_and_same_orderings():
    """||f(x)|| = 2 everywhere: cv 0, and alpha and alpha ||f(x)|| rank pairs alike."""
    n, H = 6, 2
    alpha = torch.softmax(torch.randn(1, H, n, n, generator=torch.Generator().manual_seed(3)), -1)
    acc = NormsAccumulator(n_layers=1, n_heads=H, sample_size=1000, seed=0)
    category = [CLS, OTHER, OTHER, PUNCT, OTHER, SEP]
    acc.add_batch(0, **one_layer_batch(alpha, torch.full((n,), 2.0), category))
    tables = acc.tables(sample_rate=1.0, scatter_points=1000)
    assert (tables["fx_dispersion"]["cv"] == 0).all()
    assert (tables["fx_summary"]["cv"] == 0).all()
    sample = tables["alpha_fx_sample"]
    assert len(sample) == H * n * n
    assert (sample["fx_norm"] == 2).all()
    np.testing.assert_array_equal(
        rankdata(sample["alpha"]), rankdata(sample["alpha"] * sample["fx_norm"])
    )
    classes = tables["token_class_layer"]
    np.testing.assert_allclose(classes["alpha_fx"], 2 * classes["alpha"], rtol=1e-6)
    np.testing.assert_allclose(classes["alpha"].sum(), 1, rtol=1e-6)


def test_spearman_of_inverse_relation_is_minus_one():
    """Every query gives key j the weight w_j, and ||f(x_j)|| = 1 / w_j: rho = -1."""
    n, H = 8, 3
    w = torch.softmax(torch.arange(n, dtype=torch.float32), 0)
    alpha = w.expand(1, H, n, n).clone()
    acc = NormsAccumulator(n_layers=1, n_heads=H, sample_size=10_000, seed=0)
    acc.add_batch(0, **one_layer_batch(alpha, 1 / w, [OTHER] * n))
    rho = acc.tables(sample_rate=1.0, scatter_points=10)["alpha_fx_spearman"]
    assert rho.set_index("category").loc["other", "spearman"] == pytest.approx(-1)
    assert rho.set_index("category").loc["other", "n_vectors"] == H * n * n
    rows = torch.stack([torch.ones(n), torch.ones(n), w, 1 / w], -1)
    assert spearman(rows) == pytest.approx(-1)


def test_decomposition_check_covers_every_batch(tmp_path):
    """decomposition_check holds, per layer, the largest residual over every batch (three
    here), in the columns every decomposing family writes (`checks.ResidualLog`)."""
    store_path, model = write_tiny_store(tmp_path, "bert", batch=5, length=14)
    weights = canonical_weights(model)
    module_output = architectures.architecture(model.config.model_type).attention_output
    with HiddenStates(store_path) as store, atomic_h5(tmp_path / "maps.h5") as maps:
        _, residual = corpus_pass(
            store,
            as_loaded(model, weights),
            maps,
            NormsSettings(batch_size=2, spearman_sample_size=10, seed=0, max_rel_residual=1e-4),
        )
        assert list(residual.columns) == ResidualLog.COLUMNS
        assert residual["layer"].tolist() == [1, 2] and set(residual["stage"]) == {"Attn"}
        for l, layer in enumerate(weights.layers):
            per_batch = []
            for batch in store.batches(l, 2, "cpu"):
                alpha = attention_probs(batch.X, batch.mask, layer)
                z = head_outputs(alpha, head_values(batch.X, layer), layer)  # as the pass sums them
                y = z.sum(1) + layer.b_O
                y_real = module_output(model, l, batch.X, batch.mask)
                per_batch.append(residual_of(y, y_real, batch.mask))
            assert len(per_batch) == 3
            row = residual.iloc[l]
            assert (row["max_abs"], row["max_rel"]) == tuple(map(max, zip(*per_batch, strict=True)))


@pytest.mark.parametrize("architecture", ["bert", "gpt2"])
def test_tables_match_transformers(tmp_path, architecture):
    """Every table and the maps, recomputed in numpy from `transformers` output_attentions,
    hidden states and value weights over the whole tiny corpus (Spearman exact here)."""
    store_path, model = write_tiny_store(tmp_path, architecture, batch=5, length=14)
    with HiddenStates(store_path) as store, atomic_h5(tmp_path / "maps.h5") as maps:
        ids = torch.from_numpy(store.input_ids).long()
        mask = torch.from_numpy(store.attention_mask).long()
        types = torch.from_numpy(store.token_type_ids).long()
        categories, lengths = store.category, store.lengths
        acc, residual = corpus_pass(
            store,
            as_loaded(model, canonical_weights(model)),
            maps,
            NormsSettings(batch_size=2, spearman_sample_size=10**6, seed=0, max_rel_residual=1e-4),
        )
    tables = acc.tables(sample_rate=0.5, scatter_points=100)
    assert (residual["max_rel"] < 1e-5).all()

    hidden, attentions = run_model(model, ids, mask, types)
    L, H = len(attentions), model.config.num_attention_heads
    causal = architecture == "gpt2"
    x_norms, fx_norms = [[] for _ in range(L)], [[[] for _ in range(H)] for _ in range(L)]
    pairs = {c: [] for c in CATEGORY_NAMES}
    sep_alpha, classes = np.zeros((L, H)), np.zeros((L, 4, 2))
    with h5py.File(tmp_path / "maps.h5") as f:
        maps = {l: f[f"maps/{l}"][()] for l in range(1, L + 1)}
    for l in range(L):
        X = hidden[l]
        x = base_model(model).h[l].ln_1(X) if causal else X
        with torch.no_grad():
            fx = module_values(model, l, X).numpy()
        alpha_all, x = attentions[l].numpy(), x.detach().numpy()
        for s, n in enumerate(lengths):
            a, f, cat = alpha_all[s, :, :n, :n], fx[s, :, :n], categories[s, :n]
            f_norm = np.linalg.norm(f, axis=-1)  # [H, n]
            x_norms[l] += list(np.linalg.norm(x[s, :n], axis=-1))
            for h in range(H):
                fx_norms[l][h] += list(f_norm[h])
            visible = np.tril(np.ones((n, n), bool)) if causal else np.ones((n, n), bool)
            for c in CATEGORY_NAMES:
                keep = visible & (cat == c)[None, :]
                for h in range(H):
                    f_pairs = np.broadcast_to(f_norm[h], (n, n))[keep]
                    pairs[c] += list(zip(a[h][keep], f_pairs, strict=True))
            sep_alpha[l] += a[:, :, cat == SEP].sum(-1).mean(-1)
            for k, c in enumerate((CLS, SEP, PUNCT, OTHER)):
                classes[l, k, 0] += a[:, :, cat == c].sum(-1).mean()
                classes[l, k, 1] += (a * f_norm[:, None, :])[:, :, cat == c].sum(-1).mean()
            direct = np.linalg.norm((a[..., None] * f[:, None]).sum(0), axis=-1) * visible
            np.testing.assert_allclose(maps[l + 1][s, :n, :n], direct, rtol=1e-4, atol=1e-7)
            assert not maps[l + 1][s, n:].any() and not maps[l + 1][s, :, n:].any()
    N = len(lengths)

    x_table = tables["x_dispersion"]
    np.testing.assert_allclose(x_table["mean"], [np.mean(v) for v in x_norms], rtol=1e-5)
    np.testing.assert_allclose(x_table["sd"], [np.std(v) for v in x_norms], rtol=1e-4)
    np.testing.assert_allclose(x_table["max"], [np.max(v) for v in x_norms], rtol=1e-5)
    fx_table = tables["fx_dispersion"]
    flat = [v for layer in fx_norms for v in layer]
    np.testing.assert_allclose(fx_table["mean"], [np.mean(v) for v in flat], rtol=1e-5)
    np.testing.assert_allclose(fx_table["sd"], [np.std(v) for v in flat], rtol=1e-4)
    np.testing.assert_allclose(fx_table["min"], [np.min(v) for v in flat], rtol=1e-5)
    everything = np.concatenate(flat)
    all_heads = tables["fx_summary"].set_index("row").loc["all"]
    np.testing.assert_allclose(
        all_heads[["mean", "sd"]].astype(float), [everything.mean(), everything.std()], rtol=1e-4
    )
    assert tables["fx_summary"].set_index("row").loc["max_cv", "cv"] == fx_table["cv"].max()

    rho = tables["alpha_fx_spearman"].set_index("category")
    for c, name in CATEGORY_NAMES.items():
        a, f = np.array(pairs[c]).T
        assert rho.loc[name, "n_vectors"] == rho.loc[name, "n_sampled"] == len(a)
        # Ranks are exact but ties are not: layer 1 gives equal ||f(x)|| to a piece at the same
        # position in two sequences; here one forward holds both, in the pass two batches of
        # other shapes, whose BLAS kernels may round one of them 1 ulp apart on some CPUs.
        assert rho.loc[name, "spearman"] == pytest.approx(spearmanr(a, f).statistic, abs=1e-3)
    sample = tables["alpha_fx_sample"]
    assert set(sample["category"]) <= set(CATEGORY_NAMES.values())
    assert sample.groupby("category").size().max() <= 100

    sep = tables["sep_heads"]
    np.testing.assert_allclose(sep["alpha_sep"], (sep_alpha / N).ravel(), rtol=1e-5)
    sep_norms = [
        np.concatenate(
            [
                module_values(model, l, hidden[l])[s, h, categories[s] == SEP]
                .norm(dim=-1)
                .detach()
                .numpy()
                for s in range(N)
            ]
        )
        for l in range(L)
        for h in range(H)
    ]
    np.testing.assert_allclose(sep["fx_sep"], [v.mean() for v in sep_norms], rtol=1e-5)
    expected = pd.DataFrame(classes.reshape(L * 4, 2) / N, columns=["alpha", "alpha_fx"])
    np.testing.assert_allclose(
        tables["token_class_layer"][["alpha", "alpha_fx"]], expected, rtol=1e-5
    )


def test_figures_draw_from_tables(tmp_path):
    """Every figure function runs on the tables of a tiny store (figures read tables only)."""
    from attnscope.analyses.norms import plots as norms_plots
    from attnscope.core.plotting import save_figure

    store_path, model = write_tiny_store(tmp_path, "gpt2")
    weights = canonical_weights(model)
    with HiddenStates(store_path) as store, atomic_h5(tmp_path / "maps.h5") as maps:
        acc, _ = corpus_pass(
            store,
            as_loaded(model, weights),
            maps,
            NormsSettings(batch_size=3, spearman_sample_size=100, seed=0, max_rel_residual=1e-4),
        )
    tables = acc.tables(sample_rate=0.5, scatter_points=50)
    tables["affine_singular_values"] = affine_singular_value_table(weights)
    arguments = {
        "affine_singular_values": {"affine_singular_values", "seed"},
        "alpha_fx_scatter": {"alpha_fx_sample", "alpha_fx_spearman"},
        "sep_heads": {"sep_heads"},
        "token_class_layer": {"token_class_layer"},
        "attention_sinks": {"attention_sinks"},
        "massive_activations": {"massive_activations"},
    }
    # the sink card's tables come from its own rule (tests/test_sink_card.py, the workflow)
    assert set(arguments) == {f.name for f in NORMS.figures} - {"sink_card"}
    figures = {
        name: getattr(norms_plots, name)(
            **{k: tables[k] for k in names if k in tables}, seed=1, title=name
        )
        if "seed" in names
        else getattr(norms_plots, name)(**{k: tables[k] for k in names}, title=name)
        for name, names in arguments.items()
    }
    for name, fig in figures.items():
        save_figure(fig, tmp_path / f"{name}.svg", tmp_path / f"{name}.png")
        assert (tmp_path / f"{name}.png").stat().st_size > 0
    chosen = norms_plots.heads_per_layer(affine_singular_value_table(weights), seed=1)
    assert chosen == norms_plots.heads_per_layer(affine_singular_value_table(weights), seed=1)
    assert sorted(chosen) == [1, 2] and all(1 <= h <= 4 for h in chosen.values())


def analyse_tiny_store(store_path, model, weights=None, max_rel_residual=1e-4):
    """The tables of `corpus_pass` over a tiny store (batches of 2, Spearman exact)."""
    with HiddenStates(store_path) as store, atomic_h5(store_path.with_suffix(".maps.h5")) as maps:
        acc, _ = corpus_pass(
            store,
            as_loaded(model, weights or canonical_weights(model)),
            maps,
            NormsSettings(
                batch_size=2, spearman_sample_size=10**6, seed=0, max_rel_residual=max_rel_residual
            ),
        )
    return acc.tables(sample_rate=0.5, scatter_points=10)


def counted_rows(n: int, layer) -> list[int]:
    """The query rows of a sequence of n real tokens that see position 0, query 0 left out
    for causal layers (the definition in analyses/norms/sinks.py, written out)."""
    window = layer.sliding_window or n
    return [i for i in range(n) if (i > 0 or not layer.causal) and (i < window or not layer.causal)]


def test_sinks_and_massive_activations_match_transformers(tmp_path, architecture):
    """attention_sinks.tsv recomputed row by row in numpy from `transformers`' own attention
    weights and value/output projections; massive_activations.tsv from the stored states."""
    store_path, model = write_tiny_store(tmp_path, architecture, batch=5, length=14)
    weights = canonical_weights(model)
    tables = analyse_tiny_store(store_path, model, weights)
    with HiddenStates(store_path) as store:
        ids = torch.from_numpy(store.input_ids).long()
        mask = torch.from_numpy(store.attention_mask).long()
        types = torch.from_numpy(store.token_type_ids).long()
        states = [store.hidden(l) for l in range(store.n_layers + 1)]
        lengths = store.lengths
    hidden, attentions = run_model(model, ids, mask, types)
    L, H = weights.n_layers, weights.n_heads

    sinks = tables["attention_sinks"]
    assert len(sinks) == L * H and sinks[["layer", "head"]].min().tolist() == [1, 1]
    for l, layer in enumerate(weights.layers):
        with torch.no_grad():
            fx = module_values(model, l, hidden[l]).numpy()
        alpha = attentions[l].numpy()
        terms = {k: [[] for _ in range(H)] for k in ("alpha", "share", "ratio", "first", "other")}
        for s, n in enumerate(lengths):
            a, f = alpha[s, :, :n, :n], fx[s, :, :n]  # [H, n, n], [H, n, d]
            f_norm = np.linalg.norm(f, axis=-1)
            for h in range(H):
                terms["first"][h].append(f_norm[h, 0])
                terms["other"][h] += list(f_norm[h, 1:])
                for i in counted_rows(n, layer):
                    weighted = a[h, i, 0] * f_norm[h, 0]
                    terms["alpha"][h].append(a[h, i, 0])
                    terms["share"][h].append(weighted / (a[h, i] * f_norm[h]).sum())
                    output = np.linalg.norm(a[h, i] @ f[h])
                    terms["ratio"][h].append(weighted / output)
        rows = sinks[sinks["layer"] == l + 1]
        assert rows["n_rows"].tolist() == [len(v) for v in terms["alpha"]]
        for column, key in [
            ("alpha_first", "alpha"),
            ("norm_share", "share"),
            ("output_ratio", "ratio"),
            ("fx_first", "first"),
            ("fx_other", "other"),
        ]:
            expected = [np.mean(v) for v in terms[key]]
            np.testing.assert_allclose(rows[column], expected, rtol=2e-4, err_msg=column)
        np.testing.assert_allclose(rows["fx_ratio"], rows["fx_first"] / rows["fx_other"])
    assert sinks[["alpha_first", "norm_share"]].stack().between(0, 1).all()
    assert (sinks["output_ratio"] >= sinks["norm_share"] * (1 - 1e-5)).all()

    massive = tables["massive_activations"]
    assert massive["layer"].tolist() == list(range(L + 1))  # hidden/0 .. hidden/L
    for l, X in enumerate(states):
        tops = [np.abs(X[s, :n]).max(-1) for s, n in enumerate(lengths) if n > 1]
        dims = [int(np.abs(X[s, 0]).argmax()) for s, n in enumerate(lengths) if n > 1]
        first = np.array([t[0] for t in tops])
        other = np.array([np.median(t[1:]) for t in tops])
        row = massive.iloc[l]
        assert row["n_sequences"] == len(tops)
        np.testing.assert_allclose(
            row[["first_max", "other_median", "ratio", "ratio_max"]].astype(float),
            [first.mean(), other.mean(), (first / other).mean(), (first / other).max()],
            rtol=1e-6,
        )
        assert row["top_dim_share"] == max(dims.count(d) for d in dims) / len(dims)
        assert dims.count(row["top_dim"]) == max(dims.count(d) for d in dims)
        if weights.causal:  # the first position sees only itself: the same state everywhere
            assert row["top_dim_share"] == 1


@pytest.mark.parametrize("architecture", ["bert", "gpt2", "llama", "gemma2"])
def test_uniform_attention_on_equal_vectors_gives_known_shares(tmp_path, architecture):
    """W_Q = b_Q = 0 makes every score 0, so alpha is uniform over the keys a query sees;
    W_V = 0 makes f^h(x_j) = b_V W_O the same vector for every key. Then alpha_i0 = 1 / k_i
    (k_i keys seen: n for an encoder, i + 1 for a causal row) and norm_share = output_ratio =
    alpha_first, fx_ratio = 1. The module check is off: only the canonical weights change."""
    store_path, model = write_tiny_store(tmp_path, architecture, batch=5, length=14)
    weights = canonical_weights(model)
    g = torch.Generator().manual_seed(0)
    layers = [
        dataclasses.replace(
            layer,
            W_Q=torch.zeros_like(layer.W_Q),
            b_Q=torch.zeros_like(layer.b_Q),
            W_V=torch.zeros_like(layer.W_V),
            b_V=torch.randn(layer.b_V.shape, generator=g),
        )
        for layer in weights.layers
    ]
    weights = dataclasses.replace(weights, layers=layers)
    sinks = analyse_tiny_store(store_path, model, weights, max_rel_residual=float("inf"))[
        "attention_sinks"
    ]
    with HiddenStates(store_path) as store:
        lengths = store.lengths
    for l, layer in enumerate(weights.layers):
        alpha = [
            1 / (i + 1 if layer.causal else n) for n in lengths for i in counted_rows(n, layer)
        ]
        rows = sinks[sinks["layer"] == l + 1]
        assert (rows["n_rows"] == len(alpha)).all()
        for column in ("alpha_first", "norm_share", "output_ratio"):
            np.testing.assert_allclose(rows[column], np.mean(alpha), rtol=1e-5, err_msg=column)
        np.testing.assert_allclose(rows["fx_ratio"], 1, rtol=1e-5)
    if architecture == "gemma2":  # layer 1 slides (window 4): rows 1..3 of every sequence count
        assert (sinks[sinks["layer"] == 1]["n_rows"] == 3 * len(lengths)).all()


def test_sink_shares_known_answers():
    """Head 1 attends only to position 0: every share is 1. Head 2 splits each row evenly
    between keys 0 and 1, whose vectors are orthogonal with norms 3 and 4: alpha_first 1/2,
    norm_share 3 / (3 + 4), output_ratio 3 / 5 (= 1.5 / ||(1.5, 2)||)."""
    n, d = 4, 5
    alpha = torch.zeros(1, 2, n, n)
    alpha[0, 0, :, 0] = 1
    alpha[0, 1, :, :2] = 0.5
    fx = torch.zeros(1, 2, n, d)
    fx[0, :, 0, 0], fx[0, :, 1, 1], fx[0, :, 2, 2], fx[0, :, 3, 3] = 3, 4, 4, 4
    mask = torch.ones(1, n)
    sinks = SinkStatistics(n_layers=1, n_heads=2)
    z = torch.einsum("bhij,bhjd->bhid", alpha, fx)  # each head's output
    sinks.add_batch(0, alpha, fx.norm(dim=-1), z, mask, rows=mask.bool())
    table = sinks.table().set_index("head")
    np.testing.assert_allclose(table.loc[1, ["alpha_first", "norm_share", "output_ratio"]], 1)
    np.testing.assert_allclose(
        table.loc[2, ["alpha_first", "norm_share", "output_ratio"]].astype(float),
        [0.5, 3 / 7, 3 / 5],
        rtol=1e-6,
    )
    assert table["n_rows"].tolist() == [n, n]
    np.testing.assert_allclose(table["fx_ratio"], 3 / 4, rtol=1e-6)


def test_massive_activation_known_answer():
    """A first position with one feature of 1000 among positions whose largest |x| is j + 1:
    per sequence ratio 1000 / median(2..n); padding (huge here) and one-token sequences do
    not count."""
    B, n, d = 3, 5, 8
    X = torch.zeros(B, n, d)
    for j in range(1, n):
        X[:, j, j % d] = -(j + 1)
    X[:, 0, 6] = 1000.0
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])
    X[mask == 0] = 1e6
    massive = MassiveActivations(n_states=2)
    massive.add_batch(1, X, mask)
    table = massive.table()
    assert table["layer"].tolist() == [0, 1] and table["n_sequences"].tolist() == [0, 2]
    row = table.iloc[1]
    ratios = [1000 / 3.5, 1000 / 2.5]  # medians of {2, 3, 4, 5} and {2, 3}
    np.testing.assert_allclose(
        row[["first_max", "other_median", "ratio", "ratio_max"]].astype(float),
        [1000, 3, np.mean(ratios), max(ratios)],
    )
    assert row["top_dim"] == 6 and row["top_dim_share"] == 1
    assert table.iloc[0][["first_max", "ratio"]].isna().all() and table.iloc[0]["top_dim"] == -1


def test_massive_activations_refuse_an_inf_state_rather_than_leave_it_out():
    """Issue 35, item 2: padding is left out of the median through NaN (nanmedian), so an
    inf at a real position must raise, not vanish with it; padding may hold anything."""
    X = torch.ones(2, 4, 3)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    X[1, 3] = float("inf")  # padding: fine
    MassiveActivations(n_states=1).add_batch(0, X, mask)
    X[0, 2, 1] = float("inf")
    with pytest.raises(NonFiniteError, match="massive activations.*1 of 6 values"):
        MassiveActivations(n_states=1).add_batch(0, X, mask)


@pytest.mark.parametrize("n_states", [31, 5])
def test_massive_activation_figure_layer_labels_stay_readable(n_states):
    """31 hidden states (a 30-layer model): at most 16 layer labels per axis, 0 and 30 among
    them, none overlapping the next once drawn; 5 states: every one labelled."""
    from attnscope.analyses.norms.plots import massive_activations
    from attnscope.core.plotting import MAX_LAYER_LABELS

    X = torch.randn(2, 6, 8)
    X[:, 0, 3] = 500.0
    massive = MassiveActivations(n_states=n_states)
    for state in range(n_states):
        massive.add_batch(state, X, torch.ones(2, 6, dtype=torch.long))
    fig = massive_activations(massive.table(), "tiny")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        low, high = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if low <= t <= high]
        labels = [
            t for t in ax.get_xticklabels() if t.get_text() and low <= t.get_position()[0] <= high
        ]
        if n_states > MAX_LAYER_LABELS:
            assert len(ticks) <= MAX_LAYER_LABELS and {0, n_states - 1} <= set(ticks)
            boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.x0)
            assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:], strict=False))
        else:
            assert ticks == list(range(n_states))
    import matplotlib.pyplot as plt

    plt.close(fig)


def drawn_labels(fig, ax, axis: str = "y") -> list:
    """The non-empty tick labels of `axis` inside the axes' limits, once the figure is drawn."""
    fig.canvas.draw()
    low, high = sorted(ax.get_ylim() if axis == "y" else ax.get_xlim())
    labels = ax.get_yticklabels() if axis == "y" else ax.get_xticklabels()
    at = 1 if axis == "y" else 0
    return [t for t in labels if t.get_text() and low <= t.get_position()[at] <= high]


@pytest.mark.parametrize("n_layers", [6, 18, 30, 64])
def test_attention_sinks_layer_labels_never_run_together(n_layers):
    """Gemma-3 issue: at 18 layers the heatmaps' upright layer labels touched ("1011"). Now
    every label is a row's own layer, horizontal, at most 16 per panel (every layer up to
    16), and once drawn each label clears the next by at least 2 points."""
    import matplotlib.pyplot as plt

    from attnscope.analyses.norms.plots import attention_sinks
    from attnscope.core.plotting import MAX_LAYER_LABELS

    rng, n = np.random.default_rng(0), n_layers * 4
    layer, head = np.divmod(np.arange(n), 4)
    table = pd.DataFrame({"layer": layer + 1, "head": head + 1, "alpha_first": rng.random(n)})
    table = table.assign(norm_share=rng.random(n), fx_ratio=0.5 + rng.random(n))
    fig = attention_sinks(table, "tiny")
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes[:3]:
        labels = drawn_labels(fig, ax)
        shown = [int(t.get_text()) for t in labels]
        rows_at = [int(t.get_position()[1]) + 1 for t in labels]  # row r's centre is r + 0.5
        assert shown == rows_at and shown[0] == 1 and len(shown) <= MAX_LAYER_LABELS
        assert len(set(np.diff(shown))) <= 1  # every k-th layer
        if n_layers <= MAX_LAYER_LABELS:
            assert shown == list(range(1, n_layers + 1))
        assert all(t.get_rotation() == 0 for t in labels)
        boxes = sorted((t.get_window_extent(renderer) for t in labels), key=lambda b: b.y0)
        gap = 2 * fig.dpi / 72  # 2 points
        assert all(b.y0 - a.y1 >= gap for a, b in zip(boxes, boxes[1:], strict=False))
    plt.close(fig)
