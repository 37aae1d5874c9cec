"""Kind gap: GAP coreference development, test, validation; one snippet per sequence.

Words are runs of letters/digits and single other non-space characters, as BERT's basic split
("(John" -> "(", "John"; "Pauline's" -> "Pauline", "'", "s"): then every Pronoun, A and B of
GAP covers whole words exactly. A mention is the list of words its character span overlaps.
Over-long examples are dropped.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterator

from attnscope.data.corpora.layout import Pieces, Sequence

GAP_COLUMNS = "ID Text Pronoun Pronoun-offset A A-offset A-coref B B-offset B-coref".split()


def split_words(text: str, keep: tuple[str, ...] = ()) -> list[tuple[str, int, int]]:
    """(word, start, end) character spans: runs of letters/digits and single other non-space
    characters; each string of `keep` (a tokenizer's special tokens, e.g. "[MASK]") is one
    word where it occurs."""
    whole = [re.escape(k) for k in sorted(keep, key=len, reverse=True) if k]
    pattern = "|".join([*whole, r"\w+", r"[^\w\s]"])
    return [(m.group(), *m.span()) for m in re.finditer(pattern, text)]


def spaces_before(text: str, spans: list[tuple[str, int, int]]) -> list[bool]:
    """Whether whitespace precedes each word of `split_words(text)` (never the first)."""
    return [i > 0 and text[start - 1].isspace() for i, (_, start, _) in enumerate(spans)]


def most_sequences(files: list[str], settings: dict) -> int:
    """The snippets (rows) of `files`: at most as many sequences."""
    count = 0
    for path in files:
        with open(path, encoding="utf-8", newline="") as f:
            count += sum(1 for _ in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return count


def read(files: list[str], pieces: Pieces, settings: dict) -> Iterator[Sequence]:
    for path in files:
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        if rows and not set(GAP_COLUMNS) <= set(rows[0]):
            raise ValueError(f"{path}: not a GAP file (columns {', '.join(GAP_COLUMNS)} expected)")
        for row in rows:
            yield _snippet(row, path, pieces)


def _snippet(row: dict, path: str, pieces: Pieces) -> Sequence:
    """[START] text [SEP] with the Pronoun, A and B mentions as word indices."""
    text = row["Text"]
    spans = split_words(text)
    mentions = {}
    for key in ("Pronoun", "A", "B"):
        start = int(row[f"{key}-offset"])
        end = start + len(row[key])
        if text[start:end] != row[key]:
            raise ValueError(f"{path}: {row['ID']}: {key} {row[key]!r} not at {start}")
        mentions[key] = [i for i, (_, a, b) in enumerate(spans) if a < end and b > start]
    words = [w for w, _, _ in spans]
    meta = {
        "id": row["ID"],
        "words": words,
        "pronoun": mentions["Pronoun"],
        "a": mentions["A"],
        "b": mentions["B"],
        "a_coref": row["A-coref"].upper() == "TRUE",
        "b_coref": row["B-coref"].upper() == "TRUE",
    }
    return pieces.layout([pieces(words, spaces_before(text, spans))], meta)
