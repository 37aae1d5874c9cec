"""Rotary bands (`attnscope.analyses.position.rotary`): the bands against the canonical logits
and the modules' own attention weights, hand-built known answers (one band holding every score,
the cosine offset profile of constant queries and keys, the flat unrotated band), and the
streaming statistics against a direct NumPy computation on a tiny store."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from test_decoders import _double, module_attention_weights, states_of

from attnscope.analyses.position import plots as position_plots
from attnscope.analyses.position import rotary
from attnscope.architectures import canonical_weights
from attnscope.core.attention import additive_mask, attention_scores, queries_keys
from attnscope.core.canonical import Rotary
from attnscope.core.store import HiddenStates
from conftest import (
    DECODERS,
    TINY,
    WINDOW,
    tiny_batch,
    tiny_model,
    write_tiny_model_run,
    write_tiny_store,
)


def summed_bands(X: torch.Tensor, layer) -> torch.Tensor:
    """sum_b s^b from `head_band_scores`, every head.  [B, H, n, n]"""
    return torch.stack([s.sum(1) for _, s in rotary.head_band_scores(X, layer)], dim=1)


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def test_bands_pair_the_dimensions_the_rotation_turns_together():
    half_split = Rotary(torch.tensor([1.0, 0.1, 0.01]), dims=6)
    interleaved = Rotary(torch.tensor([1.0, 0.1, 0.01]), dims=6, interleaved=True)
    assert rotary.bands(half_split, 8).tolist() == [0, 1, 2, 0, 1, 2, 3, 3]
    assert rotary.bands(interleaved, 8).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert rotary.bands(half_split, 6).tolist() == [0, 1, 2, 0, 1, 2]  # no unrotated band
    assert rotary.bands(None, 4).tolist() == [0, 0, 0, 0]
    for turn in (half_split, interleaved):  # a dimension's partner lies in its own band
        band = rotary.bands(turn, 6)
        partners = turn.partner(torch.eye(6))  # row d: where dimension d's partner lands
        for d in range(6):
            assert set(band[partners[d] != 0].tolist()) == {band[d].item()}
    theta, wavelength = rotary.band_angles(half_split, 8)
    assert np.allclose(theta, [1.0, 0.1, 0.01, 0.0])
    assert np.allclose(wavelength[:3], 2 * np.pi / np.array([1.0, 0.1, 0.01]))
    assert wavelength[3] == np.inf
    assert rotary.band_angles(None, 4)[1].tolist() == [np.inf]


@pytest.mark.parametrize("model_type", DECODERS)
def test_bands_sum_to_the_logits_and_rebuild_the_modules_weights(model_type):
    """sum_b s^b = q k^T scale (pre-softcap, `attention_scores` with the cap off) to 1e-5
    relative in float32 and 1e-10 in float64; capped, masked and softmaxed it is the module's
    eager attention to 1e-6."""
    model = tiny_model(model_type)
    weights = canonical_weights(model)
    doubled = _double(weights)
    ids, mask = tiny_batch(model_type)
    states = states_of(model, ids, mask)
    real = mask.bool()
    for l, layer in enumerate(weights.layers):
        X = states[l]
        with torch.no_grad():
            total = summed_bands(X, layer)
            assert relative(total, attention_scores(X, replace(layer, softcap=None))) < 1e-5
            capped = (
                total if layer.softcap is None else layer.softcap * (total / layer.softcap).tanh()
            )
            masked = capped + additive_mask(mask, True, X.dtype, layer.sliding_window)
            want = module_attention_weights(model, l, X, mask)
        got = torch.softmax(masked, dim=-1)
        assert torch.allclose(got.transpose(1, 2)[real], want.transpose(1, 2)[real], atol=1e-6)
        layer64, X64 = doubled.layers[l], X.double()
        direct = attention_scores(X64, replace(layer64, softcap=None))
        assert relative(summed_bands(X64, layer64), direct) < 1e-10
        stats = rotary.RotaryStatistics(layer64, X.shape[1], t_max=3)
        stats.update(X64, mask)
        assert stats.residual < 1e-10


def single_band_layer(band: int):
    """Layer 1 of a tiny Llama with W_Q, W_K, b_Q, b_K zero outside the dims of `band`."""
    layer = canonical_weights(tiny_model("llama")).layers[0]
    keep = (rotary.bands(layer.rotary, layer.d_head) == band).to(layer.W_Q.dtype)
    return replace(
        layer,
        W_Q=layer.W_Q * keep,
        b_Q=layer.b_Q * keep,
        W_K=layer.W_K * keep,
        b_K=layer.b_K * keep,
    )


def test_one_band_holds_every_score():
    band = 1
    layer = single_band_layer(band)
    _, mask = tiny_batch("llama", batch=2, length=10)
    X = torch.randn(2, 10, TINY["hidden"], generator=torch.Generator().manual_seed(3))
    stats = rotary.RotaryStatistics(layer, 10, t_max=4)
    stats.update(X, mask)
    share = stats.abs_share
    assert share.shape == (layer.n_heads, layer.d_head // 2)
    assert (share[:, band] == 1).all()
    assert (np.delete(share, band, axis=1) == 0).all()
    positional = stats.positional_share
    assert np.isnan(np.delete(positional, band, axis=1)).all()  # constant 0: no variance
    assert ((positional[:, band] > 0) & (positional[:, band] < 1)).all()
    assert (stats.norm("q")[:, band] > 0).all()
    assert (np.delete(stats.norm("k"), band, axis=1) == 0).all()


@pytest.mark.parametrize("model_type", ["llama", "cohere", "gpt_neox", "stablelm"])
def test_constant_queries_and_keys_give_a_cosine_per_band(model_type):
    """Known answer: with the same q, k at every position (constant rows of X), band b's score
    at offset t = i - j is scale |q^b| |k^b| cos(theta_b t + phi_b), phi_b = -atan2(q^b x k^b,
    q^b . k^b) (half-split and interleaved pairs); R^2 = 1. The unrotated band of a partial
    rotary head (GPT-NeoX, StableLM) is flat at scale q^u . k^u, with theta 0, no R^2."""
    layer = _double(canonical_weights(tiny_model(model_type))).layers[0]
    n, t_max = 12, 9
    X = torch.randn(TINY["hidden"], dtype=torch.float64).expand(1, n, -1)
    stats = rotary.RotaryStatistics(layer, n, t_max)
    stats.update(X, torch.ones(1, n, dtype=torch.long))
    assert stats.offset_count.tolist() == [n - t for t in range(t_max + 1)]
    q, k = (t[0, :, 0].numpy() for t in queries_keys(X, layer, rotate=False))  # [H, d']
    theta, wavelength = rotary.band_angles(layer.rotary, layer.d_head)
    band = rotary.bands(layer.rotary, layer.d_head).numpy()
    t = np.arange(t_max + 1)
    partial = layer.rotary.dims < layer.d_head
    assert len(theta) == layer.rotary.dims // 2 + partial
    for b in range(len(theta) - partial):
        (d1, d2) = np.flatnonzero(band == b)  # x1 turns towards x2
        dot = q[:, d1] * k[:, d1] + q[:, d2] * k[:, d2]
        cross = q[:, d1] * k[:, d2] - q[:, d2] * k[:, d1]
        amplitude = np.hypot(q[:, d1], q[:, d2]) * np.hypot(k[:, d1], k[:, d2])
        amplitude = amplitude * layer.scale * layer.rotary.scaling**2
        phase = -np.arctan2(cross, dot)
        want = amplitude[:, None] * np.cos(theta[b] * t[None] + phase[:, None])
        assert np.allclose(stats.offset_mean[:, b], want, rtol=1e-9, atol=1e-12)
        assert np.allclose(stats.positional_share[:, b], 1.0, atol=1e-9)
    if partial:
        assert theta[-1] == 0 and wavelength[-1] == np.inf
        kept = band == len(theta) - 1
        flat = layer.scale * (q[:, kept] * k[:, kept]).sum(-1)
        assert np.allclose(stats.offset_mean[:, -1], flat[:, None], rtol=1e-9, atol=1e-12)
        assert np.isnan(stats.positional_share[:, -1]).all()


def test_by_offset_lays_each_rows_keys_out_by_offset():
    """by_offset(...)[l, u] is key i - t of query i = first + l, t = T - 1 - u (0 where the
    key would be before the sequence), and offset_logits is q_i . k_{i - t} likewise, for
    every block of rows (first row, rows, offsets) including a partial last block."""
    n, d = 7, 3
    g = torch.Generator().manual_seed(0)
    k, q = torch.randn(2, d, n, generator=g), torch.randn(n, d, generator=g)
    keys = rotary.zero_before(k)
    assert keys.shape == (2, d, 2 * n)
    for first, rows, T in ((0, 3, 3), (3, 3, 6), (6, 1, 7), (4, 3, 2), (2, 5, 7)):
        view = rotary.by_offset(keys, first, rows, T)
        logits = rotary.offset_logits(q[first : first + rows], keys[0], first, T)
        assert view.shape == (2, d, rows, T) and logits.shape == (rows, T)
        for l in range(rows):
            for u in range(T):
                i, t = first + l, T - 1 - u
                want = k[..., i - t] if i - t >= 0 else torch.zeros(2, d)
                assert torch.equal(view[..., l, u], want), (first, l, u)
                assert torch.allclose(logits[l, u], q[i] @ want[0], atol=1e-6)


def naive_accumulators(X: torch.Tensor, mask: torch.Tensor, layer) -> dict:
    """What RotaryStatistics accumulates, from the definitions: each head's [n, n] scores of
    band b = the band's dimensions of q and k alone, then offset by offset the pairs
    (i, j = i - t) that are visible (both real, inside the sliding window).  H heads, K
    bands: sums, squares [H, K, n]; counts [n]; share_sums [H, K]; share_pairs [H]"""
    q, k = queries_keys(X, layer)  # keys repeated per query head
    band = rotary.bands(layer.rotary, layer.d_head)
    K, (B, H, n, _) = int(band.max()) + 1, q.shape
    f64 = dict(dtype=torch.float64)
    out = {"sums": torch.zeros(H, K, n, **f64), "squares": torch.zeros(H, K, n, **f64)}
    out |= {"counts": torch.zeros(n, **f64), "share_sums": torch.zeros(H, K, **f64)}
    out["share_pairs"] = torch.zeros(H, **f64)
    real = mask.bool()
    for s in range(B):
        for h in range(H):
            scores = torch.stack(
                [q[s, h][:, band == b] @ k[s, h][:, band == b].T * layer.scale for b in range(K)]
            )  # [K, n, n]
            for t in range(n):
                i = torch.arange(t, n)
                seen = real[s, i] & real[s, i - t]
                if layer.sliding_window is not None and t >= layer.sliding_window:
                    seen[:] = False
                values = scores[:, i, i - t][:, seen].double()  # [K, visible pairs]
                out["counts"][t] += seen.sum() if h == 0 else 0
                out["sums"][h, :, t] += values.sum(-1)
                out["squares"][h, :, t] += values.square().sum(-1)
                size = values.abs().sum(0)
                kept = size > 0
                out["share_sums"][h] += (values.abs()[:, kept] / size[kept]).sum(-1)
                out["share_pairs"][h] += kept.sum()
    return out


@pytest.mark.parametrize("model_type", ["llama", "mistral", "gpt_neox"])
@pytest.mark.parametrize("rows", [1, 3, 64])
def test_blocks_of_rows_give_the_naive_accumulators(monkeypatch, model_type, rows):
    """Every band at once, block of query rows by block (1, 3: a partial last block, 64: all
    rows at once), the per-offset sums and squares, counts and shares equal the naive
    definition: grouped-query heads (Llama, Mistral: 4 heads on 2 key/value heads), a
    sliding window (Mistral), a wider unrotated band (GPT-NeoX), padding at the end and at
    the start of a sequence, in float32 and float64."""
    monkeypatch.setattr(rotary, "MOST_ROWS", rows)
    weights = canonical_weights(tiny_model(model_type))
    n = 11
    X = torch.randn(3, n, TINY["hidden"], generator=torch.Generator().manual_seed(7))
    mask = torch.ones(3, n, dtype=torch.long)
    mask[1, 8:] = 0  # padding after the text
    mask[2, :3] = 0  # and before it
    for layer, tolerance in ((_double(weights).layers[0], 1e-12), (weights.layers[0], 1e-5)):
        dtype = layer.W_Q.dtype
        stats = rotary.RotaryStatistics(layer, n + 2, t_max=4)
        with torch.no_grad():
            stats.update(X[:1].to(dtype), mask[:1])
            stats.update(X[1:].to(dtype), mask[1:])  # two batches
            want = naive_accumulators(X.to(dtype), mask, layer)
        for name, value in want.items():
            got = getattr(stats, name)
            if name in ("sums", "squares", "counts"):
                assert (got[..., n:] == 0).all(), name  # offsets the sequences cannot reach
                got = got[..., :n]
            scale = value.abs().max()
            assert float((got - value.to(got.dtype)).abs().max()) <= tolerance * scale, name
        assert stats.residual < (1e-10 if dtype == torch.float64 else 1e-5)
    if layer.sliding_window is not None:
        assert (stats.counts[layer.sliding_window :] == 0).all()
    if model_type != "gpt_neox":  # grouped-query heads
        assert layer.W_K.shape[0] < layer.n_heads
    else:  # the unrotated band is twice as wide as a rotated one
        assert rotary.band_widths(layer.rotary, layer.d_head) == [2, 2, 4]


def test_a_block_holds_at_most_chunk_scores():
    """rows_per_block keeps bands x rows x n within CHUNK (one row at least)."""
    for bands, n in ((9 * 32, 512), (32 * 33, 4096), (1, 64), (32, 10**6)):
        rows = rotary.rows_per_block(bands, n)
        assert 1 <= rows <= rotary.MOST_ROWS
        assert bands * rows * n <= rotary.CHUNK or rows == 1
    assert rotary.rows_per_block(9 * 32, 512) == 56


def direct_statistics(store: HiddenStates, layer, l: int, t_max: int) -> dict:
    """The statistics of one layer straight from their definitions, in NumPy float64, one
    sequence at a time over its real tokens: every visible pair's band scores gathered."""
    band = rotary.bands(layer.rotary, layer.d_head).numpy()
    K = band.max() + 1
    scores, offsets, q_norms, k_norms = [], [], [], []
    for row in range(store.n_sequences):
        n = int(store.lengths[row])
        X = torch.from_numpy(store.hidden(l, row, row + 1)[:, :n])
        with torch.no_grad():
            q, k = (t[0].double().numpy() for t in queries_keys(X, layer))  # [H, n, d']
        i, j = np.tril_indices(n)
        if layer.sliding_window is not None:
            i, j = i[i - j < layer.sliding_window], j[i - j < layer.sliding_window]
        s = np.stack(
            [
                layer.scale * (q[:, i][..., band == b] * k[:, j][..., band == b]).sum(-1)
                for b in range(K)
            ],
            axis=1,
        )  # [H, K, pairs]
        scores.append(s)
        offsets.append(i - j)
        q_norms.append(np.stack([np.linalg.norm(q[..., band == b], axis=-1) for b in range(K)], 1))
        k_norms.append(np.stack([np.linalg.norm(k[..., band == b], axis=-1) for b in range(K)], 1))
    s, offset = np.concatenate(scores, axis=-1), np.concatenate(offsets)
    size = np.abs(s).sum(1, keepdims=True)
    share = (np.abs(s) / np.where(size > 0, size, 1)).sum(-1) / (size > 0).sum(-1)
    means = {t: s[..., offset == t].mean(-1) for t in np.unique(offset)}
    nan = np.full(s.shape[:2], np.nan)  # no pair at t (beyond a sliding window)
    between = sum((offset == t).sum() * (m - s.mean(-1)) ** 2 for t, m in means.items())
    return {
        "abs_share": share,
        "offset_mean": np.stack([means.get(t, nan) for t in range(t_max + 1)], axis=-1),
        "positional_share": between / ((s - s.mean(-1, keepdims=True)) ** 2).sum(-1),
        "q_norm": np.concatenate(q_norms, axis=-1).mean(-1),
        "k_norm": np.concatenate(k_norms, axis=-1).mean(-1),
    }


@pytest.mark.parametrize("model_type", ["gemma2", "gpt_neox"])
def test_streaming_statistics_match_their_definitions(tmp_path, model_type):
    """rotary_pass gives the same statistics with batches of 2 and 3, and the same as a direct
    NumPy computation; shares add up, R^2 lies in [0, 1], the sliding window hides far pairs."""
    t_max = 6
    path, model = write_tiny_store(tmp_path, model_type)
    weights = canonical_weights(model)
    with HiddenStates(path) as store, torch.no_grad():
        twos = rotary.rotary_pass(store, weights, t_max=t_max, batch_size=2, device="cpu")
        threes = rotary.rotary_pass(store, weights, t_max=t_max, batch_size=3, device="cpu")
        direct = [
            direct_statistics(store, layer, l, t_max) for l, layer in enumerate(weights.layers)
        ]
    for name in ("abs_share", "positional_share", "q_norm", "k_norm", "offset_mean"):
        a, b = getattr(twos, name), getattr(threes, name)
        assert np.allclose(a, b, rtol=1e-6, atol=1e-9, equal_nan=True), name
        for l, want in enumerate(direct):
            assert np.allclose(a[l], want[name], rtol=1e-5, atol=1e-6, equal_nan=True), (name, l)
    assert np.array_equal(twos.offset_count, threes.offset_count)
    assert (twos.residual < 1e-5).all()
    # float32 sums within a block of rows, then float64: a few float32 ulps of 1
    assert np.allclose(np.nansum(twos.abs_share, axis=-1), 1.0, rtol=0, atol=1e-6)
    assert ((twos.positional_share >= 0) & (twos.positional_share <= 1)).all()
    for l, layer in enumerate(weights.layers):
        counts = twos.offset_count[l]
        if layer.sliding_window is not None:
            assert layer.sliding_window == WINDOW
            assert (counts[WINDOW:] == 0).all() and (counts[:WINDOW] > 0).all()
        else:
            assert (counts > 0).all()


def test_tables_list_each_layers_own_bands():
    """GPT-NeoX: 2 rotated bands and the unrotated one per head; SmolLM3's NoPE layer: one
    unrotated band (the result is NaN past it)."""
    X = torch.randn(2, 9, TINY["hidden"], generator=torch.Generator().manual_seed(5))
    mask = torch.ones(2, 9, dtype=torch.long)
    cases = (("gpt_neox", [3, 3], [True, True]), ("smollm3", [4, 1], [False, True]))
    for model_type, expected, unrotated_last in cases:
        layers = canonical_weights(tiny_model(model_type)).layers
        statistics = []
        for layer in layers:
            stats = rotary.RotaryStatistics(layer, 9, t_max=3)
            stats.update(X, mask)
            statistics.append(stats.summary())
        result = rotary.RotaryResult.collect(statistics)
        assert result.n_bands.tolist() == expected
        bands = rotary.band_table(result)
        H = layers[0].n_heads
        assert len(bands) == H * sum(expected)
        assert list(bands.columns[:3]) == ["layer", "head", "band"]
        assert (bands["rotated"] == (bands["theta"] > 0)).all()
        assert (bands["rotated"] == np.isfinite(bands["wavelength"])).all()
        last = bands.groupby(["layer", "head"]).tail(1)
        assert (~last["rotated"]).tolist() == list(np.repeat(unrotated_last, H))
        assert bands["rotated"].sum() == H * (sum(expected) - sum(unrotated_last))
        assert np.allclose(bands.groupby(["layer", "head"])["abs_share"].sum(), 1.0)
        offsets = rotary.offset_table(result)
        assert len(offsets) == H * sum(expected) * 4
        assert list(offsets.columns) == ["layer", "head", "band", "t", "mean", "count"]
        assert offsets.query("t == 2")["count"].eq(2 * (9 - 2)).all()
    assert np.isnan(result.abs_share[1, :, 1:]).all()


def band_statistics(model) -> pd.DataFrame:
    """`band_table` of random layer inputs through every layer of `model` (9 tokens, t_max 3)."""
    X = torch.randn(2, 9, TINY["hidden"], generator=torch.Generator().manual_seed(5))
    mask = torch.ones(2, 9, dtype=torch.long)
    statistics = []
    for layer in canonical_weights(model).layers:
        stats = rotary.RotaryStatistics(layer, 9, t_max=3)
        stats.update(X, mask)
        statistics.append(stats.summary())
    return rotary.band_table(rotary.RotaryResult.collect(statistics))


def test_a_band_the_qk_norm_switches_off_is_marked_not_left_blank():
    """Gemma-3 issue: a QK-norm weight of 0 (Gemma's 1 + w with w = -1) on both dimensions of a
    band makes q^b 0, so s^b is constant and its R^2 NaN: a white cell nobody explained. The
    figure hatches exactly the cells constant in every head, and its legend says why; a band
    a layer does not have (SmolLM3's NoPE layer) is not hatched."""
    import matplotlib.pyplot as plt

    model = tiny_model("gemma3_text")
    half = TINY["hidden"] // TINY["heads"] // 2  # band 1: dimensions 1 and 1 + d'/2
    with torch.no_grad():
        model.layers[0].self_attn.q_norm.weight[[1, 1 + half]] = -1.0
    bands = band_statistics(model)
    off = bands[bands["positional_share"].isna()]
    assert set(zip(off["layer"], off["band"], strict=True)) == {(1, 1)}
    assert len(off) == TINY["heads"] and (off["q_norm"] == 0).all()
    fig = position_plots.rotary_positional_share(bands, "gemma3")
    ax = fig.axes[0]
    hatched = [(p.get_x(), p.get_y()) for p in ax.patches if p.get_hatch()]
    assert hatched == [(1, 0)]  # column: band 1; row: layer 1
    assert "QK-norm" in ax.get_legend().get_texts()[0].get_text()
    plt.close(fig)
    nope = band_statistics(tiny_model("smollm3"))  # layer 2 holds one band, the unrotated
    fig = position_plots.rotary_positional_share(nope, "smollm3")
    assert not [p for p in fig.axes[0].patches if p.get_hatch()]
    assert fig.axes[0].get_legend() is None
    plt.close(fig)


def test_previous_token_margin_per_band():
    """Known answer: band 0 peaks at t = 1 by 3 over the flat rest, band 1 is flat."""
    rows = []
    for t in range(5):
        rows.append(dict(layer=2, head=3, band=0, t=t, mean=4.0 if t == 1 else 1.0, count=1))
        rows.append(dict(layer=2, head=3, band=1, t=t, mean=float(t == 0) - 1.0, count=1))
        rows.append(dict(layer=1, head=3, band=0, t=t, mean=9.0, count=1))
    table = rotary.positional_heads_by_band(pd.DataFrame(rows), [(2, 3)])
    assert table["band"].tolist() == [0, 1]
    assert table["margin"].tolist() == [3.0, -0.25]  # band 1: -1 - (0 - 1 - 1 - 1) / 4
    assert table["previous"].tolist() == [4.0, -1.0]


@pytest.mark.parametrize("architecture", ["llama", "bert"])
def test_rotary_entry_scripts_write_every_table_and_figure(tmp_path, architecture):
    """position_corpus then position_rotary and the three figures, as the workflow runs them:
    a rotary model gets band tables checked against its logits; a model with learned
    positions gets one-row "not applicable" tables and figures that say so."""
    from test_weights import run_script

    from attnscope.analyses.position.outputs import FAMILY as POSITION

    store, model, manifest = write_tiny_model_run(tmp_path, architecture, batch=4, length=12)
    out = tmp_path / "position"
    out.mkdir()
    corpus = {name: out / name for name in ("identity_check.tsv", "xcov_sum.tsv", "trt.tsv.gz")}
    corpus |= {n: out / n for n in ("spectra.tsv", "shifts.tsv", "g_map.tsv", "xcorr.tsv")}
    source = {"manifest": manifest, "hidden_states": store}
    outputs = {name.split(".")[0].replace("_check", ""): path for name, path in corpus.items()}
    run_script("position_corpus", source, outputs, t_max=3, xcorr_t_max=3,
               include_bias=False, heads=[], batch_size=3)  # fmt: skip
    tables = {
        "bands": out / "rotary_bands.tsv",
        "offsets": out / "rotary_offsets.tsv",
        "heads": out / "rotary_positional_heads.tsv",
        "check": out / "decomposition_check.tsv",
        "ranking": out / "rotary_band_ranking.tsv",
    }
    kinds = tmp_path / "layer_kinds.tsv"  # the model's two global layers (rule input)
    kinds.write_text(
        "layer\tattention\twindow\trope_theta\n1\tglobal\t\t10000.0\n2\tglobal\t\t10000.0\n"
    )
    run_script("position_rotary", source | {"trt": corpus["trt.tsv.gz"], "layer_kinds": kinds},
               tables, t_max=3, batch_size=3)  # fmt: skip
    read = {name: pd.read_csv(path, sep="\t") for name, path in tables.items()}
    if architecture == "bert":
        for table in read.values():
            assert table["status"].tolist() == [
                "not applicable: learned position embeddings (no rotary bands)"
            ]
    else:
        assert (read["check"]["max_rel"] < 1e-5).all() and len(read["check"]) == 2
        bands = read["bands"]
        assert len(bands) == 2 * 4 * 4  # layers x heads x (head width 8 / 2) bands
        assert bands["abs_share"].between(0, 1).all()
        shares = bands.groupby(["layer", "head"])["abs_share"].sum()
        np.testing.assert_allclose(shares, 1, atol=1e-6)
        assert len(read["offsets"]) == 2 * 4 * 4 * 4  # ... x offsets 0..3
    for figure in POSITION.figures:
        if not figure.name.startswith("rotary"):
            continue
        drawn = {
            f"{figure.name}_{s}": out / "figures" / f"{figure.name}.{s}" for s in ("svg", "png")
        }
        inputs = {file.split(".")[0]: out / file for file in figure.tables}
        stems = [file.split(".")[0] for file in figure.tables]
        figures = {figure.name: {"tables": stems, "settings": {"title": "tiny"}}}
        run_script("draw_figures", inputs, drawn, family="position", figures=figures)
        assert drawn[f"{figure.name}_png"].stat().st_size > 1000


def test_band_forms_hold_the_whole_form():
    """The bands' forms W_Q^b (W_K^b)^T add up to W_Q W_K^T (bands partition the head's
    dimensions), and each has rank at most its band's width: 2 singular values per rotated
    band, the unrotated band's own width for GPT-NeoX."""
    for model_type, width in (("llama", 2), ("gpt_neox", 2)):
        weights = canonical_weights(tiny_model(model_type))
        table = rotary.band_singular_value_table(weights)
        layer = weights.layers[0]
        dims = rotary._band_dims(layer.rotary, layer.d_head, "cpu")
        W_Q, W_K = layer.W_Q[0].double(), layer.W_K[0].double()
        total = sum(W_Q[:, d] @ W_K[:, d].T for d in dims)
        torch.testing.assert_close(total, W_Q @ W_K.T)
        for b, d in enumerate(dims):
            values = table.query("layer == 1 and head == 1 and band == @b")["singular_value"]
            want = torch.linalg.svdvals(W_Q[:, d] @ W_K[:, d].T)[: len(d)].numpy()
            np.testing.assert_allclose(values.to_numpy(), want, rtol=1e-9, atol=1e-12)
            assert len(values) == len(d) and (len(d) == width or b == len(dims) - 1)
    figure = position_plots.wa_singular_values(table, title="tiny")
    assert len(figure.axes) >= weights.n_layers
