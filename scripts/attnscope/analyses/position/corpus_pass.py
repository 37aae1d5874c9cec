"""One streaming pass over a store for the corpus-level position analyses (Yamamoto & Matsuzaki).

Per layer and batch (never all maps at once) it computes, for every head:
- tr_t(A), t = -t_max..t_max, per sequence, from the recomputed attention A (padding query rows
  and keys excluded; causal models see only t <= 0);
- the identities X W^A X^T = Q S K^T (every pair of real tokens) and
  sum_j s_j xcov_j(t) = tr_t(Q S K^T) (every sequence and t), as max absolute residuals;
- xcov_j(t), xcorr_j(t) for t = -xcorr_t_max..xcorr_t_max, per sequence over its real tokens;
- amplitude spectra along positions of x (what the attention block reads: X, or LN(X) for
  GPT-2), Q and K, and of the eigen-waves Q p_i, K p_i of R_rank (`bilinear`, `waves`).

Spectra need one length: they use the first `window` = (shortest real length in the store)
positions of every sequence (wiki512: all 512). Every per-sequence quantity is averaged over
sequences (amplitudes are averaged, not the complex DFTs). Layers and heads are 1-based in the
tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from attnscope.analyses.position.bilinear import (
    bilinear_form,
    eigen_rotation,
    score_input,
    score_weights,
)
from attnscope.analyses.position.embeddings import amplitude_spectrum
from attnscope.analyses.position.settings import PositionSettings
from attnscope.analyses.position.waves import (
    cross_correlation,
    cross_covariance,
    eigen_wave_spectra,
    shift,
    signed_frequencies,
)
from attnscope.core.attention import attention_probs
from attnscope.core.canonical import CanonicalModel
from attnscope.core.diagonals import diagonal_sums
from attnscope.core.store import HiddenStates
from attnscope.core.tables import index_grid

IDENTITY_TOLERANCE = 1e-8  # relative to the largest |value|, float64


@dataclass
class PassResult:
    """Arrays of one pass; L layers, H heads, r = d', N sequences, F = window // 2 + 1.

    trt [N, L, H, T] tr_t(A); x_spectrum [L, F], q_spectrum, k_spectrum [L, F] (max over
    columns and heads of the mean amplitude); eigenvalues [L, H, r] of R_rank; g_q, g_k
    [L, H, r, window] mean |DFT| of Q p_i, K p_i (signed frequency order); singular [L, H, r];
    xcov, xcorr [L, H, X, r] means; trt_qsk [L, H, X] mean tr_t(Q S K^T); residuals and
    scales [L, H] for the two identities ("svd", "xcov").
    """

    offsets: list[int]
    xcorr_offsets: list[int]
    window: int
    trt: np.ndarray
    x_spectrum: np.ndarray
    q_spectrum: np.ndarray
    k_spectrum: np.ndarray
    eigenvalues: np.ndarray
    g_q: np.ndarray
    g_k: np.ndarray
    singular: np.ndarray
    xcov: np.ndarray
    xcorr: np.ndarray
    trt_qsk: np.ndarray
    residual: dict[str, np.ndarray]
    scale: dict[str, np.ndarray]

    @classmethod
    def zeros(cls, N: int, weights: CanonicalModel, t_max: int, xcorr_t_max: int, window: int):
        """Every array zero, for N sequences of the model's shape."""
        L, H, r = weights.n_layers, weights.n_heads, weights.d_head
        offsets = list(range(-t_max, t_max + 1))
        xoffsets = list(range(-xcorr_t_max, xcorr_t_max + 1))
        F, X = window // 2 + 1, len(xoffsets)
        return cls(
            offsets=offsets,
            xcorr_offsets=xoffsets,
            window=window,
            trt=np.zeros((N, L, H, len(offsets))),
            x_spectrum=np.zeros((L, F)),
            q_spectrum=np.zeros((L, F)),
            k_spectrum=np.zeros((L, F)),
            eigenvalues=np.zeros((L, H, r), dtype=complex),
            g_q=np.zeros((L, H, r, window)),
            g_k=np.zeros((L, H, r, window)),
            singular=np.zeros((L, H, r)),
            xcov=np.zeros((L, H, X, r)),
            xcorr=np.zeros((L, H, X, r)),
            trt_qsk=np.zeros((L, H, X)),
            residual={name: np.zeros((L, H)) for name in ("svd", "xcov")},
            scale={name: np.zeros((L, H)) for name in ("svd", "xcov")},
        )

    def worst_identity(self) -> tuple[str, float]:
        """(identity, largest residual / max(1, scale)) over layers and heads."""
        ratios = {
            name: float((self.residual[name] / np.maximum(self.scale[name], 1.0)).max())
            for name in self.residual
        }
        name = max(ratios, key=ratios.get)
        return name, ratios[name]


SUMS = ("x", "q", "k", "gq", "gk", "xcov", "xcorr", "trt_qsk")  # LayerPass's sums over sequences


class LayerPass:
    """One layer's share of the pass: the bilinear form of its heads (`bilinear_form`, R_rank's
    eigen-decomposition), the two identities' running maxima per head, and the sums over
    sequences of the spectra, eigen-wave spectra, xcov, xcorr and tr_t(Q S K^T); fed one batch
    at a time (`add`), written into the result's layer row at the end (`write`)."""

    def __init__(self, layer, include_bias: bool, xoffsets: list[int], window: int, device):
        self.layer, self.include_bias, self.xoffsets, self.window = (
            layer,
            include_bias,
            xoffsets,
            window,
        )
        self.form = bilinear_form(layer, include_bias)
        r = layer.d_head
        values, vectors = eigen_rotation(self.form.rotation("rank"))
        self.eigenvalues, self.singular = values, self.form.S[:, :r].cpu().numpy()
        self.P = torch.from_numpy(vectors).to(device)
        self.W_Q, self.W_K = (w.to(device) for w in score_weights(layer, include_bias))
        self.s = self.form.S[:, :r].to(device)[None, :, None, :]  # [1, H, 1, r]
        self.residual = {name: np.zeros(layer.n_heads) for name in ("svd", "xcov")}
        self.scale = {name: np.zeros(layer.n_heads) for name in ("svd", "xcov")}
        self.sums = dict.fromkeys(SUMS, 0.0)

    def add(self, batch) -> None:
        """One batch of the layer's input: identities checked, sums added."""
        mask = batch.mask.double()
        x = score_input(batch.X, self.layer, self.include_bias) * mask[..., None]
        Q, K = self.form.queries(x), self.form.keys(x)
        qsk = (Q * self.s) @ K.transpose(-1, -2)
        self._check_svd(x, qsk)
        batch_trt_qsk = diagonal_sums(qsk, self.xoffsets)  # [B, H, X]
        del qsk
        batch_xcov = cross_covariance(Q, K, self.xoffsets)  # [B, H, X, r]
        weighted = (batch_xcov * self.s).sum(-1)
        _track(self.residual["xcov"], self.scale["xcov"], weighted, batch_trt_qsk, dims=(0, 2))
        sums, window = self.sums, self.window
        sums["trt_qsk"] += batch_trt_qsk.sum(0)
        sums["xcov"] += batch_xcov.sum(0)
        sums["xcorr"] += cross_correlation(batch_xcov, Q, K).sum(0)
        Qw, Kw = Q[:, :, :window], K[:, :, :window]
        sums["x"] += amplitude_spectrum(x[:, :window], dim=1).sum(0)  # [F, D]
        sums["q"] += amplitude_spectrum(Qw, dim=2).sum(0)  # [H, F, r]
        sums["k"] += amplitude_spectrum(Kw, dim=2).sum(0)
        sums["gq"] += eigen_wave_spectra(Qw, self.P).sum(0)  # [H, window, r]
        sums["gk"] += eigen_wave_spectra(Kw, self.P).sum(0)

    def _check_svd(self, x: torch.Tensor, qsk: torch.Tensor) -> None:
        """X W^A X^T against Q S K^T, one head's [B, n, n] at a time."""
        x_q = torch.einsum("bnd,hde->bhne", x, self.W_Q)
        x_k = torch.einsum("bnd,hde->bhne", x, self.W_K)
        for h in range(self.layer.n_heads):
            direct = x_q[:, h : h + 1] @ x_k[:, h : h + 1].transpose(-1, -2)
            at = slice(h, h + 1)
            _track(self.residual["svd"][at], self.scale["svd"][at], direct, qsk[:, at], (0, 2, 3))

    def write(self, result: PassResult, l: int, n_sequences: int) -> None:
        """The layer's means over sequences into row `l` (0-based) of `result`."""
        mean = {name: (value / n_sequences).cpu().numpy() for name, value in self.sums.items()}
        result.x_spectrum[l] = mean["x"].max(axis=1)
        result.q_spectrum[l] = mean["q"].max(axis=(0, 2))
        result.k_spectrum[l] = mean["k"].max(axis=(0, 2))
        result.g_q[l], result.g_k[l] = mean["gq"].transpose(0, 2, 1), mean["gk"].transpose(0, 2, 1)
        result.xcov[l], result.xcorr[l], result.trt_qsk[l] = (
            mean["xcov"],
            mean["xcorr"],
            mean["trt_qsk"],
        )
        result.eigenvalues[l], result.singular[l] = self.eigenvalues, self.singular
        for name in ("svd", "xcov"):
            result.residual[name][l], result.scale[name][l] = self.residual[name], self.scale[name]


def corpus_pass(
    store: HiddenStates,
    weights: CanonicalModel,
    settings: PositionSettings,
    log=None,
    layers: list[int] | None = None,
) -> PassResult:
    """The whole pass (`settings`: t_max, xcorr_t_max, include_bias, batch_size, device); see
    the module docstring. `layers` (0-based; None: all): a layer
    shard's layers, whose arrays hold zeros at the others' (`core.streaming.merged` adds)."""
    t_max, xcorr_t_max = settings.t_max, settings.xcorr_t_max
    batch_size, device = settings.batch_size, settings.device
    window = int(store.lengths.min())
    if window < 2:
        raise ValueError(f"{store.path}: the shortest sequence has {window} real tokens")
    result = PassResult.zeros(store.n_sequences, weights, t_max, xcorr_t_max, window)
    for l in range(weights.n_layers) if layers is None else layers:
        part = LayerPass(
            weights.layers[l], settings.include_bias, result.xcorr_offsets, window, device
        )
        for batch in store.batches(l, batch_size, device):
            result.trt[batch.start : batch.stop, l] = batch_trt(batch, part.layer, result.offsets)
            part.add(batch)
        part.write(result, l, store.n_sequences)
        if log is not None:
            log.info(
                "layer %d: max residual X W^A X^T vs Q S K^T %.3g, sum s xcov vs tr_t %.3g",
                l + 1,
                part.residual["svd"].max(),
                part.residual["xcov"].max(),
            )
    return result


def batch_trt(batch, layer, offsets: list[int]) -> np.ndarray:
    """tr_t(A) of one batch at `offsets`, padding query rows and keys excluded.  [B, H, T]"""
    A = attention_probs(batch.X, batch.mask, layer)  # padding keys get weight 0
    A.mul_(batch.mask[:, None, :, None].to(A.dtype))  # drop padding query rows
    return diagonal_sums(A, offsets).double().cpu().numpy()


def trt_pass(
    store: HiddenStates,
    weights: CanonicalModel,
    settings: PositionSettings,
    layers: list[int] | None = None,
) -> np.ndarray:
    """tr_t(A) alone, for any attention (rotary models, where the bilinear analyses of
    `corpus_pass` do not apply), t = -t_max..t_max, of `layers` (0-based; None: all; zeros at the
    others).  [N, L, H, T]"""
    t_max, batch_size, device = settings.t_max, settings.batch_size, settings.device
    offsets = list(range(-t_max, t_max + 1))
    trt = np.zeros((store.n_sequences, weights.n_layers, weights.n_heads, len(offsets)))
    for l in range(weights.n_layers) if layers is None else layers:
        for batch in store.batches(l, batch_size, device):
            trt[batch.start : batch.stop, l] = batch_trt(batch, weights.layers[l], offsets)
    return trt


def _track(residual: np.ndarray, scale: np.ndarray, a: torch.Tensor, b: torch.Tensor, dims):
    """Per head, keep the running max of |a| and of |a - b| (head on dim 1); overwrites a.
    max |a| is taken as max(max a, -min a): no temporary of a's size."""
    largest = torch.maximum(a.amax(dim=dims), a.amin(dim=dims).neg())
    np.maximum(scale, largest.cpu().numpy(), out=scale)
    np.maximum(residual, a.sub_(b).abs_().amax(dim=dims).cpu().numpy(), out=residual)


def trt_table(trt: np.ndarray, offsets: list[int]) -> pd.DataFrame:
    """`sequence layer head t value`: tr_t(A) [N, L, H, T] per sequence (0-based store row),
    1-based layers and heads."""
    N, L, H, T = trt.shape
    table = index_grid(sequence=np.arange(N), layer=L, head=H, t=np.array(offsets))
    table["value"] = trt.reshape(-1)
    return table


def mean_trt(result: PassResult) -> np.ndarray:
    """tr_t(A) averaged over sequences.  [L, H, T]"""
    return result.trt.mean(axis=0)


def spectra_table(result: PassResult) -> pd.DataFrame:
    """`layer source frequency cycles_per_token amplitude`, source X, Q or K."""
    frames = []
    for source, values in (
        ("X", result.x_spectrum),
        ("Q", result.q_spectrum),
        ("K", result.k_spectrum),
    ):
        L, F = values.shape
        table = index_grid(layer=L, frequency=np.arange(F))
        table.insert(1, "source", source)
        table["cycles_per_token"] = table["frequency"] / result.window
        table["amplitude"] = values.reshape(-1)
        frames.append(table)
    return pd.concat(frames, ignore_index=True)


def shifts_table(result: PassResult) -> pd.DataFrame:
    """Per head and eigenvalue of R_rank: the frequency f != 0 where g(f, theta) of Q p_i is
    largest, its amplitude, and Delta = window * theta / (2 pi f).
    `layer head index theta modulus frequency amplitude delta`."""
    L, H, r, n = result.g_q.shape
    freqs = signed_frequencies(n)
    g = result.g_q[..., 1:]  # drop f = 0 (FFT order puts it first)
    theta = np.angle(result.eigenvalues)
    # A real eigenvalue (theta 0 or pi) has a real eigen-wave, whose |DFT| is the same at f and
    # -f: only f > 0 is searched, so round-off cannot pick the sign of f and Delta.
    real = np.isin(theta, (0.0, np.pi, -np.pi))[..., None] & (freqs[1:] < 0)
    best = np.where(real, -np.inf, g).argmax(axis=-1)
    frequency = freqs[1:][best]
    table = index_grid(layer=L, head=H, index=r)
    table["theta"] = theta.reshape(-1)
    table["modulus"] = np.abs(result.eigenvalues).reshape(-1)
    table["frequency"] = frequency.reshape(-1)
    table["amplitude"] = np.take_along_axis(g, best[..., None], axis=-1).reshape(-1)
    table["delta"] = shift(theta, frequency, n).reshape(-1)
    return table


def g_map_table(result: PassResult, heads: list[tuple[int, int]]) -> pd.DataFrame:
    """g(f, theta) for the selected heads at positive frequencies f = 1..window // 2 (the
    conjugate eigenvalue carries the mirror image): `layer head wave index theta modulus
    frequency amplitude delta positions`, wave Q (Q p_i) or K (K p_i), positions = window."""
    n = result.window
    freqs = signed_frequencies(n)
    positive = np.flatnonzero(freqs > 0)
    frames = []
    for layer, head in heads:
        values = result.eigenvalues[layer - 1, head - 1]
        for wave, g in (("Q", result.g_q), ("K", result.g_k)):
            amp = g[layer - 1, head - 1][:, positive]  # [r, P]
            table = index_grid(index=len(values), frequency=freqs[positive])
            theta = np.repeat(np.angle(values), len(positive))
            table.insert(0, "layer", layer)
            table.insert(1, "head", head)
            table.insert(2, "wave", wave)
            table.insert(4, "theta", theta)
            table.insert(5, "modulus", np.repeat(np.abs(values), len(positive)))
            table["amplitude"] = amp.reshape(-1)
            table["delta"] = shift(theta, table["frequency"].to_numpy(), n)
            table["positions"] = n
            frames.append(table)
    return pd.concat(frames, ignore_index=True)


def xcorr_table(result: PassResult, heads: list[tuple[int, int]]) -> pd.DataFrame:
    """`layer head column singular_value t xcov xcorr` (means over sequences) for the selected
    heads; column j = 1..r in descending singular-value order."""
    frames = []
    for layer, head in heads:
        s = result.singular[layer - 1, head - 1]
        table = index_grid(column=len(s), t=np.array(result.xcorr_offsets))
        table.insert(0, "layer", layer)
        table.insert(1, "head", head)
        table.insert(3, "singular_value", np.repeat(s, len(result.xcorr_offsets)))
        table["xcov"] = result.xcov[layer - 1, head - 1].T.reshape(-1)
        table["xcorr"] = result.xcorr[layer - 1, head - 1].T.reshape(-1)
        frames.append(table)
    return pd.concat(frames, ignore_index=True)


def xcov_sum_table(result: PassResult) -> pd.DataFrame:
    """`layer head t sum_s_xcov trt_qsk abs_residual`: sum_j s_j xcov_j(t) against
    tr_t(Q S K^T), both averaged over sequences, every head."""
    L, H, X = result.trt_qsk.shape
    table = index_grid(layer=L, head=H, t=result.xcorr_offsets)
    weighted = (result.xcov * result.singular[:, :, None, :]).sum(-1)
    table["sum_s_xcov"] = weighted.reshape(-1)
    table["trt_qsk"] = result.trt_qsk.reshape(-1)
    table["abs_residual"] = np.abs(table["sum_s_xcov"] - table["trt_qsk"])
    return table


def identity_table(result: PassResult) -> pd.DataFrame:
    """`layer head identity max_abs_residual max_abs_value`, over every sequence (and pair of
    real tokens, or offset t), for XWAXT=QSKT and sum_s_xcov=trt_QSKT."""
    frames = []
    for key, name in (("svd", "XWAXT=QSKT"), ("xcov", "sum_s_xcov=trt_QSKT")):
        L, H = result.residual[key].shape
        table = index_grid(layer=L, head=H)
        table["identity"] = name
        table["max_abs_residual"] = result.residual[key].reshape(-1)
        table["max_abs_value"] = result.scale[key].reshape(-1)
        frames.append(table)
    return pd.concat(frames, ignore_index=True)
