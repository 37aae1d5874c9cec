"""Corpus builders: public data files -> token arrays for one tokenizer (encoded.h5).

Every sequence is START seg_a SEP seg_b SEP (pair kinds) or START text SEP (single segment),
with START/SEP from `attnscope.core.tokens.special_ids` (GPT-2: <|endoftext|> for both). RoBERTa's
own pair template has two separators in the middle; here every family gets the same single-SEP
layout so that positions and categories mean the same thing across models.

Pieces are built word by word so that every piece keeps the index of its word (`word_ids`).
A word that follows another word is tokenized with a leading space (" " + word), the first word
of a segment without one: byte-level BPE (GPT-2, RoBERTa) then sees the word as it would in
running text, and WordPiece/SentencePiece are unaffected. Where the data say that no space
precedes a word (UD `SpaceAfter=No`, multi-word tokens such as "did|n't", GAP text), it gets none.

Kinds and decisions:
    wiki     WikiText-2 valid then test. Blank and heading lines are skipped; " @-@ ", " @,@ ",
             " @.@ " are joined back ("60-year", "1,000", "0.7", as in the raw text); "<unk>" is
             kept as a word. Paragraphs i, i+1 of one article form [START] p_i [SEP] p_i+1 [SEP]
             (pairs (1,2), (3,4), ...; an article's odd last paragraph is left out). The longer
             segment loses its last word until the sequence has at most max_length pieces (on a
             tie the second); a pair with an emptied segment is dropped.
    wiki512  The running WikiText-2 text (headings dropped, paragraphs joined) as one stream of
             pieces cut into consecutive windows of START + max_length - 1 pieces, no SEP. A word
             belongs to the window that holds its first piece; its pieces that spill into the
             next window get word id -1. A last, incomplete window is left out.
    ewt      UD English EWT dev then test. Multi-word token lines and empty nodes are skipped.
             Meta per sequence: words, heads (0-based word index, -1 for ROOT), relations,
             upos, split (dev or test, from the file name), sentence_ids, segment_a_words.
             Sentences i, i+1 of one document form a pair; a document's odd last sentence
             stays alone as [START] s [SEP]. Sequences over max_length are dropped, not cut.
    gap      GAP development, test, validation. Words are runs of letters/digits and single
             other non-space characters, as BERT's basic split ("(John" -> "(", "John";
             "Pauline's" -> "Pauline", "'", "s"): then every Pronoun, A and B of GAP covers
             whole words exactly. A mention is the list of words its character span overlaps.
             Over-long examples are dropped.
    clark    A JSON list of {"tokens": [...]} in Clark et al.'s format: WordPiece tokens,
             "##" pieces are joined to the word before; "[CLS]" must come first and "[SEP]"
             last; the words between separators become the segments. Over-long ones are dropped.
    texts    The config's own texts (setting texts): each a string (one segment) or a list of
             two strings (sentence A, sentence B). Words are split as in gap; over-long texts
             stop the run (a text the user typed is never dropped silently).

`dropped` counts the sequences left out for length before n_sequences were collected.
With mask_rate > 0, round(mask_rate * n) of the n non-special pieces of each sequence are
replaced by the mask token (numpy default_rng(mask_seed), sequences in order); each sequence's
meta then holds "masked" (positions) and "masked_ids" (the original ids, e.g. MLM labels).
"""

from __future__ import annotations

import csv
import json
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from attnscope.core.files import sha256_of
from attnscope.core.store import atomic_h5
from attnscope.core.tokens import categorize, special_ids

KINDS = ("wiki", "wiki512", "ewt", "gap", "clark", "texts")
DEFAULTS = {
    "n_sequences": 0,
    "max_length": 128,
    "segment_ids": "pair",
    "mask_rate": 0,
    "mask_seed": 0,
}
GAP_COLUMNS = "ID Text Pronoun Pronoun-offset A A-offset A-coref B B-offset B-coref".split()

log = logging.getLogger(__name__)


MAX_UNKNOWN_SHARE = 0.5  # more unknown pieces than this: the tokenizer does not fit the text


@dataclass
class EncodedCorpus:
    """N sequences padded to L = the longest real length; arrays [N, L] as in core.store."""

    input_ids: np.ndarray  # int32, padding = the tokenizer's pad id (GPT-2: its eos)
    attention_mask: np.ndarray  # int8
    token_type_ids: np.ndarray  # int8
    category: np.ndarray  # int8, PAD = -1
    word_ids: np.ndarray  # int32, -1 for specials and padding
    meta: list[dict]
    kind: str = ""
    settings: dict | None = None  # the corpus settings with defaults filled in
    inputs: tuple[str, ...] = ()  # the files it was built from
    tokenizer: str = ""  # name_or_path
    dropped: int = 0


@dataclass
class _Sequence:
    ids: list[int]
    word_ids: list[int]
    n_first: int  # pieces of segment 0: up to and including the first SEP
    meta: dict


class _Pieces:
    """Piece ids of words for one tokenizer, cached by (word, space before)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.start, self.sep = special_ids(tokenizer)
        self.cache: dict[str, list[int]] = {}

    def __call__(self, words: list[str], spaces: list[bool] | None = None) -> list[list[int]]:
        """Pieces of each word; spaces[i]: a space precedes word i (default: all but the first)."""
        if spaces is None:
            spaces = [i > 0 for i in range(len(words))]
        keys = [" " + w if s else w for w, s in zip(words, spaces, strict=True)]
        missing = list(dict.fromkeys(k for k in keys if k not in self.cache))
        if missing:
            found = self.tokenizer(missing, add_special_tokens=False)["input_ids"]
            self.cache.update(zip(missing, found, strict=True))
        return [self.cache[k] for k in keys]

    def layout(self, segments: list[list[list[int]]], meta: dict) -> _Sequence:
        """START seg SEP [seg SEP ...] from each segment's per-word pieces; words numbered on."""
        ids, word_ids, word, n_first = [self.start], [-1], 0, 0
        for segment in segments:
            for pieces in segment:
                ids += pieces
                word_ids += [word] * len(pieces)
                word += 1
            ids.append(self.sep)
            word_ids.append(-1)
            n_first = n_first or len(ids)
        return _Sequence(ids, word_ids, n_first, meta)


def encode_corpus(kind: str, data_files: list[str], tokenizer, settings: dict) -> EncodedCorpus:
    """Build the corpus `kind` from `data_files` (clark: settings["path"]) for `tokenizer`."""
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
    pieces = _Pieces(tokenizer)
    max_length = settings["max_length"]
    inputs = [str(p) for p in data_files]
    if kind == "wiki":
        candidates = _wiki(inputs, pieces, max_length)
    elif kind == "wiki512":
        candidates = _wiki512(inputs, pieces, max_length, settings["n_sequences"])
    elif kind == "ewt":
        candidates = _ewt(inputs, pieces)
    elif kind == "gap":
        candidates = _gap(inputs, pieces)
    elif kind == "texts":
        candidates = _texts(settings.get("texts") or [], pieces, max_length)
    else:
        if not settings.get("path"):
            raise ValueError("corpus kind 'clark' needs a path to the JSON file (setting path)")
        inputs = [str(settings["path"]), *inputs]
        candidates = _clark(settings["path"], pieces)

    sequences, dropped = [], 0
    for seq in candidates:
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
    return _assemble(sequences, tokenizer, settings, kind, inputs, dropped)


def unknown_share(sequences, tokenizer) -> float:
    """Share of the unknown token among the word pieces of `sequences` (special tokens such
    as [CLS] and [SEP] left out; 0 for a tokenizer without an unknown token)."""
    unknown = tokenizer.unk_token_id
    if unknown is None:
        return 0.0
    ids = np.concatenate([np.asarray(s.ids) for s in sequences])
    specials = np.array(sorted(set(tokenizer.all_special_ids) - {unknown}))
    words = ids[~np.isin(ids, specials)]
    return float(np.mean(words == unknown)) if len(words) else 0.0


def _assemble(sequences, tokenizer, settings, kind, inputs, dropped) -> EncodedCorpus:
    """Pad to the longest sequence, set segment ids, mask, categorize."""
    N, L = len(sequences), max(len(s.ids) for s in sequences)
    pad = (
        tokenizer.pad_token_id if tokenizer.pad_token_id is not None else special_ids(tokenizer)[1]
    )
    input_ids = np.full((N, L), pad, dtype=np.int32)
    attention_mask = np.zeros((N, L), dtype=np.int8)
    token_type_ids = np.zeros((N, L), dtype=np.int8)
    word_ids = np.full((N, L), -1, dtype=np.int32)
    for i, seq in enumerate(sequences):
        n = len(seq.ids)
        input_ids[i, :n] = seq.ids
        attention_mask[i, :n] = 1
        word_ids[i, :n] = seq.word_ids
        if settings["segment_ids"] == "pair":
            token_type_ids[i, seq.n_first : n] = 1
    meta = [seq.meta for seq in sequences]
    if settings["mask_rate"] > 0:
        _mask(
            input_ids, attention_mask, meta, tokenizer, settings["mask_rate"], settings["mask_seed"]
        )
    return EncodedCorpus(
        input_ids=input_ids,
        attention_mask=attention_mask,
        token_type_ids=token_type_ids,
        category=categorize(input_ids, attention_mask, tokenizer),
        word_ids=word_ids,
        meta=meta,
        kind=kind,
        settings=settings,
        inputs=tuple(inputs),
        tokenizer=str(tokenizer.name_or_path),
        dropped=dropped,
    )


def _mask(input_ids, attention_mask, meta, tokenizer, rate: float, seed: int) -> None:
    """Replace round(rate * n) non-special real pieces per sequence by the mask id, in place."""
    rng = np.random.default_rng(seed)
    specials = list({*special_ids(tokenizer), *tokenizer.all_special_ids})
    eligible = (attention_mask == 1) & ~np.isin(input_ids, specials)
    for i in range(len(input_ids)):
        candidates = np.flatnonzero(eligible[i])
        chosen = np.sort(rng.choice(candidates, size=round(rate * len(candidates)), replace=False))
        meta[i]["masked"] = chosen.tolist()
        meta[i]["masked_ids"] = input_ids[i, chosen].tolist()
        input_ids[i, chosen] = tokenizer.mask_token_id


def write_encoded(path: str | Path, corpus: EncodedCorpus) -> None:
    """Write encoded.h5 (datasets of attnscope.core.store; attrs kind, settings, sha256_inputs,
    tokenizer, dropped)."""
    with atomic_h5(path) as f:
        for name in ("input_ids", "attention_mask", "token_type_ids", "category", "word_ids"):
            f.create_dataset(name, data=getattr(corpus, name))
        f.create_dataset(
            "meta",
            data=[json.dumps(m, ensure_ascii=False) for m in corpus.meta],
            dtype=h5py.string_dtype("utf-8"),
        )
        f.attrs["kind"] = corpus.kind
        f.attrs["settings"] = json.dumps(corpus.settings)
        f.attrs["sha256_inputs"] = json.dumps({p: sha256_of(p) for p in corpus.inputs})
        f.attrs["tokenizer"] = corpus.tokenizer
        f.attrs["dropped"] = corpus.dropped


def read_meta(path: str | Path) -> list[dict]:
    """The per-sequence meta objects of an encoded.h5, in sequence order."""
    with h5py.File(path, "r") as f:
        return [json.loads(s) for s in f["meta"].asstr()[()]]


# --- wiki, wiki512 ---------------------------------------------------------------------------


def _wiki_paragraphs(paths: list[str]) -> Iterator[tuple[bool, list[str]]]:
    """(starts a new article, words) for every paragraph line; the first is a new article."""
    new_article = True
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for line in f:
                text = line.strip()
                if text.startswith("=") and text.endswith("="):
                    new_article = new_article or not text.startswith("= =")
                elif text:
                    for marker, joined in ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", ".")):
                        text = text.replace(marker, joined)
                    yield new_article, text.split()
                    new_article = False


def _wiki(paths: list[str], pieces: _Pieces, max_length: int) -> Iterator[_Sequence]:
    article: list[list[str]] = []
    for new_article, words in _wiki_paragraphs(paths):
        if new_article:
            article = []
        article.append(words)
        if len(article) % 2 == 0:
            seq = _wiki_pair(article[-2], article[-1], pieces, max_length)
            if seq is not None:
                yield seq


def _wiki_pair(a: list[str], b: list[str], pieces: _Pieces, max_length: int):
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


def _wiki512(paths: list[str], pieces: _Pieces, max_length: int, n: int) -> Iterator[_Sequence]:
    window = max_length - 1
    words: list[str] = []
    stream: list[list[int]] = []  # pieces of every word
    total = 0
    for _, paragraph in _wiki_paragraphs(paths):
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
        yield _Sequence(
            ids=[pieces.start, *ids[start:stop].tolist()],
            word_ids=[-1, *local.tolist()],
            n_first=window + 1,
            meta={"words": kept},
        )


# --- ewt -------------------------------------------------------------------------------------


def _conllu_documents(paths: list[str]) -> Iterator[list[dict]]:
    """Documents as lists of sentences {id, words, spaces, heads (1-based, 0 root), relations}.

    spaces[i]: a space precedes word i (from SpaceAfter=No, on multi-word tokens too).
    """
    for path in paths:
        document: list[dict] = []
        sentence = None
        with open(path, encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f] + [""]
        for line in lines:
            if line.startswith("# newdoc") and document:
                yield document
                document = []
            elif line.startswith("# sent_id"):
                sent_id = line.split("=", 1)[1].strip()
            elif line and not line.startswith("#"):
                if sentence is None:
                    sentence = {
                        "id": sent_id,
                        "words": [],
                        "spaces": [],
                        "heads": [],
                        "relations": [],
                        "upos": [],
                    }
                    space, mwt_end, mwt_space = False, 0, True
                cols = line.split("\t")
                if "-" in cols[0]:
                    mwt_end = int(cols[0].split("-")[1])
                    mwt_space = "SpaceAfter=No" not in cols[9]
                    continue
                if "." in cols[0]:
                    continue
                sentence["words"].append(cols[1])
                sentence["spaces"].append(space)
                sentence["heads"].append(int(cols[6]))
                sentence["relations"].append(cols[7])
                sentence["upos"].append(cols[3])
                index = int(cols[0])
                if index < mwt_end:
                    space = False
                elif index == mwt_end:
                    space = mwt_space
                else:
                    space = "SpaceAfter=No" not in cols[9]
            elif not line and sentence is not None:
                document.append(sentence)
                sentence = None
        if document:
            yield document


def ud_split(path: str) -> str:
    """'dev', 'test' or 'train' from a UD file name (en_ewt-ud-dev.conllu -> dev)."""
    for split in ("dev", "test", "train"):
        if f"-{split}" in Path(path).name:
            return split
    return Path(path).stem


def _ewt(paths: list[str], pieces: _Pieces) -> Iterator[_Sequence]:
    for path in paths:
        yield from _ewt_file(path, pieces)


def _ewt_file(path: str, pieces: _Pieces) -> Iterator[_Sequence]:
    split = ud_split(path)
    for document in _conllu_documents([path]):
        for i in range(0, len(document), 2):
            sentences = document[i : i + 2]
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
            yield pieces.layout(segments, meta)


# --- gap -------------------------------------------------------------------------------------


def _gap_words(text: str) -> list[tuple[str, int, int]]:
    """(word, start, end): runs of letters/digits and single other non-space characters."""
    return [(m.group(), *m.span()) for m in re.finditer(r"\w+|[^\w\s]", text)]


def _gap(paths: list[str], pieces: _Pieces) -> Iterator[_Sequence]:
    for path in paths:
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
        if rows and not set(GAP_COLUMNS) <= set(rows[0]):
            raise ValueError(f"{path}: not a GAP file (columns {', '.join(GAP_COLUMNS)} expected)")
        for row in rows:
            text = row["Text"]
            spans = _gap_words(text)
            mentions = {}
            for key in ("Pronoun", "A", "B"):
                start = int(row[f"{key}-offset"])
                end = start + len(row[key])
                if text[start:end] != row[key]:
                    raise ValueError(f"{path}: {row['ID']}: {key} {row[key]!r} not at {start}")
                mentions[key] = [i for i, (_, a, b) in enumerate(spans) if a < end and b > start]
            words = [w for w, _, _ in spans]
            spaces = [i > 0 and text[a - 1].isspace() for i, (_, a, _) in enumerate(spans)]
            meta = {
                "id": row["ID"],
                "words": words,
                "pronoun": mentions["Pronoun"],
                "a": mentions["A"],
                "b": mentions["B"],
                "a_coref": row["A-coref"].upper() == "TRUE",
                "b_coref": row["B-coref"].upper() == "TRUE",
            }
            yield pieces.layout([pieces(words, spaces)], meta)


# --- clark -----------------------------------------------------------------------------------


def _clark(path: str | Path, pieces: _Pieces) -> Iterator[_Sequence]:
    path = Path(path)
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
        segments: list[list[str]] = [[]]
        for token in tokens[1:-1]:
            if token == "[SEP]":
                segments.append([])
            elif token.startswith("##") and segments[-1]:
                segments[-1][-1] += token[2:]
            else:
                segments[-1].append(token)
        words = [w for segment in segments for w in segment]
        yield pieces.layout([pieces(s) for s in segments], {"words": words})


# --- texts -----------------------------------------------------------------------------------


def _texts(texts: list, pieces: _Pieces, max_length: int) -> Iterator[_Sequence]:
    for n, text in enumerate(texts):
        segments = [text] if isinstance(text, str) else list(text)
        if not 1 <= len(segments) <= 2 or not all(
            isinstance(s, str) and s.strip() for s in segments
        ):
            raise ValueError(
                f"texts: item {n} must be a non-empty string or a list of two (sentence A, B)"
            )
        spans = [_gap_words(s) for s in segments]
        words = [[w for w, _, _ in spans_] for spans_ in spans]
        spaces = [
            [i > 0 and s[a - 1].isspace() for i, (_, a, _) in enumerate(spans_)]
            for s, spans_ in zip(segments, spans, strict=True)
        ]
        seq = pieces.layout(
            [pieces(w, sp) for w, sp in zip(words, spaces, strict=True)],
            {"words": [w for ws in words for w in ws], "text": segments},
        )
        if len(seq.ids) > max_length:
            raise ValueError(
                f"texts: item {n} has {len(seq.ids)} pieces, more than max_length {max_length}"
            )
        yield seq
