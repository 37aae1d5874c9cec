"""Periodicity of position embeddings: DFT amplitude spectra and PCA (Yamamoto & Matsuzaki).

Each column of the position-embedding matrix PE [T, d] is a signal along positions. Its
amplitude spectrum is the single-sided DFT amplitude (see `amplitude_spectrum`), so that a
column a * cos(2 pi f0 p / T + phi) shows amplitude a at frequency f0. Frequencies are integers
f = 0..T//2, counted in cycles per T positions (the paper's axis); f / T is cycles per token.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

SPECTRUM_COLUMNS = ["embedding", "frequency", "cycles_per_token", "mean", "q25", "q75"]


def amplitude_spectrum(x: torch.Tensor, dim: int = -2) -> torch.Tensor:
    """Single-sided DFT amplitude along `dim` (positions): |F_f| / T at f = 0 (and at T/2 for
    even T), 2 |F_f| / T in between.  [..., T, ...] -> [..., T // 2 + 1, ...], same dtype family.
    """
    T = x.shape[dim]
    amp = torch.fft.rfft(x, dim=dim).abs() / T
    inner = torch.ones(T // 2 + 1, dtype=amp.dtype, device=amp.device)
    inner[1 : (T + 1) // 2] = 2.0
    shape = [1] * amp.dim()
    shape[dim] = -1
    return amp * inner.reshape(shape)


def spectrum_summary(signal: torch.Tensor, embedding: str) -> pd.DataFrame:
    """Amplitude spectrum of every column of `signal` [T, d], summarised over columns.

    One row per frequency: mean, 25% and 75% quantiles (linear interpolation) of the d
    column amplitudes.
    """
    amp = amplitude_spectrum(signal.double(), dim=0).cpu().numpy()  # [F, d]
    T = signal.shape[0]
    frequency = np.arange(amp.shape[0])
    q25, q75 = np.quantile(amp, [0.25, 0.75], axis=1)
    return pd.DataFrame(
        {
            "embedding": embedding,
            "frequency": frequency,
            "cycles_per_token": frequency / T,
            "mean": amp.mean(axis=1),
            "q25": q25,
            "q75": q75,
        }
    )


def embedding_spectra(
    position_embeddings: torch.Tensor, word_embeddings: torch.Tensor, input_ids: np.ndarray
) -> pd.DataFrame:
    """Spectra of the position embeddings [T, d] (embedding = "position") and, as the
    control, of the word embeddings of one real input `input_ids` [n] without position
    embeddings, token types or LayerNorm (embedding = "word")."""
    words = word_embeddings[torch.as_tensor(input_ids, dtype=torch.long)]
    return pd.concat(
        [
            spectrum_summary(position_embeddings, "position"),
            spectrum_summary(words, "word"),
        ],
        ignore_index=True,
    )


def pca_cumulative_variance(position_embeddings: torch.Tensor) -> pd.DataFrame:
    """Cumulative share of variance (0..1) explained by the first k principal components of
    the rows of PE [T, d] (columns centred), for k = 1..min(T, d)."""
    pe = position_embeddings.double()
    centred = pe - pe.mean(dim=0, keepdim=True)
    variance = torch.linalg.svdvals(centred).square().cpu().numpy()
    cumulative = np.cumsum(variance) / variance.sum()
    return pd.DataFrame(
        {"components": np.arange(1, len(cumulative) + 1), "cumulative_variance": cumulative}
    )


def first_full_input(input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
    """The pieces of the first sequence with the most real pieces.  [N, L] -> [n]"""
    lengths = attention_mask.sum(axis=1)
    row = int(np.argmax(lengths))
    return input_ids[row, : int(lengths[row])]
