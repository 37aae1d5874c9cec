"""Position analyses (Yamamoto & Matsuzaki): identities, hand-built answers, independent NumPy
and `transformers` computations, on tiny random models of every architecture."""

from dataclasses import replace

import h5py
import numpy as np
import pandas as pd
import pytest
import torch

from attnscope.analyses.position import corpus_pass as position_pass
from attnscope.analyses.position import plots as position_plots
from attnscope.analyses.position.bilinear import (
    bilinear_form,
    eigen_rotation,
    rotation_table,
    score_input,
    score_weights,
    wa_singular_value_table,
)
from attnscope.analyses.position.diagonals import cluster_profiles, select_heads
from attnscope.analyses.position.embeddings import (
    amplitude_spectrum,
    embedding_spectra,
    pca_cumulative_variance,
)
from attnscope.analyses.position.outputs import FAMILY as POSITION
from attnscope.analyses.position.settings import PositionSettings
from attnscope.analyses.position.waves import cross_covariance
from attnscope.architectures import canonical_weights
from attnscope.core.attention import attention_probs
from attnscope.core.diagonals import diagonal_sums
from attnscope.core.store import HiddenStates
from conftest import TINY, tiny_model, write_tiny_store

T = TINY["positions"]


def trt_of(result) -> pd.DataFrame:
    return position_pass.trt_table(result.trt, result.offsets)


def random_x(d: int, n: int = 10, batch: int = 2, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, n, d, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("include_bias", [False, True])
def test_xwax_equals_qskt(classic_architecture, include_bias):
    architecture = classic_architecture
    layer = canonical_weights(tiny_model(architecture)).layers[0]
    X = random_x(layer.d_model)
    form = bilinear_form(layer, include_bias)
    x = score_input(X, layer, include_bias)
    W_Q, W_K = score_weights(layer, include_bias)
    direct = torch.einsum("bnd,hde->bhne", x, W_Q) @ torch.einsum(
        "bnd,hde->bhne", x, W_K
    ).transpose(-1, -2)
    Q, K = form.queries(x), form.keys(x)
    qsk = (Q * form.S[None, :, None, : form.r]) @ K.transpose(-1, -2)
    assert torch.allclose(qsk, direct, atol=1e-10)
    if include_bias:  # Q S K^T are then the model's raw scores
        mask = torch.ones(X.shape[:2], dtype=torch.long)
        alpha = torch.softmax(
            qsk * layer.scale + (torch.tril(torch.ones(10, 10)).log() if layer.causal else 0),
            dim=-1,
        )
        assert torch.allclose(alpha, attention_probs(X, mask, layer).double(), atol=1e-5)


def test_cross_covariance_sums_to_diagonals_of_qskt():
    g = torch.Generator().manual_seed(3)
    n, r = 12, 5
    Q = torch.randn(2, 3, n, r, generator=g, dtype=torch.float64)
    K = torch.randn(2, 3, n, r, generator=g, dtype=torch.float64)
    s = torch.rand(r, generator=g, dtype=torch.float64)
    offsets = list(range(-15, 16))  # beyond n: empty diagonals
    xcov = cross_covariance(Q, K, offsets)
    loop = torch.zeros_like(xcov)  # Eq. 11 term by term
    for a, t in enumerate(offsets):
        for i in range(n):
            if 0 <= i + t < n:
                loop[..., a, :] += Q[..., i, :] * K[..., i + t, :]
    assert torch.allclose(xcov, loop, atol=1e-12)
    trt = diagonal_sums((Q * s) @ K.transpose(-1, -2), offsets)
    assert torch.allclose((xcov * s).sum(-1), trt, atol=1e-12)


def test_full_rotation_is_orthogonal_and_rank_block_contracts(classic_architecture):
    architecture = classic_architecture
    layer = canonical_weights(tiny_model(architecture)).layers[1]
    form = bilinear_form(layer)
    R = form.rotation("full")
    eye = torch.eye(R.shape[-1], dtype=R.dtype)
    assert torch.allclose(R @ R.transpose(-1, -2), eye.expand_as(R), atol=1e-10)
    full, _ = eigen_rotation(R)
    assert np.allclose(np.abs(full), 1, atol=1e-8)
    rank, vectors = eigen_rotation(form.rotation("rank"))
    assert rank.shape == (layer.n_heads, layer.d_head)
    assert (np.abs(rank) <= 1 + 1e-10).all()
    assert np.all(np.diff(np.angle(rank), axis=-1) >= 0)  # sorted by angle
    Rr = form.rotation("rank").numpy()
    assert np.allclose(Rr @ vectors, vectors * rank[:, None, :], atol=1e-10)


def test_pe_spectrum_and_pca_match_numpy(classic_architecture):
    architecture = classic_architecture
    weights = canonical_weights(tiny_model(architecture))
    pe = weights.position_embeddings.double().numpy()
    assert pe.shape == (T, TINY["hidden"])  # RoBERTa's reserved rows dropped
    ids = np.arange(5, 25)
    table = embedding_spectra(weights.position_embeddings, weights.word_embeddings, ids)
    for embedding, signal in (("position", pe), ("word", weights.word_embeddings[ids].numpy())):
        n = len(signal)
        amp = np.abs(np.fft.fft(signal, axis=0))[: n // 2 + 1] / n
        amp[1 : (n + 1) // 2] *= 2
        rows = table[table.embedding == embedding]
        assert np.allclose(rows["mean"], amp.mean(axis=1))
        assert np.allclose(rows.q25, np.percentile(amp, 25, axis=1))
        assert np.allclose(rows.q75, np.percentile(amp, 75, axis=1))
        assert np.allclose(rows.cycles_per_token * n, rows.frequency)
    covariance = np.cov(pe, rowvar=False)
    eigen = np.sort(np.linalg.eigvalsh(covariance))[::-1]
    pca = pca_cumulative_variance(weights.position_embeddings)
    assert np.allclose(pca.cumulative_variance, np.cumsum(eigen) / eigen.sum())


def test_sinusoid_gives_its_peak_and_amplitude():
    p = torch.arange(T, dtype=torch.float64)[:, None]
    pe = torch.cat([1.5 * torch.cos(2 * np.pi * 5 * p / T + 0.3), 0.1 * torch.randn(T, 6)], 1)
    amp = amplitude_spectrum(pe, dim=0)
    assert amp.shape == (T // 2 + 1, 7)
    assert int(amp[1:, 0].argmax()) + 1 == 5
    assert amp[5, 0].item() == pytest.approx(1.5)
    table = embedding_spectra(pe, torch.randn(10, 7), np.arange(10))
    rows = table[(table.embedding == "position") & (table.frequency > 0)]
    assert rows.frequency.iloc[int(rows["mean"].argmax())] == 5


FREQUENCIES = (3, 5, 7, 11)  # cycles per T positions, one cos/sin pair each
SHIFT = 1  # keys equal queries of the next token: the head attends to i - 1


def shifted_head_model(architecture: str = "bert"):
    """Canonical weights whose layer 1, head 1 reads sinusoids of x and compares the query of
    token i with the key of token j through K_j = Q_{j+SHIFT}: its scores peak at j = i - 1."""
    weights = canonical_weights(tiny_model(architecture))
    layer = weights.layers[0]
    W_Q, W_K = layer.W_Q.clone(), layer.W_K.clone()
    W_Q[0], W_K[0] = 0, 0
    for k, (f, c) in enumerate(zip(FREQUENCIES, (6.0, 5.5, 5.0, 4.5), strict=True)):
        b = 2 * np.pi * f * SHIFT / T
        rows = slice(2 * k, 2 * k + 2)
        W_Q[0, rows, rows] = c * torch.eye(2)
        W_K[0, rows, rows] = c * torch.tensor([[np.cos(b), np.sin(b)], [-np.sin(b), np.cos(b)]])
    zero = torch.zeros_like(layer.b_Q)
    first = replace(layer, W_Q=W_Q, W_K=W_K, b_Q=zero, b_K=zero)
    return replace(weights, layers=[first, *weights.layers[1:]])


def write_sinusoid_store(path, weights, n_sequences: int = 3) -> None:
    """A store whose layer-1 input holds the sinusoids (plus noise) at every position."""
    g = torch.Generator().manual_seed(0)
    p = torch.arange(T, dtype=torch.float32)[:, None]
    waves = [
        torch.cat([torch.cos(2 * np.pi * f * p / T), torch.sin(2 * np.pi * f * p / T)], 1)
        for f in FREQUENCIES
    ]
    d = weights.d_model
    with h5py.File(path, "w") as f:
        for name in ("input_ids", "word_ids"):
            f[name] = np.zeros((n_sequences, T), dtype=np.int32)
        f["attention_mask"] = np.ones((n_sequences, T), dtype=np.int8)
        f["token_type_ids"] = np.zeros((n_sequences, T), dtype=np.int8)
        f["category"] = np.zeros((n_sequences, T), dtype=np.int8)
        for l in range(weights.n_layers + 1):
            X = 0.05 * torch.randn(n_sequences, T, d, generator=g)
            if l == 0:
                X[..., : 2 * len(FREQUENCIES)] += torch.cat(waves, 1)
            f[f"hidden/{l}"] = X.numpy()


def test_rotation_angle_gives_the_built_in_shift_and_trt_peaks_at_minus_one(tmp_path):
    weights = shifted_head_model()
    write_sinusoid_store(tmp_path / "hs.h5", weights)
    with HiddenStates(tmp_path / "hs.h5") as store:
        result = position_pass.corpus_pass(store, weights, PositionSettings(4, 8, batch_size=2))
    assert result.worst_identity()[1] < position_pass.IDENTITY_TOLERANCE
    shifts = position_pass.shifts_table(result).query("layer == 1 and head == 1")
    expected = sorted(2 * np.pi * f * SHIFT / T * s for f in FREQUENCIES for s in (-1, 1))
    assert np.allclose(shifts.theta, expected, atol=1e-6)
    assert np.allclose(shifts.modulus, 1, atol=1e-6)
    assert set(np.abs(shifts.frequency)) == set(FREQUENCIES)
    assert np.allclose(shifts.delta, SHIFT, atol=1e-6)
    mean = position_pass.mean_trt(result)
    assert result.offsets[int(mean[0, 0].argmax())] == -SHIFT
    summed = position_pass.xcov_sum_table(result).query("layer == 1 and head == 1")
    assert summed.t.iloc[int(summed.sum_s_xcov.argmax())] == -SHIFT
    assert select_heads(mean, result.offsets, [])[0] == (1, 1)
    shares, centres = cluster_profiles(
        position_pass.trt_table(result.trt, result.offsets), n_clusters=3, seed=0
    )
    own = shares.query("layer == 1 and head == 1").sort_values("share").cluster.iloc[-1]
    centre = centres[centres.cluster == own]
    assert centre.t.iloc[int(centre.value.argmax())] == -SHIFT


def test_scan_matches_transformers_attention(tmp_path, classic_architecture):
    """tr_t(A) from the scan equals the diagonals of `transformers`' own attention maps, and
    every table is built (GPT-2: no weight on keys after the query)."""
    architecture = classic_architecture
    store_path, model = write_tiny_store(tmp_path, architecture)
    weights = canonical_weights(model)
    with HiddenStates(store_path) as store:
        result = position_pass.corpus_pass(store, weights, PositionSettings(3, 5, batch_size=3))
        ids = torch.from_numpy(store.input_ids.astype(np.int64))
        mask = torch.from_numpy(store.attention_mask.astype(np.int64))
        types = torch.from_numpy(store.token_type_ids.astype(np.int64))
        window = int(store.lengths.min())
    kwargs = {"input_ids": ids, "attention_mask": mask, "output_attentions": True}
    if architecture != "gpt2":
        kwargs["token_type_ids"] = types
    with torch.no_grad():
        attentions = model(**kwargs).attentions
    for l, A in enumerate(attentions):
        A = A * mask[:, None, :, None]
        expected = diagonal_sums(A, result.offsets).numpy()
        assert np.allclose(result.trt[:, l], expected, atol=1e-5)
    if architecture == "gpt2":
        assert np.all(result.trt[..., np.array(result.offsets) > 0] == 0)
    assert result.worst_identity()[1] < position_pass.IDENTITY_TOLERANCE
    heads = select_heads(position_pass.mean_trt(result), result.offsets, [[2, 1]])
    tables = {
        "spectra": position_pass.spectra_table(result),
        "g_map": position_pass.g_map_table(result, heads),
        "xcorr": position_pass.xcorr_table(result, heads),
        "xcov_sum": position_pass.xcov_sum_table(result),
    }
    assert tables["spectra"].frequency.max() == window // 2
    assert (tables["g_map"].frequency > 0).all() and set(tables["g_map"].wave) == {"Q", "K"}
    assert np.allclose(tables["xcov_sum"].sum_s_xcov, tables["xcov_sum"].trt_qsk, atol=1e-8)
    shares, centres = cluster_profiles(
        position_pass.trt_table(result.trt, result.offsets), n_clusters=6, seed=0
    )
    assert np.allclose(shares.groupby(["layer", "head"]).share.sum(), 1)
    with pytest.raises(ValueError, match="outside"):
        select_heads(position_pass.mean_trt(result), result.offsets, [[3, 1]])


def rotary_figure_tables(tmp_path) -> dict:
    """The rotary figures' tables from a tiny Llama, with layer 1 head 2 taken as a prev head."""
    from attnscope.analyses.position import rotary

    store_path, model = write_tiny_store(tmp_path, "llama")
    with HiddenStates(store_path) as store:
        result = rotary.rotary_pass(
            store, canonical_weights(model), t_max=4, batch_size=3, device="cpu"
        )
    bands, offsets = rotary.band_table(result), rotary.offset_table(result)
    heads = rotary.positional_heads_by_band(offsets, [(1, 2)]).assign(behaviour="prev", mass=0.6)
    return {
        "rotary_positional_share": {"rotary_bands": bands},
        "rotary_offsets": {"rotary_offsets": offsets, "rotary_positional_heads": heads},
        "rotary_norms": {"rotary_bands": bands},
    }


def test_every_figure_draws(tmp_path):
    store_path, model = write_tiny_store(tmp_path, "bert")
    weights = canonical_weights(model)
    with HiddenStates(store_path) as store:
        result = position_pass.corpus_pass(store, weights, PositionSettings(batch_size=4))
    heads = select_heads(position_pass.mean_trt(result), result.offsets, [])
    spectrum = embedding_spectra(weights.position_embeddings, weights.word_embeddings, np.arange(9))
    forms = [(bilinear_form(layer), l + 1) for l, layer in enumerate(weights.layers)]
    shares, centres = cluster_profiles(trt_of(result), 6, 0)

    tables = {
        "pe_spectrum": {"pe_spectrum": spectrum},
        "pe_pca": {"pe_pca": pca_cumulative_variance(weights.position_embeddings)},
        "wa_singular_values": {
            "wa_singular_values": pd.concat(wa_singular_value_table(f, l) for f, l in forms)
        },
        "rotation_angles": {"rotation_angles": pd.concat(rotation_table(f, l) for f, l in forms)},
        "trt_clusters": {"trt_clusters": shares},
        "trt_centres": {"trt_centres": centres},
        "spectra": {"spectra": position_pass.spectra_table(result)},
        "g_map": {"g_map": position_pass.g_map_table(result, heads)},
        "xcorr": {
            "xcorr": position_pass.xcorr_table(result, heads),
            "xcov_sum": position_pass.xcov_sum_table(result),
        },
        "pe_spectra_models": {"pe_spectrum": [spectrum, spectrum], "models": ["a", "b"]},
    }
    rotary_tables = rotary_figure_tables(tmp_path)
    tables |= rotary_tables
    assert set(tables) == {f.name for f in POSITION.figures}
    for name, kwargs in tables.items():
        fig = getattr(position_plots, name)(**kwargs, title=name)
        fig.savefig(tmp_path / f"{name}.png")


def test_real_eigenvalues_get_a_positive_frequency_whatever_the_round_off():
    """A real eigen-wave has the same |DFT| at f and -f; a round-off tilt towards -f must not
    flip the sign of its frequency and Delta. A complex one keeps its signed frequency."""
    import dataclasses

    n = 8
    freqs = position_pass.signed_frequencies(n)
    g = np.zeros((1, 1, 2, n))
    g[..., freqs == 3] = 1.0
    g[..., freqs == -3] = 1.0 + 1e-12  # round-off prefers -3
    eigenvalues = np.array([[[-1.0 + 0j, np.exp(-2j)]]])
    fields = {f.name: None for f in dataclasses.fields(position_pass.PassResult)}
    result = position_pass.PassResult(**fields | {"g_q": g, "eigenvalues": eigenvalues})
    table = position_pass.shifts_table(result)
    assert table.frequency.tolist() == [3, -3]
    assert table.delta.iloc[0] == pytest.approx(n * np.pi / (2 * np.pi * 3))


@pytest.mark.parametrize("model_type", ["llama", "gemma2"])
def test_rotary_models_get_tr_t_from_their_own_attention(tmp_path, model_type):
    """On a rotary model only tr_t(A) applies: it equals the diagonal sums of transformers'
    own attention weights (Gemma-2's first layer slides a window of 4 keys)."""
    store_path, model = write_tiny_store(tmp_path, model_type)
    weights = canonical_weights(model)
    assert weights.any_rotary and not weights.learned_positions
    with HiddenStates(store_path) as store:
        trt = position_pass.trt_pass(store, weights, PositionSettings(t_max=3, batch_size=3))
        ids = torch.from_numpy(store.input_ids[:1].astype(np.int64))
        n = int(store.attention_mask[0].sum())
    with torch.no_grad():
        attentions = model(input_ids=ids[:, :n], output_attentions=True).attentions
    offsets = list(range(-3, 4))
    for l, alpha in enumerate(attentions):
        want = diagonal_sums(alpha, offsets)[0].numpy()
        np.testing.assert_allclose(trt[0, l], want, atol=1e-5)
    assert np.all(trt[:, :, :, offsets.index(1) :] == 0)  # causal: no key after the query
