"""Rotary decoders of the GPT-NeoX lineage: GPT-NeoX (Pythia), StableLM and Cohere (Command-R).

What sets them apart from the Llama anatomy (`decoders`), read in each model's `transformers`
forward:

- norms: LayerNorm, not RMSNorm: `nn.LayerNorm` with a bias (GPT-NeoX, StableLM) or
  CohereLayerNorm (centred, weight only, computed in float32). `final_layer_norm` (GPT-NeoX)
  or `norm` after the last layer.
- block order: parallel residual, X + Attn(ln_attn X) + FF(ln_ff X): GPT-NeoX and StableLM
  when `use_parallel_residual` (GPT-NeoX reads its `post_attention_layernorm` of X, StableLM
  its one `input_layernorm` for both blocks), Cohere always (one shared `input_layernorm`).
  Without it GPT-NeoX and StableLM are ordinary pre-LN layers.
- attention: GPT-NeoX's module is `attention`, with one fused `query_key_value` whose output
  is viewed per head as [q | k | v] (head_size each: the rows of q, k and v are interleaved
  head by head) and a `dense` output projection; StableLM and Cohere have q/k/v/o_proj.
  QK-norm with its own LayerNorm weights per head: StableLM's `q_layernorm`/`k_layernorm`
  (one nn.LayerNorm per head, no bias), Cohere's `q_norm`/`k_norm` (a [heads, d'] weight).
- rotation: `model.rotary_emb` at model level. Partial in GPT-NeoX and StableLM
  (`partial_rotary_factor`: the first dims of every head turn, rotate_half within them);
  Cohere turns the whole head with interleaved pairs (2b, 2b + 1): its angles are
  repeat_interleave'd and its rotate_half stacks (-x[1::2], x[0::2]).
- feed-forward: GPT-NeoX's plain `dense_h_to_4h` / act / `dense_4h_to_h` with biases;
  StableLM and Cohere: gated gate/up/down_proj without biases.
- embeddings: `embed_in` (GPT-NeoX) or `embed_tokens`, unscaled. Cohere's `logit_scale`
  multiplies the LM head's logits only, outside the residual stream.

States: as `decoders` (raw layer outputs captured by hooks, padding set to 0).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnscope.architectures.base import Architecture, additive_mask, base_model, causal_head
from attnscope.architectures.decoders import (
    attention_weights,
    feed_forward,
    linear,
    position_embeddings,
    residual_states,
)
from attnscope.core.canonical import (
    CanonicalLayer,
    CanonicalLayerNorm,
    CanonicalModel,
    FeedForward,
    Rotary,
)

if TYPE_CHECKING:
    import torch

MODEL_TYPES = ("gpt_neox", "stablelm", "cohere")
ALWAYS_PARALLEL = ("cohere",)  # no switch: both blocks read the one input norm of X
INTERLEAVED_ROTARY = ("cohere",)  # rotation pairs (2b, 2b + 1)


def layer_norm(module) -> CanonicalLayerNorm:
    """nn.LayerNorm (bias or none) or CohereLayerNorm (weight only, `variance_epsilon`), in
    canonical form: centred, beta zero where the module has no bias."""
    import torch

    gamma = module.weight.detach()
    bias = getattr(module, "bias", None)
    beta = torch.zeros_like(gamma) if bias is None else bias.detach()
    eps = getattr(module, "eps", None)
    eps = module.variance_epsilon if eps is None else eps
    return CanonicalLayerNorm(gamma, beta, float(eps), centred=True)


def head_norm(module) -> CanonicalLayerNorm:
    """A QK-norm with its own weights per head, as gamma, beta [heads, 1, d'] over the heads
    [B, heads, n, d']: StableLM's list of LayerNorms (one per head) or Cohere's [heads, d']
    weight."""
    import torch

    if hasattr(module, "norms"):  # StableLmLayerNormPerHead
        norms = [layer_norm(norm) for norm in module.norms]
        eps = {norm.eps for norm in norms}
        if len(eps) != 1:
            raise ValueError(f"per-head QK-norms with different eps: {sorted(eps)}")
        gamma = torch.stack([norm.gamma for norm in norms])
        beta = torch.stack([norm.beta for norm in norms])
        return CanonicalLayerNorm(gamma[:, None], beta[:, None], eps.pop(), centred=True)
    norm = layer_norm(module)  # CohereLayerNorm over (heads, d')
    return CanonicalLayerNorm(norm.gamma[:, None], norm.beta[:, None], norm.eps, centred=True)


def attention_module(block):
    """The layer's attention module: `attention` in GPT-NeoX, `self_attn` otherwise."""
    return block.attention if hasattr(block, "attention") else block.self_attn


def qk_norms(attn) -> tuple[CanonicalLayerNorm | None, CanonicalLayerNorm | None]:
    """(q_norm, k_norm) where the module normalises its heads (StableLM, Cohere), else None."""
    if getattr(attn, "qk_layernorm", False):  # StableLM
        return head_norm(attn.q_layernorm), head_norm(attn.k_layernorm)
    if getattr(attn, "use_qk_norm", False):  # Cohere
        return head_norm(attn.q_norm), head_norm(attn.k_norm)
    return None, None


def _neox_attention_weights(attn) -> dict:
    """GPT-NeoX's fused projection: output column h * 3 d' + t * d' + e is head h's q, k or v
    (t = 0, 1, 2) in dimension e (the module views it as [.., H, 3 d'] and chunks the last
    axis in three)."""
    d_head = attn.head_size
    W, b = linear(attn.query_key_value)  # [d, 3 H d'], [3 H d']
    d = W.shape[0]
    W = W.reshape(d, -1, 3, d_head)  # [d, H, 3, d']
    b = b.reshape(-1, 3, d_head)  # [H, 3, d']
    out = {}
    for t, key in enumerate("QKV"):
        out[f"W_{key}"] = W[:, :, t].permute(1, 0, 2).contiguous()
        out[f"b_{key}"] = b[:, t].contiguous()
    W_O, b_O = linear(attn.dense)
    out["W_O"] = W_O.reshape(-1, d_head, W_O.shape[1]).contiguous()
    out["b_O"] = b_O
    return out


def _plain_feed_forward(mlp, config) -> FeedForward:
    """GPT-NeoX's act(h W_in + b_in) W_out + b_out."""
    W_in, b_in = linear(mlp.dense_h_to_4h)
    W_out, b_out = linear(mlp.dense_4h_to_h)
    return FeedForward(W_in, b_in, W_out, b_out, mlp.act, activation_name=config.hidden_act)


def parallel(block, model_type: str) -> bool:
    """Whether both blocks read X (parallel residual) rather than the FF reading X + Attn."""
    if model_type in ALWAYS_PARALLEL:
        return True
    return bool(block.use_parallel_residual)


def layer_norms(block, model_type: str) -> dict:
    """ln_attn and ln_ff: the FF reads `post_attention_layernorm` where the layer has one
    (GPT-NeoX; StableLM sequential), else the attention's `input_layernorm` (Cohere;
    StableLM parallel: the same norm of X for both blocks)."""
    ln_attn = layer_norm(block.input_layernorm)
    post = getattr(block, "post_attention_layernorm", None)
    return {"ln_attn": ln_attn, "ln_ff": ln_attn if post is None else layer_norm(post)}


def rotary(core, model_type: str) -> Rotary:
    """The rotation every layer applies: the model's `rotary_emb` angles on the first
    2 len(inv_freq) dims of each head (the partial rotary dims)."""
    emb = core.rotary_emb
    inv_freq = emb.inv_freq.detach().clone()
    return Rotary(
        inv_freq,
        2 * inv_freq.shape[0],
        interleaved=model_type in INTERLEAVED_ROTARY,
        scaling=float(emb.attention_scaling),
    )


def _layer(core, index: int, config) -> CanonicalLayer:
    block = core.layers[index]
    attn = attention_module(block)
    model_type = config.model_type
    if model_type == "gpt_neox":
        weights = _neox_attention_weights(attn)
        ff = _plain_feed_forward(block.mlp, config)
    else:
        weights = attention_weights(attn, config)
        ff = feed_forward(block.mlp, config)
    q_norm, k_norm = qk_norms(attn)
    return CanonicalLayer(
        **weights,
        **layer_norms(block, model_type),
        ff=ff,
        pre_ln=True,
        causal=True,
        scale=float(attn.scaling),
        parallel=parallel(block, model_type),
        rotary=rotary(core, model_type),
        q_norm=q_norm,
        k_norm=k_norm,
    )


def word_embeddings(core) -> torch.Tensor:
    return (core.embed_in if hasattr(core, "embed_in") else core.embed_tokens).weight.detach()


def final_norm(core):
    return core.final_layer_norm if hasattr(core, "final_layer_norm") else core.norm


def canonical_layer(model, index: int) -> CanonicalLayer:
    return _layer(base_model(model), index, model.config)


def canonical_weights(model) -> CanonicalModel:
    config = model.config
    core = base_model(model)
    return CanonicalModel(
        architecture="neox",
        model_type=config.model_type,
        layers=[canonical_layer(model, i) for i in range(len(core.layers))],
        word_embeddings=word_embeddings(core),
        position_embeddings=None,
        token_type_embeddings=None,
        embedding_ln=None,
        final_ln=layer_norm(final_norm(core)),
    )


def attention_output(model, layer: int, X: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Layer `layer`'s attention output computed by the modules themselves: the attention
    module on `input_layernorm(X)`, its output projection included, before the residual
    (and without the FF, which a parallel layer adds beside it).  [B, n, d]"""
    import torch

    core = base_model(model)
    block = core.layers[layer]
    x = block.input_layernorm(X)
    with torch.no_grad():
        return attention_module(block)(
            hidden_states=x,
            attention_mask=additive_mask(mask, True, X.dtype),
            position_embeddings=position_embeddings(core, x, layer),
        )[0]


ARCHITECTURE = Architecture(
    name="neox",
    model_types=MODEL_TYPES,
    canonical_weights=canonical_weights,
    canonical_layer=canonical_layer,
    uses_segment_ids=lambda config: False,
    attention_output=attention_output,
    residual_states=residual_states,
    zero_padding_states=True,
    max_positions=lambda config: config["max_position_embeddings"],
    causal_lm_prefixes=("lm_head", "embed_out"),
    prediction_head=causal_head,
)
