"""Why a head attends: its logits split into query-side x key-side component terms
(`attnscope.maps.attend`, `attnscope.attend`), checked against the modules' own attention."""

from __future__ import annotations

import pytest
import torch

import attnscope
from attnscope.architectures import UnsupportedModelError, canonical_weights
from attnscope.core.attention import layer_visible_pairs
from attnscope.core.checks import CheckError
from attnscope.maps.attend import attend_split
from conftest import CLASSIC, DECODERS, TINY, tiny_model

N = 10


def one_sequence(architecture: str, seed: int = 3) -> dict:
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, TINY["vocab"], (1, N), generator=g)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if architecture in ("bert", "electra"):  # two segments, so the type embedding varies
        inputs["token_type_ids"] = (torch.arange(N) >= N // 2).long()[None]
    return inputs


def split(model, architecture, layer, head=1, dtype=torch.float32, **options):
    model = model.to(dtype)
    return attend_split(
        model, canonical_weights(model), one_sequence(architecture), layer, head, **options
    )


def module_weights(model, inputs, layer, head) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs, output_attentions=True).attentions[layer][0, head]


@pytest.mark.parametrize("architecture", [*CLASSIC, *DECODERS])
def test_the_terms_rebuild_the_logits_that_give_the_modules_attention(architecture):
    model = tiny_model(architecture)
    found = split(model, architecture, layer=1, head=1, bound=1e-5)
    rebuilt = found.terms.sum((-1, -2))
    assert (rebuilt - found.logits).abs().max() <= 1e-5 * found.logits.abs().max()
    # the logits, masked (and soft-capped where the model caps), are the module's weights
    layer = canonical_weights(model).layers[1]
    capped = found.logits
    if layer.softcap is not None:
        capped = torch.tanh(capped / layer.softcap) * layer.softcap
    mask = torch.ones(1, N, dtype=torch.long)
    seen = layer_visible_pairs(mask, layer)[0]
    alpha = torch.softmax(capped.masked_fill(~seen, -torch.inf), -1)
    want = module_weights(model, one_sequence(architecture), 1, 1)
    torch.testing.assert_close(alpha, want, atol=1e-6, rtol=1e-5)
    assert found.components[-1] == "bias" and len(found.components) == found.terms.shape[-1]


@pytest.mark.parametrize("architecture", [*CLASSIC, *DECODERS])
def test_in_float64_the_terms_rebuild_the_same_formulas_to_rounding(architecture):
    found = split(tiny_model(architecture), architecture, 1, dtype=torch.float64, recompute=True)
    assert found.terms.dtype == torch.float64
    assert found.residuals["terms vs logits"] <= 1e-10


@pytest.mark.parametrize(
    ("architecture", "names"),
    [
        ("bert", ["embed.word", "embed.position", "embed.type", "bias"]),
        ("gpt2", ["embed.word", "embed.position", "bias"]),
        ("llama", ["embed", "bias"]),
    ],
)
def test_the_first_layer_sees_only_the_embedding_and_the_biases(architecture, names):
    found = split(tiny_model(architecture), architecture, layer=0, head=2)
    assert found.components == names
    assert all(bool(found.term(name, name).abs().max() > 0) for name in names)


@pytest.mark.parametrize("architecture", ["bert", "llama", "mixtral"])
def test_a_head_that_writes_nothing_has_zero_terms_in_every_later_layer(architecture):
    model = tiny_model(architecture, layers=3)
    H, d_head = TINY["heads"], TINY["hidden"] // TINY["heads"]
    silent = 2  # head 3 of layer 1, 0-based
    core = model.base_model
    out = (
        core.encoder.layer[0].attention.output.dense
        if architecture == "bert"
        else core.layers[0].self_attn.o_proj
    )
    with torch.no_grad():
        out.weight[:, silent * d_head : (silent + 1) * d_head] = 0
    for layer in (1, 2):
        for head in range(H):
            found = split(model, architecture, layer, head)
            c = found.components.index("L1.H3")
            assert not found.terms[:, :, c, :].any() and not found.terms[:, :, :, c].any()
            assert found.term("L1.H2", "L1.H2").abs().max() > 0  # the others do write


def test_the_learned_embeddings_parts_sum_to_the_embedding():
    model = tiny_model("bert", layers=3)
    parts = split(model, "bert", 2, dtype=torch.float64)
    whole = split(model, "bert", 2, dtype=torch.float64, embed_parts=False)
    names = ["embed.word", "embed.position", "embed.type"]
    assert parts.components == names + whole.components[1:]
    k = len(names)
    summed = parts.terms[:, :, :k].sum(2)  # the query side's parts summed: [n, n, C]
    torch.testing.assert_close(summed[:, :, k:], whole.terms[:, :, 0, 1:], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        summed[:, :, :k].sum(-1), whole.terms[:, :, 0, 0], rtol=0, atol=1e-12
    )
    torch.testing.assert_close(parts.terms[:, :, k:, k:], whole.terms[:, :, 1:, 1:])


@pytest.mark.parametrize("architecture", ["bert", "gpt2"])
def test_zero_position_embeddings_have_zero_position_terms(architecture):
    model = tiny_model(architecture)
    embeddings = model.embeddings.position_embeddings if architecture == "bert" else model.wpe
    with torch.no_grad():
        embeddings.weight.zero_()
    for layer in (0, 1):
        found = split(model, architecture, layer)
        c = found.components.index("embed.position")
        assert not found.terms[:, :, c, :].any() and not found.terms[:, :, :, c].any()
        assert found.term("embed.word", "embed.word").abs().max() > 0


def test_weights_of_another_model_fail_the_check_loudly():
    model, other = tiny_model("llama", seed=0), tiny_model("llama", seed=1)
    with pytest.raises(CheckError, match="attend layer 2 head 2"):
        attend_split(model, canonical_weights(other), one_sequence("llama"), 1, 1)


def test_an_unsupported_model_type_is_named():
    from transformers import OPTConfig, OPTModel

    config = OPTConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, ffn_dim=32, num_attention_heads=2
    )
    model = OPTModel(config).eval()
    with pytest.raises(UnsupportedModelError, match="'opt'"):
        attend_split(model, None, one_sequence("opt"), 0, 0)


def test_minilm_one_head_split_and_checked():
    minilm = attnscope.load()
    text = "The cat sat on the mat."
    found = attnscope.attend(minilm, text, layer=3, head=5)
    ids = minilm.tokenizer(text, return_tensors="pt")
    n = ids["input_ids"].shape[1]
    L, H = 2, minilm.weights.n_heads  # the layers before layer 3
    assert found.tokens[0] == "[CLS]" and len(found.tokens) == n
    assert found.components[:3] == ["embed.word", "embed.position", "embed.type"]
    assert found.components[3:] == [
        *(
            name
            for l in range(1, L + 1)
            for name in [*(f"L{l}.H{h}" for h in range(1, H + 1)), f"L{l}.FF"]
        ),
        "bias",
    ]
    assert found.terms.shape == (n, n, len(found.components), len(found.components))
    assert found.check <= 1e-4
    torch.testing.assert_close(found.terms.sum((-1, -2)), found.logits, atol=1e-4, rtol=1e-5)
    want = module_weights(minilm.module, ids, 2, 4)
    torch.testing.assert_close(torch.softmax(found.logits, -1), want, atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match="head 13 is not in 1..12"):
        attnscope.attend(minilm, text, layer=1, head=13)
    with pytest.raises(ValueError, match="layer 0 is not in 1..6"):
        attnscope.attend(minilm, text, layer=0, head=1)


@pytest.mark.parametrize(("architecture", "n_bands"), [("llama", 4), ("gpt_neox", 3), ("gpt2", 1)])
def test_the_rotary_bands_split_the_logits_and_the_terms(architecture, n_bands):
    found = split(tiny_model(architecture), architecture, 1, dtype=torch.float64, recompute=True)
    assert found.n_bands == n_bands  # d' 8: 4 turned pairs; NeoX turns half: 2 + the rest
    torch.testing.assert_close(found.bands().sum(-1), found.logits, rtol=1e-12, atol=1e-12)
    summed = sum(found.band_terms(b) for b in range(n_bands))
    torch.testing.assert_close(summed, found.terms, rtol=1e-12, atol=1e-12)


def test_a_constant_bias_meets_itself_by_offset_only_in_each_rotary_band():
    """Layer 1 of a Llama with projection biases: the bias side of q and k is b_Q, b_K at
    every position, so each band's bias x bias term depends on i - j alone (the rotation)."""
    found = split(tiny_model("llama"), "llama", 0, dtype=torch.float64)
    for b in range(found.n_bands):
        term = found.band_terms(b)[:, :, -1, -1]
        assert term.abs().max() > 0
        torch.testing.assert_close(term[1:, 1:], term[:-1, :-1], rtol=1e-12, atol=1e-12)
        assert not torch.allclose(term[0, 1:], term[0, :-1])  # but not constant: it turns


def test_pad_pieces_in_a_roberta_text_read_the_modules_positions():
    """Issue m22: RoBERTa's position ids count the pieces that are not the pad id, and a pad
    piece reads the padding row (`create_position_ids_from_input_ids`), so a typed <pad>
    moves every later piece's position. The embedding split follows the module: state 0 is
    rebuilt and the logits give the module's weights, with a padding row that is not 0."""
    model = tiny_model("roberta")
    pad = model.config.pad_token_id
    with torch.no_grad():
        model.embeddings.position_embeddings.weight[pad] = torch.randn(TINY["hidden"])
    inputs = one_sequence("roberta")
    inputs["input_ids"][0, [4, 5, 8]] = pad
    found = attend_split(model, canonical_weights(model), inputs, 1, 1, bound=1e-5)
    assert found.residuals["state 0"] <= 1e-6
    want = module_weights(model, inputs, 1, 1)
    torch.testing.assert_close(torch.softmax(found.logits, -1), want, atol=1e-6, rtol=1e-5)
    first = attend_split(model, canonical_weights(model), inputs, 0, 1)
    positions = first.term("embed.position", "embed.position")  # the padding row at 4, 5, 8:
    torch.testing.assert_close(positions[[4, 5, 8]][:, [4, 5, 8]], positions[4, 4].expand(3, 3))
    words = split(model, "roberta", 1)  # without pads: the module's rows 2.. are positions 0..
    assert words.residuals["state 0"] <= 1e-6
