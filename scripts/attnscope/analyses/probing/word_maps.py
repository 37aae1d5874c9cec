"""Piece-level maps -> word-level maps (Clark et al. 2019, section 4).

Attention TO a word is the sum over its pieces; attention FROM a word is the mean over its
pieces (`mode="mean"`, the paper) or its first piece's row (`mode="first"`, Clark's code).
Special tokens and padding (word id -1) belong to no word: the real special tokens together form
one extra pseudo-word at index W (the last), used only as the ROOT candidate of the probe.
"""

from __future__ import annotations

import torch

MODES = ("mean", "first")


def aggregation(word_ids: torch.Tensor, mask: torch.Tensor, n_words: int, mode: str = "mean"):
    """(from_matrix, to_matrix), each [B, W + 1, n] for word_ids, mask [B, n].

    to_matrix[b, w, p] = 1 where piece p belongs to word w (row W: real special tokens);
    from_matrix averages those pieces (mean) or picks the first one (first).
    """
    if mode not in MODES:
        raise ValueError(f"word-level mode must be one of {MODES}, not {mode!r}")
    word_ids = word_ids.long()
    index = torch.where(word_ids >= 0, word_ids, torch.full_like(word_ids, n_words))
    real = mask.bool() & (word_ids < n_words)
    to = torch.nn.functional.one_hot(index.clamp_max(n_words), n_words + 1).transpose(1, 2)
    to = to.float() * real[:, None, :].float()
    if mode == "mean":
        count = to.sum(-1, keepdim=True).clamp_min(1)
        source = to / count
    else:
        first = (to.cumsum(-1) == 1) & (to > 0)
        source = first.float()
        special = to[:, n_words : n_words + 1]
        source[:, n_words : n_words + 1] = special / special.sum(-1, keepdim=True).clamp_min(1)
    return source, to


def word_level(
    maps: torch.Tensor, word_ids: torch.Tensor, mask: torch.Tensor, n_words: int, mode="mean"
) -> torch.Tensor:
    """Word-level maps [B, H, W + 1, W + 1] from piece-level maps [B, H, n, n] (query i, key j).

    Index W is the pseudo-word of the special tokens; words beyond a sequence's own count are 0.
    """
    source, to = aggregation(word_ids, mask, n_words, mode)
    return torch.einsum("bwi,bhij,bvj->bhwv", source, maps.float(), to)
