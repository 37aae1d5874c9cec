"""Kind wiki_windows (and its alias wiki512): WikiText-2 (valid then test, about 500k pieces)
as running text cut into contiguous windows of any length.

The paragraphs (read as for kind wiki, headings dropped) are joined into one stream of pieces
cut into consecutive windows of START + max_length - 1 pieces, no SEP: window k holds stream
pieces k * (max_length - 1) up to (k + 1) * (max_length - 1), without overlap or gap. A word
belongs to the window that holds its first piece; its pieces that spill into the next window
get word id -1. A last, incomplete window is left out. max_length may be anything up to the
model's context (checked before any job): 512 is the position analyses' default (`wiki512`),
4,096 a long window.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from attnscope.data.corpora.layout import Pieces, Sequence
from attnscope.data.corpora.wiki import paragraphs


def most_sequences(files: list[str], settings: dict) -> int:
    """Windows at most, whatever the tokenizer: a word's pieces are at most its UTF-8 bytes
    and a piece for the space before it (WordPiece, byte-level BPE, SentencePiece with byte
    fallback)."""
    pieces = sum(len(w.encode()) + 1 for _, words in paragraphs(files) for w in words)
    return pieces // (settings["max_length"] - 1)


def read(files: list[str], pieces: Pieces, settings: dict) -> Iterator[Sequence]:
    window = settings["max_length"] - 1
    n = settings["n_sequences"]
    words: list[str] = []
    stream: list[list[int]] = []  # pieces of every word
    total = 0
    for _, paragraph in paragraphs(files):
        spaces = [bool(words) or i > 0 for i in range(len(paragraph))]
        words += paragraph
        stream += pieces(paragraph, spaces)
        total += sum(map(len, stream[-len(paragraph) :]))
        if n and total >= n * window:
            break
    lengths = np.array([len(w) for w in stream], dtype=np.int64)
    ids = np.array([p for word in stream for p in word], dtype=np.int64)
    owner = np.repeat(np.arange(len(stream)), lengths)  # word index of every piece
    first = np.zeros(len(ids), dtype=bool)  # the piece is its word's first
    first[(np.cumsum(lengths) - lengths)[lengths > 0]] = True
    for start in range(0, len(ids) - window + 1, window):
        stop = start + window
        heads = owner[start:stop][first[start:stop]]
        if len(heads):
            w0, w1 = heads[0], owner[stop - 1]
            local = np.where(owner[start:stop] >= w0, owner[start:stop] - w0, -1)
            kept = words[w0 : w1 + 1]
        else:
            local, kept = np.full(window, -1), []
        yield Sequence(
            ids=[pieces.start, *ids[start:stop].tolist()],
            word_ids=[-1, *local.tolist()],
            n_first=window + 1,
            meta={"words": kept},
        )
