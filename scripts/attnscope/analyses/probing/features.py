"""Per-sentence word-level features for the probe, on disk (probe_features.h5).

For each source, `{source}/maps` [F, P] float16 holds every layer's and head's word-level map
(F = layers x heads, layer-major, rows normalised to sum 1 over the W words and the special
pseudo-word) for all sequences, flattened: sequence s owns the columns offsets[s] ..
offsets[s + 1] of its (W_s + 1)^2 word pairs (query word, key word, row-major).
`embeddings` [total words, d] float32: the embedding output hidden/0, mean over each word's
pieces (stands in for GloVe); sequence s owns rows word_offsets[s] .. word_offsets[s + 1].
"""

from __future__ import annotations

import h5py
import numpy as np
import torch


def layout(n_words: np.ndarray):
    """(pair offsets, word offsets), each [N + 1], of sequences with n_words [N] words."""
    pairs = np.concatenate([[0], np.cumsum((n_words + 1) ** 2)])
    words = np.concatenate([[0], np.cumsum(n_words)])
    return pairs, words


class FeatureWriter:
    """Writes the features of one corpus pass, batch by batch."""

    def __init__(self, f: h5py.File, n_words: np.ndarray, n_layers: int, d_model: int):
        self.f = f
        self.n_words = n_words
        self.n_layers = n_layers
        self.pairs, self.words = layout(n_words)
        f.create_dataset("n_words", data=n_words)
        f.create_dataset("offsets", data=self.pairs)
        f.create_dataset("word_offsets", data=self.words)
        f.create_dataset("embeddings", (self.words[-1], d_model), dtype="float32")
        f.attrs["description"] = __doc__

    def add_maps(self, source, layer, head_labels, maps: torch.Tensor, start: int, stop: int):
        """maps [B, H', W + 1, W + 1] word-level (specials pseudo-word last) for sequences
        start..stop, 1-based `layer`."""
        H = maps.shape[1]
        key = f"{source}/maps"
        if key not in self.f:
            self.f.create_dataset(
                key,
                (H * self.n_layers, self.pairs[-1]),
                dtype="float16",
                chunks=(H, min(65536, int(self.pairs[-1]))),
            )
            self.f[source].attrs["heads"] = head_labels
        rows = maps.float() / maps.float().sum(-1, keepdim=True).clamp_min(1e-12)
        W = maps.shape[-1] - 1
        blocks = []
        for b, s in enumerate(range(start, stop)):  # one slice per sequence, not per pair
            w = int(self.n_words[s])
            index = torch.cat([torch.arange(w), torch.tensor([W])])
            block = rows[b][:, index][:, :, index]
            blocks.append(block.reshape(H, -1))
        flat = torch.cat(blocks, dim=1).numpy().astype(np.float16)
        rows_at = slice((layer - 1) * H, layer * H)
        self.f[key][rows_at, self.pairs[start] : self.pairs[stop]] = flat

    def add_embeddings(self, X: torch.Tensor, source_matrix: torch.Tensor, start: int, stop: int):
        """X [B, n, d] the embedding output; source_matrix [B, W + 1, n] (mean over pieces)."""
        words = torch.einsum("bwn,bnd->bwd", source_matrix, X.float())
        parts = [words[b, : int(self.n_words[s])] for b, s in enumerate(range(start, stop))]
        self.f["embeddings"][self.words[start] : self.words[stop]] = torch.cat(parts).numpy()


def read_sequences(path: str, source: str, indices: np.ndarray):
    """[(maps [F, W + 1, W + 1] float16, embeddings [W, d])] of the sequences `indices`."""
    with h5py.File(path, "r") as f:
        pairs, words, n_words = f["offsets"][()], f["word_offsets"][()], f["n_words"][()]
        lo, hi = int(min(indices)), int(max(indices)) + 1  # one read, then split
        maps = f[f"{source}/maps"][:, pairs[lo] : pairs[hi]]
        embeddings = f["embeddings"][words[lo] : words[hi]]
    out = []
    for s in indices:
        w = int(n_words[s]) + 1
        block = maps[:, pairs[s] - pairs[lo] : pairs[s + 1] - pairs[lo]].reshape(-1, w, w)
        out.append((block, embeddings[words[s] - words[lo] : words[s + 1] - words[lo]]))
    return out
