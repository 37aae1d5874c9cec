"""Corpus kinds: public data files or the user's own -> token arrays for one tokenizer
(encoded.h5, see attnscope.core.store).

Every sequence is START seg_a SEP seg_b SEP (pair kinds) or START text SEP (single segment),
with START/SEP from `attnscope.core.tokens.special_ids` (GPT-2: <|endoftext|> for both). RoBERTa's
own pair template has two separators in the middle; here every family gets the same single-SEP
layout so that positions and categories mean the same thing across models.

Pieces are built word by word so that every piece keeps the index of its word (`word_ids`).
A word that follows another word is tokenized with a leading space (" " + word), the first word
of a segment without one: byte-level BPE (GPT-2, RoBERTa) then sees the word as it would in
running text, and WordPiece/SentencePiece are unaffected. Where the data say that no space
precedes a word (UD `SpaceAfter=No`, multi-word tokens such as "did|n't", GAP text), it gets none.
The data are text: a word that spells a special token of the tokenizer (WikiText's "<unk>" for
Gemma's tokenizer) is split into ordinary pieces; only the texts kind keeps typed specials whole.

`dropped` counts the sequences left out for length before n_sequences were collected.
The kinds of independent sentences (ewt, gap) store the n_sequences they read longest first,
each meta keeping its place in reading order as "read_order" (`layout.longest_first`), so
that a batch of consecutive sequences is little padding; the others keep reading order
(wiki's first sequences are the data's first windows).
With mask_rate > 0, round(mask_rate * n) of the n non-special pieces of each sequence are
replaced by the mask token (numpy default_rng(mask_seed), sequences in order); each sequence's
meta then holds "masked" (positions) and "masked_ids" (the original ids, e.g. MLM labels).

A reader module may give `most_sequences(files, settings)`, the most sequences its data can
yield whatever the tokenizer: the disk estimate sizes an unreachable `n_sequences` by it.

Each kind's reading and decisions are in the module named like it (wiki, wiki_windows, ewt,
gap, clark, texts, repeated_random; wiki512 is wiki_windows under the name older configs
use); `layout` holds what they share. Adding a kind: a module here with
`read(files, pieces, settings)`, its entry in `KINDS`, and its block in config/schema.yaml
(the `kind` enum) and in the Corpora table of docs/configuration.md (tests/test_corpora.py
and tests/test_docs.py check them).

This module stays light (the workflow reads `KINDS` when it parses the Snakefile, without
numpy): readers and the layout engine are imported when a corpus is built.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from attnscope.data.datasets import DATA_FILES, DataFile

if TYPE_CHECKING:
    from attnscope.core.store import EncodedCorpus
    from attnscope.data.corpora.layout import Pieces, Sequence

DEFAULTS = {
    "n_sequences": 0,
    "max_length": 128,
    "segment_ids": "pair",
    "mask_rate": 0,
    "mask_seed": 0,
}
MAX_UNKNOWN_SHARE = 0.5  # more unknown pieces than this: the tokenizer does not fit the text

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CorpusKind:
    """One corpus kind. Its reader is `read(files, pieces, settings)` in the module of this
    package named like the kind: the candidate sequences, in order, before the length filter."""

    name: str
    data_files: tuple[DataFile, ...] = ()  # the pinned public files it is built from, in order
    own_setting: str | None = None  # the setting the user must give (clark: path; texts: texts)
    own_setting_is_file: bool = False  # that setting names a file the corpus is built from
    module: str | None = None  # the reader's module when not named like the kind (an alias)
    longest_first: bool = False  # independent sentences: stored longest first (`layout`)

    def read(self, files: list[str], pieces: Pieces, settings: dict) -> Iterator[Sequence]:
        """Candidate sequences from `files` (the data files) and `settings` (defaults filled)."""
        module = importlib.import_module(f"{__name__}.{self.module or self.name}")
        return module.read(files, pieces, settings)

    def most_sequences(self, files: list[str], settings: dict) -> int | None:
        """At most how many sequences the kind yields from its data `files` with `settings`,
        whatever the tokenizer (the reader module's `most_sequences`); None where only
        encoding tells (clark, texts: their own setting)."""
        module = importlib.import_module(f"{__name__}.{self.module or self.name}")
        most = getattr(module, "most_sequences", None)
        return most(files, {**DEFAULTS, **settings}) if most and self.data_files else None

    def own_files(self, settings: dict) -> list[str]:
        """The user's file named by the kind's own setting ([path] for clark), else []."""
        value = settings.get(self.own_setting) if self.own_setting_is_file else None
        return [str(value)] if value else []


def _pinned(*relpaths: str) -> tuple[DataFile, ...]:
    return tuple(DATA_FILES[relpath] for relpath in relpaths)


WIKITEXT_2 = _pinned("wikitext-2/valid.txt", "wikitext-2/test.txt")
KINDS = {
    kind.name: kind
    for kind in (
        CorpusKind("wiki", WIKITEXT_2),
        CorpusKind("wiki_windows", WIKITEXT_2),
        CorpusKind("wiki512", WIKITEXT_2, module="wiki_windows"),  # the name configs know
        CorpusKind(
            "ewt",
            _pinned(
                "ud-english-ewt-r2.16/en_ewt-ud-dev.conllu",
                "ud-english-ewt-r2.16/en_ewt-ud-test.conllu",
            ),
            longest_first=True,
        ),
        CorpusKind(
            "gap",
            _pinned(
                "gap-coreference/gap-development.tsv",
                "gap-coreference/gap-test.tsv",
                "gap-coreference/gap-validation.tsv",
            ),
            longest_first=True,
        ),
        CorpusKind("clark", own_setting="path", own_setting_is_file=True),
        CorpusKind("texts", own_setting="texts"),
        CorpusKind("repeated_random", own_setting="length"),
    )
}


def encode_corpus(kind: str, data_files: list[str], tokenizer, settings: dict) -> EncodedCorpus:
    """Build the corpus `kind` from `data_files` (clark: settings["path"]) for `tokenizer`."""
    from attnscope.data.corpora.layout import Pieces, assemble, longest_first, unknown_share

    settings = {**DEFAULTS, **settings}
    if kind not in KINDS:
        raise ValueError(f"unknown corpus kind {kind!r} (known: {', '.join(KINDS)})")
    if settings["segment_ids"] not in ("pair", "zeros"):
        raise ValueError(f"segment_ids must be 'pair' or 'zeros', not {settings['segment_ids']!r}")
    if settings["mask_rate"] > 0 and tokenizer.mask_token_id is None:
        raise ValueError(
            f"mask_rate {settings['mask_rate']} needs a mask token, but tokenizer "
            f"{tokenizer.name_or_path!r} has none; set mask_rate: 0 for this model"
        )
    pieces = Pieces(tokenizer)
    max_length = settings["max_length"]
    files = [str(p) for p in data_files]
    inputs = [*KINDS[kind].own_files(settings), *files]
    sequences, dropped = [], 0
    for seq in KINDS[kind].read(files, pieces, settings):
        if len(seq.ids) > max_length:
            dropped += 1
            continue
        sequences.append(seq)
        if len(sequences) == settings["n_sequences"]:
            break
    if not sequences:
        raise ValueError(
            f"corpus kind {kind!r} is empty: no sequence of at most {max_length} pieces "
            f"from {', '.join(inputs) or 'no files'}"
        )
    share = unknown_share(sequences, tokenizer)
    if share > MAX_UNKNOWN_SHARE:
        raise ValueError(
            f"corpus kind {kind!r}: {share:.0%} of its pieces are the unknown token "
            f"{tokenizer.unk_token!r} of the tokenizer in {tokenizer.name_or_path}: the tokenizer "
            "does not fit the text (a wrong or incomplete tokenizer folder?)"
        )
    if settings["n_sequences"] and len(sequences) < settings["n_sequences"]:
        log.warning(
            "corpus %s: %d sequences, fewer than n_sequences %d",
            kind,
            len(sequences),
            settings["n_sequences"],
        )
    corpus = assemble(sequences, tokenizer, settings, kind, inputs, dropped)
    return longest_first(corpus) if KINDS[kind].longest_first else corpus
