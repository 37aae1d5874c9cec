"""Token categories used by every analysis: [CLS], [SEP], punctuation, other.

Codes (int8 in the stores): OTHER 0, CLS 1, SEP 2, PUNCT 3, PAD -1.
RoBERTa: <s> is CLS, </s> is SEP. GPT-2 has one special token, <|endoftext|>: the corpora
put it first (category CLS, the sequence start) and between/after segments (category SEP),
so the same tables mean the same thing for every architecture. A tokenizer without BOS
(Qwen2/2.5/3) is laid out the same way with its EOS.
PUNCT is "." and "," as whole pieces (Clark et al. 2019), with or without a leading
word-boundary marker (GPT-2/RoBERTa "Ġ,").
"""

from __future__ import annotations

import numpy as np

OTHER, CLS, SEP, PUNCT, PAD = 0, 1, 2, 3, -1
CATEGORY_NAMES = {OTHER: "other", CLS: "CLS", SEP: "SEP", PUNCT: "punct"}
PUNCT_PIECES = {".", ","}


def special_ids(tokenizer) -> tuple[int, int]:
    """(start id, separator id) for a tokenizer: [CLS]/[SEP], <s>/</s>, BOS/EOS, or the EOS
    twice where there is no BOS (GPT-2's <|endoftext|>; Qwen2/2.5/3 have `bos_token: null`
    and add nothing before a text: here the EOS starts it, so that position 0 is a special
    piece on every model)."""
    first = (tokenizer.cls_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id)
    start = next((token for token in first if token is not None), None)
    sep = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    if start is None or sep is None:
        raise ValueError(
            f"tokenizer {tokenizer.name_or_path!r} has neither a separator nor an end-of-text "
            "token (sep_token, eos_token): the corpora cannot lay out a sequence"
        )
    return int(start), int(sep)


def punct_ids(tokenizer) -> set[int]:
    """Vocabulary ids of the pieces that count as punctuation ("." and ",")."""
    ids = set()
    for piece in PUNCT_PIECES:
        for variant in (piece, "Ġ" + piece, "▁" + piece):
            token_id = tokenizer.convert_tokens_to_ids(variant)
            if token_id is not None and token_id != tokenizer.unk_token_id:
                ids.add(int(token_id))
    return ids


def categorize(
    input_ids: np.ndarray, attention_mask: np.ndarray, tokenizer, first_is_start: bool = True
) -> np.ndarray:
    """Category code of every piece.  input_ids, attention_mask [N, L] -> [N, L] int8.

    With `first_is_start`, position 0 is CLS even when start and separator share an id (GPT-2).
    """
    start, sep = special_ids(tokenizer)
    cat = np.full(input_ids.shape, OTHER, dtype=np.int8)
    cat[np.isin(input_ids, list(punct_ids(tokenizer)))] = PUNCT
    cat[input_ids == sep] = SEP
    cat[input_ids == start] = CLS if start != sep else SEP
    if first_is_start:
        cat[:, 0] = np.where(input_ids[:, 0] == start, CLS, cat[:, 0])
    cat[attention_mask == 0] = PAD
    return cat


def contrast_ids(
    tokenizer, contrast: list[str], setting: str = "analyses.mixing.contrast"
) -> tuple[int, int] | None:
    """Token ids of a contrast [target, foil] (None when it is empty): two different pieces
    of the model's vocabulary, each one piece and not the unknown token (e.g. " Paris" with
    its leading space for a byte-level BPE). A ValueError names `setting` otherwise."""
    if not contrast:
        return None
    if len(contrast) != 2:
        raise ValueError(f"{setting}: give [target, foil], two pieces, not {list(contrast)!r}")
    ids = []
    for text in contrast:
        pieces = tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(pieces) != 1:
            shown = tokenizer.convert_ids_to_tokens(pieces)
            raise ValueError(
                f"{setting}: {text!r} is {len(pieces)} pieces {shown} for this "
                "model's tokenizer; target and foil must each be one piece"
            )
        if tokenizer.unk_token_id is not None and pieces[0] == tokenizer.unk_token_id:
            raise ValueError(
                f"{setting}: {text!r} is the unknown token {tokenizer.unk_token!r} for this "
                "model's tokenizer (not in its vocabulary); its logit says nothing of the word"
            )
        ids.append(int(pieces[0]))
    if ids[0] == ids[1]:
        shown = tokenizer.convert_ids_to_tokens(ids[:1])
        raise ValueError(
            f"{setting}: target {contrast[0]!r} and foil {contrast[1]!r} are the same piece "
            f"{shown} for this model's tokenizer; their logit difference is 0"
        )
    return ids[0], ids[1]


VISIBLE_WHITESPACE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"})


def piece_labels(tokenizer, ids) -> list[str]:
    """Each piece as text for display: the tokenizer's own decoding of the piece alone
    (byte-level BPE's "Ġcat" -> "cat", "Ċ" -> newline; SentencePiece's "▁cat" -> "cat";
    WordPiece keeps "##ing", which marks a word's continuation), without surrounding
    spaces; a piece that is only whitespace shows it as ␣ ↵ ⇥ ␍."""
    pieces = tokenizer.convert_ids_to_tokens([int(i) for i in ids])
    labels = []
    for piece in pieces:
        text = tokenizer.convert_tokens_to_string([piece])
        labels.append(text.strip() or text.translate(VISIBLE_WHITESPACE) or piece)
    return labels
