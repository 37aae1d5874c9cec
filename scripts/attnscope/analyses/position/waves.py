"""Queries and keys as waves along positions (Yamamoto & Matsuzaki §3.4-3.5).

Q, K [..., n, r] are one head's queries and keys in singular-vector coordinates
(`bilinear.BilinearForm`), one row per position; rows of padding are zero.

- Eigen-waves: for an eigenvector p of R_rank with eigenvalue m e^{j theta}, Q p and K p are
  complex signals along positions; g(f, theta) = |DFT(Q p)|_f / n at the signed frequency f
  (cycles per n positions). If a component of K p equals Q p shifted by Delta tokens
  (K p (i) = Q p (i + Delta), i.e. the key of token i looks like the query of token i + Delta),
  then theta = 2 pi f Delta / n, so Delta = n theta / (2 pi f); the head's scores then peak
  at keys j = i - Delta, relative position t = -Delta.
- xcov_j(t) = sum_i q_ij k_{i+t,j} (Eq. 11) and, with S = diag(s_j),
  sum_j s_j xcov_j(t) = tr_t(Q S K^T) (Eq. 13-15).
- xcorr_j(t) = (xcov_j(t) - mean_t xcov_j(t)) / (||q_j|| ||k_j||) (Eq. 12), the mean taken over
  the offsets computed (t = -t_max..t_max).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def cross_covariance(Q: torch.Tensor, K: torch.Tensor, offsets: Sequence[int]) -> torch.Tensor:
    """xcov_j(t) = sum_i q_ij k_{i+t,j} for t in `offsets`.  [..., n, r] x 2 -> [..., T, r]

    Computed as a circular cross-correlation by FFT along positions, zero-padded to at least
    n + max|t| so that no term wraps around (0 for |t| >= n).
    """
    n = Q.shape[-2]
    size = 1 << (n + max(abs(t) for t in offsets)).bit_length()
    spectrum = torch.fft.rfft(Q, n=size, dim=-2).conj() * torch.fft.rfft(K, n=size, dim=-2)
    circular = torch.fft.irfft(spectrum, n=size, dim=-2)
    index = torch.tensor([t % size for t in offsets], device=Q.device)
    return circular.index_select(-2, index)


def cross_correlation(xcov: torch.Tensor, Q: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """xcorr_j(t) from xcov [..., T, r] and the columns' norms (0 where a column is 0)."""
    norms = Q.norm(dim=-2) * K.norm(dim=-2)  # [..., r]
    centred = xcov - xcov.mean(dim=-2, keepdim=True)
    safe = torch.where(norms > 0, norms, torch.ones_like(norms))
    return torch.where(norms[..., None, :] > 0, centred / safe[..., None, :], 0.0)


def eigen_wave_spectra(Q: torch.Tensor, P: torch.Tensor) -> torch.Tensor:
    """|DFT(Q p_i)| / n along positions for every eigenvector p_i (columns of P [H, r, r]).

    Q [B, H, n, r] real -> [B, H, n, r], frequencies in `signed_frequencies(n)` order.
    """
    waves = Q.to(P.dtype) @ P[None]
    return torch.fft.fft(waves, dim=-2).abs() / Q.shape[-2]


def signed_frequencies(n: int) -> np.ndarray:
    """DFT frequencies in cycles per n positions, in FFT order: 0, 1, ..., -1.  [n] int"""
    return np.rint(np.fft.fftfreq(n, d=1.0 / n)).astype(int)


def shift(theta: np.ndarray, frequency: np.ndarray, n: int) -> np.ndarray:
    """Delta = n theta / (2 pi f), in tokens (NaN at f = 0); defined up to multiples of n / f."""
    f = np.asarray(frequency, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(f != 0, n * np.asarray(theta) / (2 * np.pi * f), np.nan)
