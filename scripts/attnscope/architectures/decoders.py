"""Rotary decoders with the Llama anatomy: Llama, Mistral, Qwen2, Qwen3, Gemma, Gemma-2,
Gemma-3 (text), OLMo-2, Granite, SmolLM3, Phi-3 and the Mixtral mixture of experts.

What they share (read in each model's `transformers` forward): `model.embed_tokens`,
`model.layers[l].self_attn` with q/k/v/o projections (Phi-3: one fused qkv_proj),
`model.rotary_emb`, `model.norm` after the last layer, RMSNorm everywhere, and a residual
stream X_{l+1} = X_l + Attn + FF. How they differ is read from the modules themselves:

- norms: `input_layernorm` before attention and `post_attention_layernorm` before the FF
  (Llama and most); Gemma-2/3 add `pre_feedforward_layernorm` and use `post_attention_layernorm`
  and `post_feedforward_layernorm` on the blocks' outputs (sandwich); OLMo-2 has only the two
  output norms. Gemma's RMSNorm multiplies by (1 + w), folded into gamma here.
- attention: `self_attn.scaling` (Gemma-2/3: query_pre_attn_scalar^-1/2; Granite: its
  attention multiplier), `sliding_window` per layer (Mistral, Mixtral and Phi-3 from the
  config on every layer), Gemma-2's `attn_logit_softcapping`, QK-norm (`q_norm`/`k_norm`
  per head in Qwen3 and Gemma-3, over the whole projection in OLMo-2), SmolLM3's layers
  without rotation (`use_rope`), Gemma-3's rotary angles per layer type.
- feed-forward: gate_proj/up_proj/down_proj, Phi-3's fused gate_up_proj (gate first),
  Mixtral's router and experts (gate_up_proj [E, 2 d_ff, d], gate first).
- Granite multiplies both blocks' outputs by `residual_multiplier` (folded into W_O, b_O
  and the FF output weights) and the embeddings by `embedding_multiplier`; Gemma scales the
  embeddings by sqrt(d) inside the embedding module.

States: `transformers` returns the final norm of the last layer's output as the last hidden
state; `residual_states` captures the raw output of every layer with hooks instead, and sets
the padding positions of every layer's input to 0 (see `residual_states`).
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import TYPE_CHECKING

from attnscope.architectures.base import Architecture, additive_mask, base_model, causal_head
from attnscope.core.canonical import (
    CanonicalLayer,
    CanonicalLayerNorm,
    CanonicalModel,
    FeedForward,
    MixtureOfExperts,
    Rotary,
)

if TYPE_CHECKING:
    import torch

ONE_PLUS_WEIGHT = ("gemma", "gemma2", "gemma3_text")  # RMSNorm scales by (1 + w)
MODEL_TYPES = (
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3_text",
    "olmo2",
    "granite",
    "smollm3",
    "phi3",
    "mixtral",
)


def rms_norm(module, model_type: str) -> CanonicalLayerNorm:
    """An RMSNorm module in canonical form (gamma = 1 + w for Gemma)."""
    import torch

    weight = module.weight.detach()
    gamma = 1.0 + weight if model_type in ONE_PLUS_WEIGHT else weight
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    return CanonicalLayerNorm(gamma, torch.zeros_like(gamma), float(eps), centred=False)


def _optional_norm(layer, name: str, model_type: str) -> CanonicalLayerNorm | None:
    module = getattr(layer, name, None)
    return None if module is None else rms_norm(module, model_type)


def layer_norms(layer, model_type: str) -> dict:
    """The four norm slots of a decoder layer, from the modules it has."""

    def norm(name):
        return _optional_norm(layer, name, model_type)

    if hasattr(layer, "pre_feedforward_layernorm"):  # Gemma-2/3 sandwich
        return {
            "ln_attn": norm("input_layernorm"),
            "post_attn": norm("post_attention_layernorm"),
            "ln_ff": norm("pre_feedforward_layernorm"),
            "post_ff": norm("post_feedforward_layernorm"),
        }
    if not hasattr(layer, "input_layernorm"):  # OLMo-2: norms on the blocks' outputs only
        return {
            "ln_attn": None,
            "post_attn": norm("post_attention_layernorm"),
            "ln_ff": None,
            "post_ff": norm("post_feedforward_layernorm"),
        }
    return {
        "ln_attn": norm("input_layernorm"),
        "post_attn": None,
        "ln_ff": norm("post_attention_layernorm"),
        "post_ff": None,
    }


def linear(module) -> tuple[torch.Tensor, torch.Tensor]:
    """(W [in, out], b [out]) of an nn.Linear in x @ W layout; b zero without a bias."""
    import torch

    W = module.weight.detach().T
    b = module.bias.detach() if module.bias is not None else torch.zeros_like(W[0])
    return W, b


def _heads_in(W: torch.Tensor, d_head: int) -> torch.Tensor:
    """[d, H d'] -> [H, d, d']."""
    d = W.shape[0]
    return W.reshape(d, -1, d_head).permute(1, 0, 2).contiguous()


def attention_weights(attn, config) -> dict:
    """W_Q, b_Q, W_K, b_K, W_V, b_V [H(_kv), d, d'] / [H(_kv), d'] and W_O [H, d', d], b_O."""
    d_head = attn.head_dim
    if hasattr(attn, "qkv_proj"):  # Phi-3: [q (H d') | k (H_kv d') | v (H_kv d')]
        W, b = linear(attn.qkv_proj)
        q_end = config.num_attention_heads * d_head
        k_end = q_end + config.num_key_value_heads * d_head
        pieces = {"Q": (W[:, :q_end], b[:q_end]), "K": (W[:, q_end:k_end], b[q_end:k_end])}
        pieces["V"] = (W[:, k_end:], b[k_end:])
    else:
        pieces = {key: linear(getattr(attn, f"{key.lower()}_proj")) for key in "QKV"}
    out = {}
    for key, (W, b) in pieces.items():
        out[f"W_{key}"] = _heads_in(W, d_head)
        out[f"b_{key}"] = b.reshape(-1, d_head).contiguous()
    W_O, b_O = linear(attn.o_proj)
    out["W_O"] = W_O.reshape(-1, d_head, W_O.shape[1]).contiguous()
    out["b_O"] = b_O
    return out


def _gated(gate, up, down, activation, name) -> FeedForward:
    """A gated FF from (W, b) pairs in x @ W layout."""
    return FeedForward(
        W_in=up[0],
        b_in=up[1],
        W_out=down[0],
        b_out=down[1],
        activation=activation,
        W_gate=gate[0],
        b_gate=gate[1],
        activation_name=name,
    )


def feed_forward(mlp, config) -> FeedForward | MixtureOfExperts:
    """The layer's FF block: gated MLP, Phi-3's fused one, or Mixtral's experts."""
    import torch

    name = getattr(config, "hidden_activation", None) or config.hidden_act
    if hasattr(mlp, "experts"):
        experts = mlp.experts
        d_ff = experts.down_proj.shape[-1]
        zeros_ff = torch.zeros(d_ff, dtype=experts.down_proj.dtype)
        zeros_d = torch.zeros(experts.down_proj.shape[1], dtype=experts.down_proj.dtype)
        members = []
        for e in range(experts.num_experts):
            W_gate_up = experts.gate_up_proj[e].detach().T  # [d, 2 d_ff]
            members.append(
                _gated(
                    (W_gate_up[:, :d_ff], zeros_ff),
                    (W_gate_up[:, d_ff:], zeros_ff),
                    (experts.down_proj[e].detach().T, zeros_d),
                    experts.act_fn,
                    name,
                )
            )
        return MixtureOfExperts(
            W_router=mlp.gate.weight.detach().T, experts=members, top_k=mlp.gate.top_k
        )
    activation = getattr(mlp, "act_fn", None) or mlp.activation_fn
    if hasattr(mlp, "gate_up_proj"):  # Phi-3: gate first
        W, b = linear(mlp.gate_up_proj)
        half = W.shape[1] // 2
        return _gated(
            (W[:, :half], b[:half]),
            (W[:, half:], b[half:]),
            linear(mlp.down_proj),
            activation,
            name,
        )
    return _gated(
        linear(mlp.gate_proj), linear(mlp.up_proj), linear(mlp.down_proj), activation, name
    )


def rotary(core, attn, config, index: int) -> Rotary | None:
    """The rotation layer `index` applies (None where the layer uses none: SmolLM3)."""
    if not getattr(attn, "use_rope", True):
        return None
    emb = core.rotary_emb
    layer_types = getattr(config, "layer_types", None)
    if hasattr(emb, "inv_freq"):
        inv_freq, scaling = emb.inv_freq, emb.attention_scaling
    else:  # Gemma-3: one set of angles per layer type
        kind = layer_types[index]
        inv_freq = getattr(emb, f"{kind}_inv_freq")
        scaling = getattr(emb, f"{kind}_attention_scaling")
    return Rotary(inv_freq.detach().clone(), 2 * inv_freq.shape[0], False, float(scaling))


def sliding_window(attn, config) -> int | None:
    """The layer's window: the module's own attribute, else the config's (Mistral, Phi-3)."""
    if hasattr(attn, "sliding_window"):
        return attn.sliding_window
    return getattr(config, "sliding_window", None)


def _layer(core, index: int, config) -> CanonicalLayer:
    layer = core.layers[index]
    attn = layer.self_attn
    model_type = config.model_type
    weights = attention_weights(attn, config)
    ff = feed_forward(layer.mlp, config)
    multiplier = getattr(config, "residual_multiplier", 1.0)  # Granite
    if multiplier != 1.0:
        weights["W_O"], weights["b_O"] = weights["W_O"] * multiplier, weights["b_O"] * multiplier
        ff = dataclasses.replace(ff, W_out=ff.W_out * multiplier, b_out=ff.b_out * multiplier)
    q_norm = _optional_norm(attn, "q_norm", model_type)
    k_norm = _optional_norm(attn, "k_norm", model_type)
    return CanonicalLayer(
        **weights,
        **layer_norms(layer, model_type),
        ff=ff,
        pre_ln=True,
        causal=True,
        scale=float(attn.scaling),
        rotary=rotary(core, attn, config, index),
        q_norm=q_norm,
        k_norm=k_norm,
        qk_norm_whole=q_norm is not None and q_norm.gamma.shape[0] != attn.head_dim,
        softcap=getattr(attn, "attn_logit_softcapping", None),
        sliding_window=sliding_window(attn, config),
    )


def embedding_scale(core, config) -> float:
    """What the model multiplies the looked-up embeddings by (Gemma, Granite)."""
    scale = getattr(core.embed_tokens, "embed_scale", None)
    value = float(scale) if scale is not None else 1.0
    return value * float(getattr(config, "embedding_multiplier", 1.0))


def canonical_layer(model, index: int) -> CanonicalLayer:
    return _layer(base_model(model), index, model.config)


def canonical_weights(model) -> CanonicalModel:
    config = model.config
    core = base_model(model)
    return CanonicalModel(
        architecture="decoder",
        model_type=config.model_type,
        layers=[canonical_layer(model, i) for i in range(len(core.layers))],
        word_embeddings=core.embed_tokens.weight.detach(),
        position_embeddings=None,
        token_type_embeddings=None,
        embedding_ln=None,
        final_ln=rms_norm(core.norm, config.model_type),
        embedding_scale=embedding_scale(core, config),
    )


def position_embeddings(core, x: torch.Tensor, index: int):
    """(cos, sin) [B, n, dims] the model hands layer `index`, from its own rotary module."""
    import torch

    positions = torch.arange(x.shape[1], device=x.device)[None].expand(x.shape[0], -1)
    emb = core.rotary_emb
    if "layer_type" in inspect.signature(emb.forward).parameters:
        return emb(x, positions, core.config.layer_types[index])
    return emb(x, positions)


def attention_output(model, layer: int, X: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Layer `layer`'s attention output computed by the modules themselves: self_attn(input
    norm of X), o_proj's output times Granite's residual multiplier (folded into the canonical
    W_O), before any norm on the block's output (Gemma-2/3, OLMo-2: `post_attn`, applied by
    the caller) and before the residual.  [B, n, d]"""
    import torch

    core = base_model(model)
    block = core.layers[layer]
    attn = block.self_attn
    x = block.input_layernorm(X) if hasattr(block, "input_layernorm") else X  # OLMo-2: none
    window = sliding_window(attn, model.config)
    with torch.no_grad():
        y = attn(
            hidden_states=x,
            attention_mask=additive_mask(mask, True, X.dtype, window),
            position_embeddings=position_embeddings(core, x, layer),
        )[0]
    return y * getattr(model.config, "residual_multiplier", 1.0)


def residual_states(model, inputs: dict) -> list[torch.Tensor]:
    """The n_layers + 1 raw residual states: the input of layer 0 and every layer's output,
    captured by hooks (the model's own last hidden state is after its final norm).

    Padding positions of every layer's input are set to 0 first. Real positions never read
    them (their keys are masked), but a padded query that sees no key at all (a sliding window
    shorter than the padding run) gets NaN from the eager softmax, and 0 x NaN in the next
    layer's value product would spread it to real rows.
    """
    import torch

    core = base_model(model)
    real = inputs["attention_mask"].bool()[..., None]
    states: list[torch.Tensor] = []

    def clean_input(module, args, kwargs):
        hidden = args[0] if args else kwargs["hidden_states"]
        hidden = torch.where(real, hidden, torch.zeros((), dtype=hidden.dtype))
        if not states:
            states.append(hidden)
        if args:
            return (hidden, *args[1:]), kwargs
        return args, {**kwargs, "hidden_states": hidden}

    def keep_output(module, args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        states.append(torch.where(real, hidden, torch.zeros((), dtype=hidden.dtype)))

    hooks = []
    for block in core.layers:
        hooks.append(block.register_forward_pre_hook(clean_input, with_kwargs=True))
        hooks.append(block.register_forward_hook(keep_output))
    try:
        with torch.no_grad():
            core(**inputs)
    finally:
        for hook in hooks:
            hook.remove()
    return states


ARCHITECTURE = Architecture(
    name="decoder",
    model_types=MODEL_TYPES,
    canonical_weights=canonical_weights,
    canonical_layer=canonical_layer,
    uses_segment_ids=lambda config: False,
    attention_output=attention_output,
    residual_states=residual_states,
    zero_padding_states=True,
    max_positions=lambda config: config["max_position_embeddings"],
    causal_lm_prefixes=("lm_head",),
    prediction_head=causal_head,
)
