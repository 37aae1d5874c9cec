"""Rotary decoders (`attnscope.architectures.decoders` and `neox`): the canonical form
against the real `transformers` modules, on a tiny random model of every supported type
(`conftest.tiny_decoder_config`: grouped-query heads, short sliding windows, soft-capping,
randomised norm weights and biases)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from attnscope.architectures import (
    SUPPORTED_MODEL_TYPES,
    UnsupportedModelError,
    architecture,
    canonical_weights,
)
from attnscope.architectures.base import additive_mask, base_model
from attnscope.architectures.decoders import position_embeddings, sliding_window
from attnscope.core.attention import attention_output, attention_probs, layer_forward
from attnscope.core.attention import value_vectors as values
from attnscope.core.checks import ResidualLog
from attnscope.maps.layer_decomposition import (
    LayerInput,
    closing_layer_norm,
    factored_stages,
    reference_outputs,
)
from attnscope.maps.layer_maps import LayerBatch, layer_scope_maps
from conftest import DECODERS, TINY, WINDOW, tiny_batch, tiny_model


@pytest.fixture(params=DECODERS)
def decoder(request):
    return request.param


def states_of(model, ids, mask):
    arch = architecture(model.config.model_type)
    return arch.residual_states(model, {"input_ids": ids, "attention_mask": mask})


def module_attention_weights(model, l: int, X: torch.Tensor, mask: torch.Tensor):
    """The eager attention weights of layer l's own module on the stored input X.  [B, H, n, n]"""
    core = base_model(model)
    block = core.layers[l]
    x = block.input_layernorm(X) if hasattr(block, "input_layernorm") else X
    attn = block.attention if hasattr(block, "attention") else block.self_attn  # GPT-NeoX
    window = sliding_window(attn, model.config)
    with torch.no_grad():
        return attn(
            hidden_states=x,
            attention_mask=additive_mask(mask, True, X.dtype, window),
            position_embeddings=position_embeddings(core, x, l),
        )[1]


def test_canonical_attention_equals_the_modules_eager_weights(decoder):
    model = tiny_model(decoder)
    weights = canonical_weights(model)
    ids, mask = tiny_batch(decoder)
    states = states_of(model, ids, mask)
    real = mask.bool()
    for l, layer in enumerate(weights.layers):
        want = module_attention_weights(model, l, states[l], mask)
        got = attention_probs(states[l], mask, layer)
        assert torch.allclose(got.transpose(1, 2)[real], want.transpose(1, 2)[real], atol=1e-6)
    # the whole model, with the masks transformers builds itself (unpadded: see the NaN test)
    with torch.no_grad():
        full = model(input_ids=ids[:1], output_attentions=True).attentions
    states = states_of(model, ids[:1], torch.ones_like(ids[:1]))
    for l, layer in enumerate(weights.layers):
        got = attention_probs(states[l], torch.ones_like(ids[:1]), layer)
        assert torch.allclose(got, full[l], atol=1e-6)


def test_windows_caps_and_groups_take_effect():
    """The tiny models exercise what they should: a window shorter than the batch hides keys,
    Gemma-2 caps its logits, and key/value heads are shared."""
    weights = canonical_weights(tiny_model("gemma2"))
    sliding = weights.layers[0]
    assert sliding.sliding_window == WINDOW and weights.layers[1].sliding_window is None
    assert sliding.softcap == 2.0 and sliding.n_kv_heads == 2 < sliding.n_heads
    ids, mask = tiny_batch("gemma2", batch=1)
    alpha = attention_probs(torch.randn(1, ids.shape[1], TINY["hidden"]), mask, sliding)
    far = torch.ones_like(alpha[0, 0], dtype=torch.bool).tril(-WINDOW)
    assert (alpha[..., far] == 0).all() and (alpha.sum(-1) - 1).abs().max() < 1e-6


def test_states_are_the_raw_residual_stream(decoder):
    """Every stored state is a layer's raw output; transformers' last hidden state is the
    final norm of the last one; the canonical layers rebuild each state from the one before."""
    model = tiny_model(decoder)
    weights = canonical_weights(model)
    ids, mask = tiny_batch(decoder)
    states = states_of(model, ids, mask)
    assert len(states) == weights.n_layers + 1
    real = mask.bool()
    with torch.no_grad():
        out = model(input_ids=ids[:1], output_hidden_states=True)
    alone = states_of(model, ids[:1], mask[:1])
    for l in range(weights.n_layers):
        assert torch.allclose(out.hidden_states[l], alone[l], atol=1e-6)
    assert torch.allclose(out.last_hidden_state, weights.final_ln(alone[-1]), atol=1e-5)
    assert not torch.allclose(out.last_hidden_state, alone[-1], atol=1e-2)
    for l, layer in enumerate(weights.layers):
        with torch.no_grad():
            rebuilt = layer_forward(states[l], mask, layer)
        scale = states[l + 1][real].abs().max()
        assert (rebuilt - states[l + 1])[real].abs().max() / scale < 1e-5


def test_nan_in_padding_does_not_reach_the_states():
    """The trap the issue reports: a padded query that sees no key (a window shorter than the
    padding run) gets NaN from the eager softmax, and 0 x NaN in the next layer's value product
    spreads it to real rows. Simulated here by writing NaN into the padded rows of layer 1's
    output (the pinned transformers did not produce it on these tiny models): without the
    cleaning it reaches real rows; the stored states hold none, and their real rows equal the
    sequence run alone."""
    model = tiny_model("mistral")
    ids, _ = tiny_batch("mistral", batch=2, length=14)
    mask = torch.ones_like(ids)
    mask[1, 14 - 2 * WINDOW :] = 0  # a padding run twice the window
    padded = ~mask.bool()

    def poison(module, args, output):
        output[padded] = float("nan")
        return output

    hook = base_model(model).layers[0].register_forward_hook(poison)
    try:
        with torch.no_grad():
            raw = model(input_ids=ids, attention_mask=mask).last_hidden_state
        assert torch.isnan(raw[1][mask[1].bool()]).any()
        states = states_of(model, ids, mask)
    finally:
        hook.remove()
    assert not any(torch.isnan(s).any() for s in states)
    n = int(mask[1].sum())
    alone = states_of(model, ids[1:, :n], mask[1:, :n])
    for mine, single in zip(states, alone, strict=True):
        assert torch.allclose(mine[1, :n], single[0], atol=1e-5)


def test_every_mixing_stage_rebuilds_the_modules(decoder):
    """Every stage of every layer (and the FF split's completeness) against the real modules:
    the attention module's output, the stored next state, to 1e-5 relative in float32."""
    model = tiny_model(decoder)
    weights = canonical_weights(model)
    ids, mask = tiny_batch(decoder)
    states = states_of(model, ids, mask)
    residuals = ResidualLog(1e-5, None)
    for l in range(weights.n_layers):
        with torch.no_grad():
            at = LayerBatch(l, states[l], mask, states[l + 1])
            maps = layer_scope_maps(model, weights, at, 0, residuals)
        assert all(torch.isfinite(m).all() for m in maps.values())
    table = residuals.table()
    assert len(table) == weights.n_layers * 7 and table["max_rel"].max() < 1e-5


def _double(weights):
    """The canonical weights in float64 (every tensor field, recursively)."""

    def cast(value):
        if isinstance(value, torch.Tensor):
            return value.double()
        if isinstance(value, list):
            return [cast(v) for v in value]
        if dataclasses.is_dataclass(value):
            return dataclasses.replace(
                value, **{f.name: cast(getattr(value, f.name)) for f in dataclasses.fields(value)}
            )
        return value

    return cast(weights)


def test_float64_stages_rebuild_the_float64_formulas(decoder):
    """In float64 the stages rebuild the canonical formulas evaluated in float64 (the norms,
    softmax and rotary angles too) to 1e-12. Not the unmodified modules: they run RMSNorm, the
    softmax and the angles in float32 even when cast to float64, which bottoms out near 1e-7."""
    weights = _double(canonical_weights(tiny_model(decoder)))
    ids, mask = tiny_batch(decoder)
    X = torch.randn(*ids.shape, TINY["hidden"], dtype=torch.float64) * mask[..., None]
    for l, layer in enumerate(weights.layers):
        closing = closing_layer_norm(weights.layers, weights.final_ln, l)
        y = attention_output(attention_probs(X, mask, layer), values(X, layer), layer)
        reference = reference_outputs(X, y, layer, closing)
        real = mask.bool()
        for stage in factored_stages(LayerInput(X, mask, layer, closing)):
            want = reference[stage.scope][real]
            error = (stage.total()[real] - want).abs().max() / want.abs().max()
            assert error < 1e-12, (l, stage.scope, float(error))
        X = layer_forward(X, mask, layer) * mask[..., None]


def test_mixture_of_experts_routes_as_the_module():
    model = tiny_model("mixtral")
    block = base_model(model).layers[0].mlp
    moe = canonical_weights(model).layers[0].ff
    h = torch.randn(2, 7, TINY["hidden"])
    with torch.no_grad():
        assert torch.allclose(moe(h), block(h), atol=1e-6)
    routed = (moe.routing(h) > 0).sum(-1)
    assert (routed == 2).all()  # top-2 of 4 experts per token


def test_unsupported_model_type_is_refused_with_the_supported_list():
    with pytest.raises(UnsupportedModelError) as error:
        architecture("mamba", "model 'm'")
    for model_type in ("llama", "gemma2", "mixtral", "bert", "gpt2"):
        assert model_type in SUPPORTED_MODEL_TYPES and model_type in str(error.value)


def test_rotated_scores_depend_on_the_offset_alone():
    """Known answer: with the same query and key vector at every position, q_i R k_j depends
    on i - j only (RoPE's relative form)."""
    layer = canonical_weights(tiny_model("llama")).layers[0]
    n, e = 9, layer.d_head
    q = torch.randn(e).expand(1, 1, n, e)
    k = torch.randn(e).expand(1, 1, n, e)
    scores = layer.rotary.rotate(q)[0, 0] @ layer.rotary.rotate(k)[0, 0].T
    for offset in range(-n + 1, n):
        diagonal = scores.diagonal(offset)
        assert torch.allclose(diagonal, diagonal[0].expand_as(diagonal), atol=1e-5)
