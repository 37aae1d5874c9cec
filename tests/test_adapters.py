"""Canonical weights rebuild what the real `transformers` modules compute."""

import pytest
import torch

from attnscope import architectures
from attnscope.architectures import UnsupportedModelError, canonical_weights
from attnscope.core.attention import (
    attention_output,
    attention_probs,
    layer_forward,
    value_vectors,
)
from conftest import tiny_batch, tiny_model


def _forward(model, ids, mask):
    with torch.no_grad():
        return model(
            input_ids=ids,
            attention_mask=mask,
            output_attentions=True,
            output_hidden_states=True,
        )


def test_recomputed_attention_equals_eager_attentions(architecture):
    model = tiny_model(architecture)
    ids, mask = tiny_batch(architecture)
    out = _forward(model, ids, mask)
    weights = canonical_weights(model)
    assert len(out.attentions) == weights.n_layers
    for lay, layer in enumerate(weights.layers):
        alpha = attention_probs(out.hidden_states[lay], mask, layer)
        valid = mask.bool()
        diff = (alpha - out.attentions[lay]).abs()[valid[:, None, :, None].expand_as(alpha)]
        assert diff.max() <= 1e-5


def test_decomposition_rebuilds_attention_block_output(classic_architecture):
    architecture = classic_architecture
    model = tiny_model(architecture)
    ids, mask = tiny_batch(architecture)
    out = _forward(model, ids, mask)
    weights = canonical_weights(model)
    captured = {}
    core = model.base_model
    blocks = core.h if architecture == "gpt2" else core.encoder.layer
    hooks = []
    for lay, block in enumerate(blocks):
        # The attention block's output before any residual: GPT-2's attn module returns
        # (output, weights); BERT's output.dense returns the projected tensor.
        target = block.attn if architecture == "gpt2" else block.attention.output.dense

        def grab(mod, args, output, lay=lay):
            captured[lay] = output[0] if isinstance(output, tuple) else output

        hooks.append(target.register_forward_hook(grab))
    _forward(model, ids, mask)
    for h in hooks:
        h.remove()
    for lay, layer in enumerate(weights.layers):
        X = out.hidden_states[lay]
        y = attention_output(attention_probs(X, mask, layer), value_vectors(X, layer), layer)
        real = captured[lay]
        valid = mask.bool()
        assert (y - real)[valid].abs().max() <= 1e-5


def test_layer_forward_rebuilds_next_hidden_state(classic_architecture):
    architecture = classic_architecture
    model = tiny_model(architecture)
    ids, mask = tiny_batch(architecture)
    out = _forward(model, ids, mask)
    weights = canonical_weights(model)
    valid = mask.bool()
    for lay, layer in enumerate(weights.layers):
        nxt = layer_forward(out.hidden_states[lay], mask, layer)
        target = out.hidden_states[lay + 1]
        if architecture == "gpt2" and lay == weights.n_layers - 1:
            nxt = weights.final_ln(nxt)  # transformers applies ln_f to the last state
        assert (nxt - target)[valid].abs().max() <= 1e-5


def test_unknown_architecture_is_named():
    from transformers import T5Config, T5Model

    model = T5Model(T5Config(d_model=16, num_layers=1, num_heads=2, d_ff=32, vocab_size=50))
    with pytest.raises(UnsupportedModelError, match="t5"):
        canonical_weights(model)


def test_max_positions_match_the_usable_position_rows(classic_architecture):
    """The registry's position limit (read from config.json alone, without torch) equals the
    number of position rows real inputs use (RoBERTa reserves rows up to padding_idx)."""
    architecture = classic_architecture
    model = tiny_model(architecture)
    limit = architectures.architecture(model.config.model_type).max_positions(
        model.config.to_dict()
    )
    assert limit == canonical_weights(model).position_embeddings.shape[0]


# Layer 1's module norm at each step of its `BlockPlan` (None: identity), then whether the FF
# reads the block input X and whether the residual around the FF is its input.
PLANS = {
    "bert": (  # post-LN
        (None, None, "attention.output.LayerNorm", None, "output.LayerNorm"),
        (False, True),
    ),
    "gpt2": (("ln_1", None, "ln_2", None, None), (False, False)),  # pre-LN
    "llama": (("input_layernorm", None, "post_attention_layernorm", None, None), (False, False)),
    "gpt_neox": (  # parallel residual
        ("input_layernorm", None, "post_attention_layernorm", None, None),
        (True, False),
    ),
    "gemma2": (  # sandwich
        (
            "input_layernorm",
            "post_attention_layernorm",
            "pre_feedforward_layernorm",
            "post_feedforward_layernorm",
            None,
        ),
        (False, False),
    ),
    "olmo2": (  # norms on the blocks' outputs only
        (None, "post_attention_layernorm", None, "post_feedforward_layernorm", None),
        (False, False),
    ),
}


@pytest.mark.parametrize("architecture", PLANS)
def test_each_block_order_reads_as_its_modules(architecture):
    """The plan of every block order names the module's own norms (compared by what they make
    of random vectors: every tiny norm has random weights) and switches; and the plan read
    step by step (`layer_forward`) rebuilds every layer's real output."""
    model = tiny_model(architecture)
    weights = canonical_weights(model)
    core = model.base_model
    blocks = {"bert": lambda: core.encoder.layer, "gpt2": lambda: core.h}.get(
        architecture, lambda: core.layers
    )()
    norms, switches = PLANS[architecture]
    plan = weights.layers[0].plan
    steps = ("attn_in_norm", "attn_out_norm", "ff_in_norm", "ff_out_norm", "output_norm")
    x = torch.randn(5, weights.d_model)
    for step, name in zip(steps, norms, strict=True):
        mine = getattr(plan, step)
        if name is None:
            assert mine is None, step
        else:
            with torch.no_grad():
                want = blocks[0].get_submodule(name)(x)
            assert torch.allclose(mine(x), want, atol=1e-6), step
    assert (plan.ff_reads_block_input, plan.residual_is_ff_input) == switches
    ids, mask = tiny_batch(architecture)
    arch = architectures.architecture(model.config.model_type)
    states = arch.residual_states(model, {"input_ids": ids, "attention_mask": mask})
    real = mask.bool()
    for l, layer in enumerate(weights.layers):
        with torch.no_grad():
            rebuilt = layer_forward(states[l], mask, layer)
        scale = states[l + 1][real].abs().max()
        assert (rebuilt - states[l + 1])[real].abs().max() / scale < 1e-5, l
