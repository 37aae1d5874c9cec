"""Kind wiki: WikiText-2 valid then test, as paragraph pairs.

Blank and heading lines are skipped; " @-@ ", " @,@ ", " @.@ " are joined back ("60-year",
"1,000", "0.7", as in the raw text); "<unk>" (WikiText's mark of a rare word) is kept as a
word, read as text (`layout.Pieces`): never a tokenizer's unknown token. Paragraphs i, i+1 of
one article form [START] p_i [SEP] p_i+1 [SEP] (pairs (1,2), (3,4), ...; an article's odd last
paragraph is left out). The longer segment loses its last word until the sequence has at most
max_length pieces (on a tie the second); a pair with an emptied segment is dropped.
"""

from __future__ import annotations

from collections.abc import Iterator

from attnscope.data.corpora.layout import Pieces, Sequence

JOINED = ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."))  # WikiText's split-off markers


def paragraphs(paths: list[str]) -> Iterator[tuple[bool, list[str]]]:
    """(starts a new article, words) for every paragraph line; the first is a new article."""
    new_article = True
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                text = line.strip()
                if text.startswith("=") and text.endswith("="):
                    new_article = new_article or not text.startswith("= =")
                elif text:
                    for marker, joined in JOINED:
                        text = text.replace(marker, joined)
                    yield new_article, text.split()
                    new_article = False


def read(files: list[str], pieces: Pieces, settings: dict) -> Iterator[Sequence]:
    article: list[list[str]] = []
    for new_article, words in paragraphs(files):
        if new_article:
            article = []
        article.append(words)
        if len(article) % 2 == 0:
            seq = _pair(article[-2], article[-1], pieces, settings["max_length"])
            if seq is not None:
                yield seq


def most_sequences(files: list[str], settings: dict) -> int:
    """The paragraph pairs of `files`: at most as many sequences, whatever the tokenizer."""
    pairs, article = 0, 0
    for new_article, _ in paragraphs(files):
        article = 1 if new_article else article + 1
        pairs += article % 2 == 0
    return pairs


def _pair(a: list[str], b: list[str], pieces: Pieces, max_length: int) -> Sequence | None:
    """Truncate the longer segment word by word until START a SEP b SEP fits; None if emptied."""
    pa, pb = pieces(a), pieces(b)
    na, nb = sum(map(len, pa)), sum(map(len, pb))
    while na + nb + 3 > max_length:
        if na > nb:
            na -= len(pa.pop())
        else:
            nb -= len(pb.pop())
    if not pa or not pb:
        return None
    words = a[: len(pa)] + b[: len(pb)]
    return pieces.layout([pa, pb], {"words": words, "segment_a_words": len(pa)})
