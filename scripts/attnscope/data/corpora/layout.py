"""The piece layout every corpus kind shares (see the package docstring): words to pieces,
START seg SEP [seg SEP], padding into [N, L] arrays, segment ids, masking, unknown share."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from attnscope.core.store import TOKEN_ARRAYS, EncodedCorpus
from attnscope.core.tokens import categorize, special_ids


@dataclass
class Sequence:
    """One sequence before padding: piece ids, word index per piece (-1 for specials)."""

    ids: list[int]
    word_ids: list[int]
    n_first: int  # pieces of segment 0: up to and including the first SEP
    meta: dict


class Pieces:
    """Piece ids of words for one tokenizer, cached by (word, space before)."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.start, self.sep = special_ids(tokenizer)
        self.cache: dict[str, list[int]] = {}
        # the tokenizer's special tokens ([CLS], [MASK], <|endoftext|>, ...) by their text
        self.specials = {
            token: int(token_id)
            for token, token_id in zip(
                tokenizer.all_special_tokens, tokenizer.all_special_ids, strict=True
            )
        }

    def __call__(
        self, words: list[str], spaces: list[bool] | None = None, specials: bool = False
    ) -> list[list[int]]:
        """Pieces of each word; spaces[i]: a space precedes word i (default: all but the first).
        A word is text: one that spells a special token of the tokenizer (WikiText's "<unk>"
        for a tokenizer whose unknown token is "<unk>", as Gemma's and Llama 2's) is split into
        ordinary pieces, as a tokenizer without that special splits it. With `specials`, a
        word that is one of the tokenizer's special tokens (a "[MASK]" typed in a text) is
        that token's id alone, whatever the space before it."""
        if spaces is None:
            spaces = [i > 0 for i in range(len(words))]
        keys = [" " + w if s else w for w, s in zip(words, spaces, strict=True)]
        missing = list(dict.fromkeys(k for k in keys if k not in self.cache))
        if missing:
            found = self.tokenizer(missing, add_special_tokens=False, split_special_tokens=True)
            self.cache.update(zip(missing, found["input_ids"], strict=True))
        if specials:
            return [
                [self.specials[w]] if w in self.specials else self.cache[k]
                for w, k in zip(words, keys, strict=True)
            ]
        return [self.cache[k] for k in keys]

    def layout(self, segments: list[list[list[int]]], meta: dict) -> Sequence:
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
        return Sequence(ids, word_ids, n_first, meta)


def unknown_share(sequences: list[Sequence], tokenizer) -> float:
    """Share of the unknown token among the word pieces of `sequences` (special tokens such
    as [CLS] and [SEP] left out; 0 for a tokenizer without an unknown token)."""
    unknown = tokenizer.unk_token_id
    if unknown is None:
        return 0.0
    ids = np.concatenate([np.asarray(s.ids) for s in sequences])
    specials = np.array(sorted(set(tokenizer.all_special_ids) - {unknown}))
    words = ids[~np.isin(ids, specials)]
    return float(np.mean(words == unknown)) if len(words) else 0.0


def assemble(
    sequences: list[Sequence],
    tokenizer,
    settings: dict,
    kind: str,
    inputs: list[str],
    dropped: int,
) -> EncodedCorpus:
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
        mask_pieces(
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


def mask_pieces(input_ids, attention_mask, meta, tokenizer, rate: float, seed: int) -> None:
    """Replace round(rate * n) of the n non-special real pieces of each sequence [N, L] by the
    mask id, in place; meta[i] gets "masked" (positions) and "masked_ids" (the original ids)."""
    rng = np.random.default_rng(seed)
    specials = list({*special_ids(tokenizer), *tokenizer.all_special_ids})
    eligible = (attention_mask == 1) & ~np.isin(input_ids, specials)
    for i in range(len(input_ids)):
        candidates = np.flatnonzero(eligible[i])
        chosen = np.sort(rng.choice(candidates, size=round(rate * len(candidates)), replace=False))
        meta[i]["masked"] = chosen.tolist()
        meta[i]["masked_ids"] = input_ids[i, chosen].tolist()
        input_ids[i, chosen] = tokenizer.mask_token_id


def longest_first(corpus: EncodedCorpus) -> EncodedCorpus:
    """The corpus with its sequences ordered by real length, longest first (equal lengths in
    reading order), each meta holding its place in reading order as "read_order": every batch
    of consecutive sequences then holds sequences of about one length, so that little of it
    is padding (UD EWT at batch 16: 2.1 times the real pieces in reading order, 1.01 here),
    and the longest batch runs first (a memory limit shows at once)."""
    order = np.argsort(-corpus.attention_mask.sum(axis=1), kind="stable")
    arrays = {name: getattr(corpus, name)[order] for name in TOKEN_ARRAYS}
    meta = [{**corpus.meta[i], "read_order": int(i)} for i in order]
    return replace(corpus, **arrays, meta=meta)
