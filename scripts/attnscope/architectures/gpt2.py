"""GPT-2 (pre-LN decoder, Conv1D weights already in x @ W layout, causal attention).

GPT-2 takes no segment ids (it would add word embeddings for them). `transformers` returns
the last hidden state after ln_f; `residual_states` takes it before, so that state l + 1 is
always layer l + 1 applied to state l.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnscope.architectures.base import (
    Architecture,
    additive_mask,
    base_model,
    causal_head,
    hidden_states_forward,
    layer_norm,
    split_heads_bias,
    split_heads_in,
    split_heads_out,
)
from attnscope.core.canonical import CanonicalLayer, CanonicalModel, FeedForward

if TYPE_CHECKING:
    import torch


def _layer(block, config, activation, index: int) -> CanonicalLayer:
    activation_name = config.activation_function
    H = config.n_head
    d = config.n_embd
    W_qkv = block.attn.c_attn.weight.detach()  # Conv1D: [d, 3d], already x @ W
    b_qkv = block.attn.c_attn.bias.detach()
    scale = (d // H) ** -0.5 if config.scale_attn_weights else 1.0
    if config.scale_attn_by_inverse_layer_idx:
        scale /= index + 1
    return CanonicalLayer(
        W_Q=split_heads_in(W_qkv[:, :d], H),
        b_Q=split_heads_bias(b_qkv[:d], H),
        W_K=split_heads_in(W_qkv[:, d : 2 * d], H),
        b_K=split_heads_bias(b_qkv[d : 2 * d], H),
        W_V=split_heads_in(W_qkv[:, 2 * d :], H),
        b_V=split_heads_bias(b_qkv[2 * d :], H),
        W_O=split_heads_out(block.attn.c_proj.weight.detach(), H),
        b_O=block.attn.c_proj.bias.detach(),
        ln_attn=layer_norm(block.ln_1),
        ln_ff=layer_norm(block.ln_2),
        ff=FeedForward(
            W_in=block.mlp.c_fc.weight.detach(),
            b_in=block.mlp.c_fc.bias.detach(),
            W_out=block.mlp.c_proj.weight.detach(),
            b_out=block.mlp.c_proj.bias.detach(),
            activation=activation,
            activation_name=activation_name,
        ),
        pre_ln=True,
        causal=True,
        scale=scale,
    )


def canonical_layer(model, index: int) -> CanonicalLayer:
    from transformers.activations import ACT2FN

    config = model.config
    block = base_model(model).h[index]
    return _layer(block, config, ACT2FN[config.activation_function], index)


def canonical_weights(model) -> CanonicalModel:
    config = model.config
    core = base_model(model)
    return CanonicalModel(
        architecture="gpt2",
        model_type=config.model_type,
        layers=[canonical_layer(model, i) for i in range(len(core.h))],
        word_embeddings=core.wte.weight.detach(),
        position_embeddings=core.wpe.weight.detach(),
        token_type_embeddings=None,
        embedding_ln=None,
        final_ln=layer_norm(core.ln_f),
    )


def attention_output(model, layer: int, X: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`h[l].attn(ln_1(X))` with a causal mask: c_proj's output, before the residual.  [B, n, d]"""
    import torch

    block = base_model(model).h[layer]
    with torch.no_grad():
        return block.attn(block.ln_1(X), attention_mask=additive_mask(mask, True, X.dtype))[0]


def residual_states(model, inputs: dict) -> list[torch.Tensor]:
    """Hidden states with the last one taken before ln_f (from a hook on the last block)."""
    captured = {}

    def grab(module, args, output):
        captured["last"] = output[0] if isinstance(output, tuple) else output

    hook = base_model(model).h[-1].register_forward_hook(grab)
    try:
        states = hidden_states_forward(model, inputs)
    finally:
        hook.remove()
    states[-1] = captured["last"]
    return states


ARCHITECTURE = Architecture(
    name="gpt2",
    model_types=("gpt2",),
    canonical_weights=canonical_weights,
    canonical_layer=canonical_layer,
    uses_segment_ids=lambda config: False,
    attention_output=attention_output,
    residual_states=residual_states,
    max_positions=lambda config: config["n_positions"],
    dimensions=lambda config: (config["n_layer"], config["n_embd"]),
    n_heads=lambda config: config["n_head"],
    causal_lm_prefixes=("lm_head",),
    prediction_head=causal_head,
)
