"""Kind ewt: UD English EWT dev then test, consecutive sentence pairs with gold trees.

Multi-word token lines and empty nodes are skipped. Meta per sequence: words, heads (0-based
word index, -1 for ROOT), relations, upos, split (dev or test, from the file name),
sentence_ids, segment_a_words. Sentences i, i+1 of one document form a pair; a document's odd
last sentence stays alone as [START] s [SEP]. Sequences over max_length are dropped, not cut.
A limit (`n_sequences`) is shared between dev and test (`split_quotas`): the probes train on
dev and report on test, so each needs sequences.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import conllu

from attnscope.data.corpora.layout import Pieces, Sequence


def _space_after(token) -> bool:
    return (token["misc"] or {}).get("SpaceAfter") != "No"


def _sentence(tokens: conllu.TokenList) -> dict:
    """{id, words, spaces, heads (1-based, 0 root), relations, upos} of one sentence;
    spaces[i]: a space precedes word i (from SpaceAfter=No, on multi-word tokens too)."""
    sentence = {
        "id": tokens.metadata.get("sent_id"),
        "words": [],
        "spaces": [],
        "heads": [],
        "relations": [],
        "upos": [],
    }
    space, mwt_end, mwt_space = False, 0, True
    for token in tokens:
        index = token["id"]
        if isinstance(index, tuple):  # (1, "-", 2): a multi-word token; (3, ".", 1): empty node
            if index[1] == "-":
                mwt_end, mwt_space = index[2], _space_after(token)
            continue
        sentence["words"].append(token["form"])
        sentence["spaces"].append(space)
        sentence["heads"].append(token["head"])
        sentence["relations"].append(token["deprel"])
        sentence["upos"].append(token["upos"])
        if index < mwt_end:
            space = False
        elif index == mwt_end:
            space = mwt_space
        else:
            space = _space_after(token)
    return sentence


def conllu_documents(paths: list[str]) -> Iterator[list[dict]]:
    """Documents (split at `# newdoc` comments) as lists of sentences, see `_sentence`."""
    for path in paths:
        document: list[dict] = []
        with open(path, encoding="utf-8") as f:
            for tokens in conllu.parse_incr(f):
                if ("newdoc id" in tokens.metadata or "newdoc" in tokens.metadata) and document:
                    yield document
                    document = []
                if tokens:
                    document.append(_sentence(tokens))
        if document:
            yield document


def ud_split(path: str) -> str:
    """'dev', 'test' or 'train' from a UD file name (en_ewt-ud-dev.conllu -> dev)."""
    for split in ("dev", "test", "train"):
        if f"-{split}" in Path(path).name:
            return split
    return Path(path).stem


def split_quotas(n_sequences: int, n_files: int) -> list[int | None]:
    """How many sequences each file (split) gives when `n_sequences` > 0: an even share, the
    first files taking the remainder (5 over dev and test: 3, 2); None each for 0 (all)."""
    if not n_sequences:
        return [None] * n_files
    return [n_sequences // n_files + (k < n_sequences % n_files) for k in range(n_files)]


def most_sequences(files: list[str], settings: dict) -> int:
    """The sentence pairs of `files` (a document's odd last sentence alone): at most as many
    sequences, whatever the tokenizer."""
    return sum((len(document) + 1) // 2 for document in conllu_documents(files))


def read(files: list[str], pieces: Pieces, settings: dict) -> Iterator[Sequence]:
    """Dev's pairs, then test's. With `n_sequences` > 0 each split gives its share of them
    (`split_quotas`, counting pairs within `max_length`), so that a small corpus still has
    test sequences for the probes; a split short of its share leaves the rest to the next."""
    quotas = split_quotas(settings["n_sequences"], len(files))
    owed = 0
    for path, quota in zip(files, quotas, strict=True):
        split, kept = ud_split(path), 0
        wanted = None if quota is None else quota + owed
        for document in conllu_documents([path]):
            for i in range(0, len(document), 2):
                if wanted is not None and kept == wanted:
                    break
                sequence = _pair(document[i : i + 2], split, pieces)
                kept += len(sequence.ids) <= settings["max_length"]
                yield sequence
            if wanted is not None and kept == wanted:
                break
        owed = 0 if wanted is None else wanted - kept


def _pair(sentences: list[dict], split: str, pieces: Pieces) -> Sequence:
    """[START] s_i [SEP] s_i+1 [SEP] (or [START] s_i [SEP]) with heads made 0-based overall."""
    words, heads, segments, offset = [], [], [], 0
    for s in sentences:
        words += s["words"]
        heads += [offset + h - 1 if h > 0 else -1 for h in s["heads"]]
        segments.append(pieces(s["words"], [False, *s["spaces"][1:]]))
        offset += len(s["words"])
    meta = {
        "words": words,
        "heads": heads,
        "relations": [r for s in sentences for r in s["relations"]],
        "upos": [u for s in sentences for u in s["upos"]],
        "split": split,
        "sentence_ids": [s["id"] for s in sentences],
        "segment_a_words": len(sentences[0]["words"]),
    }
    return pieces.layout(segments, meta)
