"""Canonical weights rebuild what the real `transformers` modules compute."""

import pytest
import torch

from attnscope.architectures import UnsupportedModelError, architecture, canonical_weights
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


def test_recomputed_attention_equals_eager_attentions(family):
    model = tiny_model(family)
    ids, mask = tiny_batch(family)
    out = _forward(model, ids, mask)
    weights = canonical_weights(model)
    assert len(out.attentions) == weights.n_layers
    for lay, layer in enumerate(weights.layers):
        alpha = attention_probs(out.hidden_states[lay], mask, layer)
        valid = mask.bool()
        diff = (alpha - out.attentions[lay]).abs()[valid[:, None, :, None].expand_as(alpha)]
        assert diff.max() <= 1e-5


def test_decomposition_rebuilds_attention_block_output(classic_family):
    family = classic_family
    model = tiny_model(family)
    ids, mask = tiny_batch(family)
    out = _forward(model, ids, mask)
    weights = canonical_weights(model)
    captured = {}
    core = model.base_model
    blocks = core.h if family == "gpt2" else core.encoder.layer
    hooks = []
    for lay, block in enumerate(blocks):
        # The attention block's output before any residual: GPT-2's attn module returns
        # (output, weights); BERT's output.dense returns the projected tensor.
        target = block.attn if family == "gpt2" else block.attention.output.dense

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


def test_layer_forward_rebuilds_next_hidden_state(classic_family):
    family = classic_family
    model = tiny_model(family)
    ids, mask = tiny_batch(family)
    out = _forward(model, ids, mask)
    weights = canonical_weights(model)
    valid = mask.bool()
    for lay, layer in enumerate(weights.layers):
        nxt = layer_forward(out.hidden_states[lay], mask, layer)
        target = out.hidden_states[lay + 1]
        if family == "gpt2" and lay == weights.n_layers - 1:
            nxt = weights.final_ln(nxt)  # transformers applies ln_f to the last state
        assert (nxt - target)[valid].abs().max() <= 1e-5


def test_unknown_architecture_is_named():
    from transformers import T5Config, T5Model

    model = T5Model(T5Config(d_model=16, num_layers=1, num_heads=2, d_ff=32, vocab_size=50))
    with pytest.raises(UnsupportedModelError, match="t5"):
        canonical_weights(model)


def test_max_positions_match_the_usable_position_rows(classic_family):
    """The registry's position limit (read from config.json alone, without torch) equals the
    number of position rows real inputs use (RoBERTa reserves rows up to padding_idx)."""
    family = classic_family
    model = tiny_model(family)
    limit = architecture(model.config.model_type).max_positions(model.config.to_dict())
    assert limit == canonical_weights(model).position_embeddings.shape[0]
