"""Kind clark: the user's JSON file (setting path) in Clark et al.'s format.

A JSON list of {"tokens": [...]}: WordPiece tokens, "##" pieces are joined to the word before;
"[CLS]" must come first and "[SEP]" last; the words between separators become the segments.
Over-long ones are dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from attnscope.data.corpora.layout import Pieces, Sequence


def read(files: list[str], pieces: Pieces, settings: dict) -> Iterator[Sequence]:
    """The sequences of the file settings["path"] (`files`, the pinned data, are none)."""
    if not settings.get("path"):
        raise ValueError("corpus kind 'clark' needs a path to the JSON file (setting path)")
    path = Path(settings["path"])
    if not path.is_file():
        raise FileNotFoundError(f"clark corpus file {path} does not exist")
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"clark corpus file {path} is not valid JSON: {err}") from err
    if not isinstance(items, list):
        raise ValueError(f"clark corpus file {path}: expected a list of {{'tokens': [...]}}")
    for n, item in enumerate(items):
        tokens = item.get("tokens") if isinstance(item, dict) else None
        if (
            not isinstance(tokens, list)
            or not all(isinstance(t, str) for t in tokens)
            or len(tokens) < 2
            or tokens[0] != "[CLS]"
            or tokens[-1] != "[SEP]"
        ):
            raise ValueError(
                f"clark corpus file {path}: item {n} needs 'tokens', a list of strings "
                "that starts with '[CLS]' and ends with '[SEP]'"
            )
        segments = _segments(tokens[1:-1])
        words = [w for segment in segments for w in segment]
        yield pieces.layout([pieces(s) for s in segments], {"words": words})


def _segments(tokens: list[str]) -> list[list[str]]:
    """The words of each segment of the tokens between [CLS] and the last [SEP]."""
    segments: list[list[str]] = [[]]
    for token in tokens:
        if token == "[SEP]":
            segments.append([])
        elif token.startswith("##") and segments[-1]:
            segments[-1][-1] += token[2:]
        else:
            segments[-1].append(token)
    return segments
