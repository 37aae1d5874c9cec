"""BERT-like encoders (post-LN): BERT, RoBERTa, ELECTRA, XLM-RoBERTa, CamemBERT.

RoBERTa-style models reserve the position rows up to padding_idx; the canonical position
embeddings drop them, so row t is real position t. Their position ids count only the pieces
that are not the pad id, a pad piece reading row padding_idx: the canonical model keeps that
id and row (`CanonicalModel.position_rows`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from attnscope.architectures.base import (
    Architecture,
    UnsupportedModelError,
    additive_mask,
    base_model,
    hidden_states_forward,
    layer_norm,
    split_heads_bias,
    split_heads_in,
    split_heads_out,
)
from attnscope.core.canonical import (
    CanonicalLayer,
    CanonicalModel,
    FeedForward,
    PredictionHead,
)

if TYPE_CHECKING:
    import torch

ROBERTA_POSITIONS = ("roberta", "xlm-roberta", "camembert")


def _layer(layer, config, activation, activation_name: str) -> CanonicalLayer:
    H = config.num_attention_heads
    self_attn = layer.attention.self
    d_head = config.hidden_size // H
    return CanonicalLayer(
        W_Q=split_heads_in(self_attn.query.weight.detach().T, H),
        b_Q=split_heads_bias(self_attn.query.bias.detach(), H),
        W_K=split_heads_in(self_attn.key.weight.detach().T, H),
        b_K=split_heads_bias(self_attn.key.bias.detach(), H),
        W_V=split_heads_in(self_attn.value.weight.detach().T, H),
        b_V=split_heads_bias(self_attn.value.bias.detach(), H),
        W_O=split_heads_out(layer.attention.output.dense.weight.detach().T, H),
        b_O=layer.attention.output.dense.bias.detach(),
        ln_attn=layer_norm(layer.attention.output.LayerNorm),
        ln_ff=layer_norm(layer.output.LayerNorm),
        ff=FeedForward(
            W_in=layer.intermediate.dense.weight.detach().T.contiguous(),
            b_in=layer.intermediate.dense.bias.detach(),
            W_out=layer.output.dense.weight.detach().T.contiguous(),
            b_out=layer.output.dense.bias.detach(),
            activation=activation,
            activation_name=activation_name,
        ),
        pre_ln=False,
        causal=False,
        scale=d_head**-0.5,
    )


def canonical_layer(model, index: int) -> CanonicalLayer:
    from transformers.activations import ACT2FN

    config = model.config
    layer = base_model(model).encoder.layer[index]
    return _layer(layer, config, ACT2FN[config.hidden_act], config.hidden_act)


def canonical_weights(model) -> CanonicalModel:
    config = model.config
    core = base_model(model)
    if getattr(core, "embeddings_project", None) is not None:
        raise UnsupportedModelError(
            f"{config.model_type} with embedding_size != hidden_size is not supported"
        )
    emb = core.embeddings
    positions = emb.position_embeddings.weight.detach()
    padding = {}
    if config.model_type in ROBERTA_POSITIONS:  # create_position_ids_from_input_ids
        pad = config.pad_token_id
        padding = {"padding_id": pad, "padding_position": positions[pad]}
        positions = positions[pad + 1 :]
    return CanonicalModel(
        architecture="bert",
        model_type=config.model_type,
        layers=[canonical_layer(model, i) for i in range(len(core.encoder.layer))],
        word_embeddings=emb.word_embeddings.weight.detach(),
        position_embeddings=positions,
        token_type_embeddings=emb.token_type_embeddings.weight.detach(),
        embedding_ln=layer_norm(emb.LayerNorm),
        final_ln=None,
        **padding,
    )


def prediction_head(model) -> PredictionHead | None:
    """The masked-LM head: dense -> activation -> LayerNorm -> decoder (+ bias), as BERT's
    `cls.predictions` (transform_act_fn from hidden_act), RoBERTa's `lm_head` and ELECTRA's
    `generator_predictions` + `generator_lm_head` (both erf-GELU) compute it. None for a
    bare encoder."""
    import torch
    from transformers.activations import ACT2FN

    if hasattr(model, "cls"):
        transform = model.cls.predictions.transform
        dense, ln, decoder = transform.dense, transform.LayerNorm, model.cls.predictions.decoder
        activation_name = model.config.hidden_act
    elif hasattr(model, "lm_head"):
        head = model.lm_head
        dense, ln, decoder, activation_name = head.dense, head.layer_norm, head.decoder, "gelu"
    elif hasattr(model, "generator_lm_head"):
        head = model.generator_predictions
        dense, ln, decoder = head.dense, head.LayerNorm, model.generator_lm_head
        activation_name = "gelu"
    else:
        return None
    W = dense.weight.detach().T.contiguous()
    width = W.shape[1]
    identity = torch.eye(width, dtype=W.dtype, device=W.device)
    return PredictionHead(
        W_U=decoder.weight.detach().T,
        b_U=decoder.bias.detach(),
        transform=FeedForward(
            W_in=W,
            b_in=dense.bias.detach(),
            W_out=identity,
            b_out=torch.zeros_like(identity[0]),
            activation=ACT2FN[activation_name],
            activation_name=activation_name,
        ),
        ln=layer_norm(ln),
    )


def uses_segment_ids(config) -> bool:
    """Segment ids only when the model has more than one token type (else zeros would be
    added anyway; RoBERTa has one type)."""
    return getattr(config, "type_vocab_size", 1) > 1


def attention_output(model, layer: int, X: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`encoder.layer[l].attention` run on X, taken at `attention.output.dense` (before dropout,
    residual and LayerNorm) with a forward hook.  [B, n, d]"""
    import torch

    attention = base_model(model).encoder.layer[layer].attention
    captured = {}
    hook = attention.output.dense.register_forward_hook(
        lambda module, args, output: captured.update(y=output)
    )
    try:
        with torch.no_grad():
            attention(X, attention_mask=additive_mask(mask, False, X.dtype))
    finally:
        hook.remove()
    return captured["y"]


def max_positions(config: dict) -> int:
    """Position rows minus RoBERTa's reserved ones (up to padding_idx)."""
    reserved = config["pad_token_id"] + 1 if config["model_type"] in ROBERTA_POSITIONS else 0
    return config["max_position_embeddings"] - reserved


ARCHITECTURE = Architecture(
    name="bert",
    model_types=("bert", "roberta", "electra", "xlm-roberta", "camembert"),
    canonical_weights=canonical_weights,
    canonical_layer=canonical_layer,
    uses_segment_ids=uses_segment_ids,
    attention_output=attention_output,
    residual_states=hidden_states_forward,
    max_positions=max_positions,
    mlm_head_prefixes=("cls.predictions", "lm_head", "generator_lm_head"),
    has_mask_token=True,
    prediction_head=prediction_head,
    unused_modules=("pooler",),
)
