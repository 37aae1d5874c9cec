"""Kind texts: the config's own texts (setting texts), in order.

Each a string (one segment) or a list of two strings (sentence A, sentence B). Words are split
as in gap, except that the tokenizer's special tokens stay whole: a typed "[MASK]" (or
"<mask>", "<|endoftext|>") is one word and that token's one piece. Over-long texts stop the
run (a text the user typed is never dropped silently).
"""

from __future__ import annotations

from collections.abc import Iterator

from attnscope.data.corpora.characters import visible
from attnscope.data.corpora.gap import spaces_before, split_words
from attnscope.data.corpora.layout import Pieces, Sequence


def read(files: list[str], pieces: Pieces, settings: dict) -> Iterator[Sequence]:
    """The sequences of settings["texts"] (`files`, the pinned data, are none)."""
    max_length = settings["max_length"]
    for n, text in enumerate(settings.get("texts") or []):
        segments = [text] if isinstance(text, str) else list(text)
        if not 1 <= len(segments) <= 2 or not all(
            isinstance(s, str) and visible(s) for s in segments
        ):
            raise ValueError(
                f"texts: item {n} must be a string with a visible character or a list of two "
                "(sentence A, B)"
            )
        spans = [split_words(s, tuple(pieces.specials)) for s in segments]
        words = [[w for w, _, _ in spans_] for spans_ in spans]
        spaces = [spaces_before(s, spans_) for s, spans_ in zip(segments, spans, strict=True)]
        seq = pieces.layout(
            [pieces(w, sp, specials=True) for w, sp in zip(words, spaces, strict=True)],
            {"words": [w for ws in words for w in ws], "text": segments},
        )
        if len(seq.ids) > max_length:
            raise ValueError(
                f"texts: item {n} has {len(seq.ids)} pieces, more than max_length {max_length}"
            )
        yield seq
