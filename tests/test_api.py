"""The notebook API (attnscope.load, view, decompose, norms, head_statistics) and the package:
the same results as the models' own outputs, from the installed package and from a wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch

import attnscope
from attnscope.analyses.views.page import read_page
from conftest import write_tiny_decoder_folder

ROOT = Path(__file__).parents[1]
PAIR = ["The cat sat on the mat.", "It slept."]


@pytest.fixture(scope="module")
def minilm():
    return attnscope.load()


def stored_states(model, text) -> list[np.ndarray]:
    """The hidden states of one text as the workflow stores them: [L + 1] x [n, d]."""
    with attnscope.states(model, [text]) as store:
        n = int(store.lengths[0])
        return [store.hidden(l, 0, 1)[0, :n] for l in range(store.n_layers + 1)]


def test_decompose_rebuilds_every_layer_and_keeps_its_norms(minilm):
    parts = attnscope.decompose(minilm, PAIR, vectors=True)
    states = stored_states(minilm, PAIR)
    L, n = minilm.weights.n_layers, len(states[0])
    assert parts.tokens[0] == "[CLS]" and len(parts.tokens) == n
    assert parts.check["max_rel"].max() < 1e-4
    for scope in ("AttnResLnFfResLn", "Propagated"):  # both end at the next hidden state
        assert parts.vectors[scope].shape == (L, n, n, states[0].shape[1])
        for l in range(L):
            rebuilt = parts.vectors[scope][l].sum(1) + parts.bias[scope][l]
            scale = np.abs(states[l + 1]).max()
            assert np.abs(rebuilt - states[l + 1]).max() < 1e-4 * scale
    for scope, vectors in parts.vectors.items():
        np.testing.assert_allclose(
            parts.maps[scope], np.linalg.norm(vectors, axis=-1), rtol=1e-5, atol=1e-6
        )
    with pytest.raises(ValueError, match="unknown scopes"):
        attnscope.decompose(minilm, "A cat.", scopes=("AttnResLnFf", "Everything"))


def test_norms_are_the_models_attention_times_the_value_norms(minilm):
    found = attnscope.norms(minilm, "The cat sat on the mat.")
    ids = minilm.tokenizer("The cat sat on the mat.", return_tensors="pt")
    with torch.no_grad():
        attentions = minilm.module(**ids, output_attentions=True).attentions
    L, H, n = len(attentions), minilm.weights.n_heads, ids["input_ids"].shape[1]
    assert found.alpha.shape == found.norms.shape == (L, H, n, n)
    assert found.summed.shape == (L, n, n) and found.fx.shape == (L, H, n)
    for l in range(L):
        np.testing.assert_allclose(found.alpha[l], attentions[l][0].numpy(), atol=1e-5)
    np.testing.assert_allclose(found.norms, found.alpha * found.fx[:, :, None, :], rtol=1e-6)
    # the head-summed norm is the mixing family's Attn scope (another code path)
    attn = attnscope.decompose(minilm, "The cat sat on the mat.", scopes=("Attn",)).maps["Attn"]
    np.testing.assert_allclose(found.summed, attn, rtol=1e-4, atol=1e-6)
    # ||sum_h|| <= sum_h ||.||: the triangle inequality
    assert (found.summed <= found.norms.sum(1) * (1 + 1e-5) + 1e-7).all()


def test_head_statistics_cover_every_head(minilm):
    heads, layers = attnscope.head_statistics(minilm, ["The cat sat on the mat.", PAIR])
    L, H = minilm.weights.n_layers, minilm.weights.n_heads
    assert len(heads) == L * H and len(layers) == L
    shares = heads[["prev", "self", "next", "cls", "sep", "punct"]]
    assert ((shares >= 0) & (shares <= 1)).all().all()


def test_view_is_the_pages_page(minilm):
    page = attnscope.view(minilm, PAIR)
    header, arrays = read_page(page.html)
    assert header["tokens"][:3] == ["[CLS]", "the", "cat"] and header["layers"] == 6
    assert "Propagated" in header["scopes"] and f"q/{header['layers']}" in arrays
    assert header["prediction"] == {"reason": "the model has no LM head"}
    assert page._repr_html_().startswith("<iframe srcdoc=")


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    """A tiny random Llama with its LM head and a byte-level BPE, loaded."""
    return attnscope.load(write_tiny_decoder_folder(tmp_path_factory.mktemp("llama"), "llama"))


def test_a_decoder_with_its_head_views_its_next_token(decoder):
    model = decoder
    assert model.lm_head == "causal" and model.weights.causal
    header, arrays = read_page(attnscope.view(model, "The cat sat on the mat.").html)
    n = header["n"]
    # what follows the text's last piece ".", not what follows the closing </s>
    assert header["tokens"][-1] == "</s>" and header["tokens"][n - 2] == "."
    assert header["prediction"]["positions"] == [n - 2]
    assert header["prediction"]["token"] == ["."] and header["prediction"]["kind"] == "next"
    parts = attnscope.decompose(model, "The cat sat on the mat.", scopes=("Propagated",))
    later = np.triu(parts.maps["Propagated"], k=1)
    assert parts.maps["Propagated"].shape == (2, n, n) and (later == 0).all()
    assert parts.check["max_rel"].max() < 1e-4 and arrays["prediction/logit"].shape == (1, n)


def test_a_decoder_whose_tokenizer_has_no_bos_runs_every_call(tmp_path):
    """Issue M13: Qwen2/2.5/3 tokenizers have no BOS. A tiny qwen2 with such a tokenizer
    loads, and norms, decompose, attend and view run on it: the text starts with the EOS
    (<|im_end|> here), the weights are the module's own on exactly those ids."""
    from conftest import QWEN_SPECIALS

    folder = write_tiny_decoder_folder(tmp_path / "qwen2", "qwen2", specials=QWEN_SPECIALS)
    model = attnscope.load(folder)
    assert model.tokenizer.bos_token_id is None
    text = "The cat sat on the mat."
    eos = model.tokenizer.eos_token_id
    ids = torch.tensor([[eos, *model.tokenizer(text)["input_ids"], eos]])
    found = attnscope.norms(model, text)
    assert found.tokens[0] == found.tokens[-1] == "<|im_end|>"
    with torch.no_grad():
        attentions = model.module(input_ids=ids, output_attentions=True).attentions
    for l, want in enumerate(attentions):
        np.testing.assert_allclose(found.alpha[l], want[0].numpy(), atol=1e-5)
    parts = attnscope.decompose(model, text, scopes=("AttnResLnFf", "Propagated"))
    assert parts.tokens == found.tokens and parts.check["max_rel"].max() < 1e-4
    assert attnscope.attend(model, text, layer=2, head=1).check <= 1e-4
    header, _ = read_page(attnscope.view(model, text).html)
    assert header["tokens"] == found.tokens and header["prediction"]["kind"] == "next"


def test_a_typed_pad_on_roberta_follows_the_modules_positions(tmp_path):
    """Issue m22: a "<pad>" typed in a text stays the pad token; RoBERTa's position ids skip
    it, and attend's split (and the page's, which splits the same way) follows them: the
    check passes and the weights are the module's own on those ids."""
    from transformers import RobertaForMaskedLM

    from attnscope.data.corpora import encode_corpus
    from conftest import TINY, tiny_config, train_bpe_tokenizer

    specials = {"bos_token": "<s>", "pad_token": "<pad>", "eos_token": "</s>"}
    specials |= {"mask_token": "<mask>", "cls_token": "<s>", "sep_token": "</s>"}
    tokenizer = train_bpe_tokenizer(tmp_path, specials=specials)
    config = tiny_config("roberta")
    config.update({"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id})
    torch.manual_seed(0)
    RobertaForMaskedLM(config).save_pretrained(tmp_path)
    model = attnscope.load(tmp_path)
    text = "The cat <pad> sat on <pad> the mat."
    found = attnscope.attend(model, text, layer=2, head=3)
    assert found.tokens.count("<pad>") == 2 and found.check <= 1e-4
    ids = torch.from_numpy(encode_corpus("texts", [], model.tokenizer, {"texts": [text]}).input_ids)
    assert (ids[0] == tokenizer.pad_token_id).sum() == 2 and ids.shape[1] < TINY["positions"]
    with torch.no_grad():
        want = model.module(input_ids=ids, output_attentions=True).attentions[1][0, 2]
    torch.testing.assert_close(torch.softmax(found.logits, -1), want, atol=1e-6, rtol=1e-5)
    header, _ = read_page(attnscope.view(model, text).html)
    assert header["tokens"] == found.tokens


def test_a_contrast_the_page_cannot_show_is_refused(minilm, decoder):
    """A contrast of one word, a word given as a string, one on a model without an LM head
    (MiniLM) or on a page without the prediction row: each refused by name, before any
    work (no more IndexError, no silent page without the split)."""
    with pytest.raises(ValueError, match=r"^contrast: give \[target, foil\], two pieces"):
        attnscope.view(decoder, "The cat sat.", contrast=[" the"])
    with pytest.raises(ValueError, match="^contrast: target ' the' and foil ' the' are the same"):
        attnscope.view(decoder, "The cat sat.", contrast=[" the", " the"])
    with pytest.raises(TypeError, match="a list of two strings"):
        attnscope.view(decoder, "The cat sat.", contrast=" the")
    with pytest.raises(ValueError, match="needs scopes=True"):
        attnscope.view(decoder, "The cat sat.", contrast=[" the", " of"], scopes=False)
    with pytest.raises(ValueError, match="needs a language-model head, but the model in"):
        attnscope.view(minilm, "The cat sat.", contrast=["cat", "dog"])
    header, _ = read_page(attnscope.view(decoder, "The cat sat.", contrast=[" the", " of"]).html)
    assert header["prediction"]["contrast"]["target"] == "the"  # the piece " the", as text


@pytest.fixture(scope="module")
def masked_lm(tmp_path_factory):
    """A tiny random BERT with its masked-LM head and MiniLM's WordPiece tokenizer, loaded."""
    from conftest import write_tiny_minilm_bert

    folder = write_tiny_minilm_bert(tmp_path_factory.mktemp("tiny-bert"), positions=64)
    return attnscope.load(folder)


def test_a_typed_mask_is_the_mask_token_the_page_predicts(masked_lm):
    """Issue 35, item 10: "[MASK]" in a text is the tokenizer's mask token (not "[", "mask",
    "]"), so a masked LM's page predicts it, split like the model's own logit there."""
    header, arrays = read_page(
        attnscope.view(masked_lm, ["The cat sat on the [MASK].", "It slept."]).html
    )
    assert header["tokens"][:7] == ["[CLS]", "the", "cat", "sat", "on", "the", "[MASK]"]
    found = header["prediction"]
    assert found["kind"] == "masked" and found["positions"] == [6]
    ids = masked_lm.tokenizer("The cat sat on the [MASK].", "It slept.", return_tensors="pt")
    with torch.no_grad():
        logits = masked_lm.module(**ids).logits[0, 6]
    assert found["predicted"] == masked_lm.tokenizer.convert_ids_to_tokens([int(logits.argmax())])
    got = arrays["prediction/logit"][0].sum() + found["bias"][0]
    assert abs(got - float(logits.max())) <= 1e-4 * max(
        abs(float(logits.max())), float(logits.std())
    )


def test_load_names_a_missing_folder_and_every_call_takes_a_folder(decoder, tmp_path):
    """Issue 35, item 11: a folder that is not there is named (no try on the Hugging Face hub);
    a folder given to view, decompose, norms, head_statistics or states is loaded for the call
    (BertViz-style), anything else is a TypeError saying what to pass."""
    from attnscope.model.sources import ModelNotFoundError

    missing = tmp_path / "nonexistent"
    with pytest.raises(ModelNotFoundError, match="no model folder .*nonexistent.* does not exist"):
        attnscope.load(missing)
    with pytest.raises(ModelNotFoundError, match="no model folder 'bert-base-uncased'"):
        attnscope.load("bert-base-uncased")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFoundError, match="no config.json in"):
        attnscope.load(tmp_path / "empty")
    folder = str(decoder.path)
    header, _ = read_page(attnscope.view(folder, "The cat sat.").html)
    assert header["tokens"][-1] == "</s>" and header["prediction"]["kind"] == "next"
    direct = attnscope.norms(decoder, "The cat sat.")
    np.testing.assert_array_equal(attnscope.norms(Path(folder), "The cat sat.").norms, direct.norms)
    assert attnscope.decompose(folder, "The cat sat.", scopes=("Attn",)).tokens == direct.tokens
    heads, _ = attnscope.head_statistics(folder, ["The cat sat."])
    assert len(heads) == decoder.weights.n_layers * decoder.weights.n_heads
    with attnscope.states(folder, ["The cat sat."]) as store:
        assert store.n_sequences == 1
    for call in (attnscope.view, attnscope.norms):
        with pytest.raises(TypeError, match=r"an attnscope.Model \(model = attnscope.load"):
            call(decoder.module, "The cat sat.")


def test_a_text_longer_than_the_models_positions_is_refused(masked_lm, minilm):
    """Issue 35, item 13: the limit is the model's positions, as the workflow's checks count
    them (64 here, 512 for MiniLM); a text of 64 pieces runs, one of 65 is refused by its
    length and the limit (never truncated), and so is a max_length beyond the model."""
    assert masked_lm.max_positions == 64 and minilm.max_positions == 512
    fits = "cat " * 62  # [CLS] + 62 + [SEP]
    assert attnscope.norms(masked_lm, fits).alpha.shape[-1] == 64
    with pytest.raises(ValueError, match="text 0 is 65 pieces .* more than the 64 positions"):
        attnscope.norms(masked_lm, fits + "cat")
    with pytest.raises(ValueError, match="text 1 is 65 pieces .* more than max_length 64"):
        with attnscope.states(masked_lm, ["A cat.", fits + "cat"], max_length=64):
            pass
    with pytest.raises(ValueError, match="max_length 100 is more than the 64 positions"):
        with attnscope.states(masked_lm, ["A cat."], max_length=100):
            pass


def test_attend_checks_its_arguments_like_the_other_calls(minilm):
    """Issue m23: a layer or head that is not an integer (1.5, True, "2") and a text that is
    not a string or a pair are refused by name, before any work, as the other calls refuse
    them; numpy integers are integers."""
    text = "The cat sat."
    for bad in (1.5, True, "2", None):
        with pytest.raises(TypeError, match=f"layer must be an integer .*not {bad!r}"):
            attnscope.attend(minilm, text, layer=bad, head=1)
        with pytest.raises(TypeError, match=f"head must be an integer .*not {bad!r}"):
            attnscope.attend(minilm, text, layer=1, head=bad)
    for bad in (None, 3, ["A.", "B.", "C."], [1, 2]):
        with pytest.raises(TypeError, match="a text is a string or \\[sentence A, sentence B\\]"):
            attnscope.attend(minilm, bad, layer=1, head=1)
        with pytest.raises(TypeError, match="a text is a string or \\[sentence A, sentence B\\]"):
            attnscope.norms(minilm, bad)
    found = attnscope.attend(minilm, text, layer=np.int64(2), head=np.int32(3))
    assert (found.layer, found.head) == (2, 3)


def test_import_is_light_and_the_api_is_lazy():
    code = "import sys, attnscope; assert 'torch' not in sys.modules; attnscope.view; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "ok", done.stderr[-2000:]
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        attnscope.nothing  # noqa: B018


def test_a_wheel_installs_a_package_that_works_in_a_fresh_venv(tmp_path):
    """`pip wheel .` holds the viewer's files; installed in a fresh venv (dependencies from this
    one by a path entry, not its editable attnscope), it renders MiniLM's page."""
    source, wheels = tmp_path / "source", tmp_path / "wheels"  # setuptools writes build/ there
    shutil.copytree(ROOT / "scripts/attnscope", source / "scripts/attnscope")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    done = subprocess.run([*build, "-w", wheels, source], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = wheels.glob("attnscope-*.whl")
    import zipfile

    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"attnscope/api.py", "attnscope/analyses/views/viewer.js"} <= names
    fresh = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", fresh], check=True)
    site = next((fresh / "lib").glob("python3*/site-packages"))
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "--target", site, wheel]
    done = subprocess.run(install, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    code = (
        "import attnscope; print(attnscope.__file__); "
        "print(len(attnscope.view(attnscope.load(), 'The cat sat.').html))"
    )
    python = fresh / "bin" / "python"
    # no PYTHONPATH (a worktree's scripts/ set for the tests): the fresh venv's own attnscope
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    where, size = done.stdout.split()[-2:]
    assert Path(where).is_relative_to(site) and int(size) > 10_000


def test_atlas_returns_the_role_table_of_the_direct_computation(decoder):
    """The role table's repeat scores are the heads family's on the same sequences; Clark's
    roles are judged from the texts, the other families' roles are not judged here; a causal
    LM's in-context loss is on the repeated pieces; the page shows inline."""
    found = attnscope.atlas(decoder, length=6, n_sequences=3, seed=1)
    L, H = decoder.weights.n_layers, decoder.weights.n_heads
    assert len(found.roles) == L * H
    assert found.roles[["induction", "duplicate", "previous_token"]].notna().all().all()
    assert found.roles["prev"].between(0, 1).all()
    status = found.rules.set_index("role")["status"]
    assert status["induction"] == status["prev"] == "judged"
    assert status["sink"].startswith("not judged")
    assert found.loss["n_predictions"].iloc[0] == 3 * 5
    assert found._repr_html_().startswith("<iframe srcdoc=")
    with pytest.raises(ValueError, match="thresholds names role 'inductio'"):
        attnscope.atlas(decoder, length=6, thresholds={"inductio": 0.2})
    with pytest.raises(ValueError, match="more than the"):
        attnscope.atlas(decoder, length=10**6)
