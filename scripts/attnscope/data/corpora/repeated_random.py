"""Kind repeated_random: START r r, r a seeded draw of `length` ordinary vocabulary pieces.

The synthetic corpus of induction and duplicate-token heads (Olsson et al. 2022; TransformerLens'
head detector): on the second copy a head can look up the piece after the query's piece's first
occurrence (induction) or that occurrence itself (duplicate token), and a language model's loss
falls from the first copy to the second. START is the model's start token (`special_ids`); there
is no separator. Each r is `numpy.random.default_rng(seed)`'s `choice` of `length` distinct
ordinary pieces, one draw per sequence in order, so that every piece of r occurs once in it and
its first occurrence is unambiguous. Ordinary pieces (`ordinary_ids`): the vocabulary without
the tokenizer's special and added tokens and without bracketed control names ("[unused0]",
"<0x0A>", "<|im_start|>"), which a model never saw in running text.

Meta per sequence: "length" (pieces of r), "second" (0-based position of the second copy's first
piece: 1 + length). Pieces are words of their own (word_ids 0..2 length - 1).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from attnscope.core.files import atomic_path
from attnscope.data.corpora.layout import Pieces, Sequence

CONTROL_NAME = re.compile(r"^(\[[^\]]+\]|<[^>]+>)$")
ORDINARY_COUNTS = Path(".snakemake/attnscope/ordinary_pieces.json")


def ordinary_ids(tokenizer) -> np.ndarray:
    """The ids of the ordinary pieces of `tokenizer`'s vocabulary, sorted.  [V'] int64"""
    excluded = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}))
    ids = [
        int(token_id)
        for piece, token_id in tokenizer.get_vocab().items()
        if int(token_id) not in excluded and not CONTROL_NAME.match(piece)
    ]
    return np.array(sorted(set(ids)), dtype=np.int64)


def ordinary_count(folder: Path, cache: Path = ORDINARY_COUNTS) -> int:
    """How many ordinary pieces the tokenizer in `folder` has (`ordinary_ids`), kept in
    `cache` (JSON, relative to the working folder) under the folder and the size and
    modification time of each of its files: the configuration check before every run loads
    a tokenizer (and `transformers`, seconds) only when its files changed."""
    folder = Path(folder).resolve()
    key = json.dumps(
        [str(folder), *((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in _files(folder))]
    )
    try:
        counts = json.loads(cache.read_text())
    except (OSError, ValueError):
        counts = {}
    if key not in counts:
        from transformers import AutoTokenizer

        counts[key] = len(ordinary_ids(AutoTokenizer.from_pretrained(folder)))
        with atomic_path(cache) as partial:  # whole or not at all, whichever run writes last
            partial.write_text(json.dumps(counts))
    return counts[key]


def _files(folder: Path) -> list[Path]:
    """The files of a model folder, sorted (a tokenizer may read any of them)."""
    return sorted(f for f in folder.iterdir() if f.is_file())


def read(files: list[str], pieces: Pieces, settings: dict) -> Iterator[Sequence]:
    """`n_sequences` sequences START r r (`files`, the pinned data, are none)."""
    length, count = settings.get("length"), settings["n_sequences"]
    if not isinstance(length, int) or length < 1:
        raise ValueError(f"kind repeated_random needs length, a positive integer (not {length!r})")
    if count < 1:
        raise ValueError("kind repeated_random needs n_sequences >= 1 (0 would be endless)")
    vocabulary = ordinary_ids(pieces.tokenizer)
    if len(vocabulary) < length:
        raise ValueError(
            f"kind repeated_random: length {length} needs {length} distinct ordinary pieces, but "
            f"tokenizer {pieces.tokenizer.name_or_path!r} has {len(vocabulary)}; lower length"
        )
    rng = np.random.default_rng(settings.get("seed", 0))
    for _ in range(count):
        r = rng.choice(vocabulary, size=length, replace=False).tolist()
        ids = [pieces.start, *r, *r]
        word_ids = [-1, *range(2 * length)]
        yield Sequence(ids, word_ids, len(ids), {"length": length, "second": 1 + length})
