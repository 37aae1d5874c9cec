"""Canonical per-layer weights for every supported architecture family.

Analyses never touch `transformers` modules directly: they read a `ModelWeights`, whose
tensors follow one convention for every family (row vectors, x @ W):

    W_Q, W_K, W_V  [H, d, d']    b_Q, b_K, b_V  [H, d']
    W_O            [H, d', d]    b_O            [d]
    W_in           [d, d_ff]     b_in           [d_ff]
    W_out          [d_ff, d]     b_out          [d]

Families: "bert" (BERT, RoBERTa, ELECTRA; post-LN) and "gpt2" (pre-LN, Conv1D weights).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

BERT_FAMILY = ("bert", "roberta", "electra", "xlm-roberta", "camembert")
GPT2_FAMILY = ("gpt2",)
SUPPORTED_MODEL_TYPES = BERT_FAMILY + GPT2_FAMILY


class UnsupportedModelError(ValueError):
    """The model's architecture has no adapter."""


@dataclass(frozen=True)
class LayerNormWeights:
    gamma: torch.Tensor  # [d]
    beta: torch.Tensor  # [d]
    eps: float

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.layer_norm(x, x.shape[-1:], self.gamma, self.beta, self.eps)


@dataclass(frozen=True)
class LayerWeights:
    """One transformer layer in canonical form (see the module docstring for shapes).

    `pre_ln`: False for post-LN (BERT: LN after each residual sum), True for pre-LN
    (GPT-2: LN before attention and before the feed-forward block).
    `ln_attn` is the LN around the attention block (after it in post-LN, before it in
    pre-LN); `ln_ff` likewise for the feed-forward block.
    `scale` multiplies the raw scores q k^T (1/sqrt(d') unless the model says otherwise).
    """

    W_Q: torch.Tensor
    b_Q: torch.Tensor
    W_K: torch.Tensor
    b_K: torch.Tensor
    W_V: torch.Tensor
    b_V: torch.Tensor
    W_O: torch.Tensor
    b_O: torch.Tensor
    ln_attn: LayerNormWeights
    ln_ff: LayerNormWeights
    W_in: torch.Tensor
    b_in: torch.Tensor
    W_out: torch.Tensor
    b_out: torch.Tensor
    activation: Callable[[torch.Tensor], torch.Tensor]
    pre_ln: bool
    causal: bool
    scale: float

    @property
    def n_heads(self) -> int:
        return self.W_Q.shape[0]

    @property
    def d_model(self) -> int:
        return self.W_Q.shape[1]

    @property
    def d_head(self) -> int:
        return self.W_Q.shape[2]


@dataclass(frozen=True)
class ModelWeights:
    """A whole model in canonical form.

    `position_embeddings` [T, d] holds only the rows that real positions use (RoBERTa's
    reserved rows before padding_idx + 1 are dropped). `final_ln` is GPT-2's ln_f (None
    for post-LN families). Token categories use the ids in `cls_ids` / `sep_ids`.
    """

    family: str
    model_type: str
    layers: list[LayerWeights]
    word_embeddings: torch.Tensor  # [V, d_emb]
    position_embeddings: torch.Tensor  # [T, d_emb]
    token_type_embeddings: torch.Tensor | None  # [types, d_emb]
    embedding_ln: LayerNormWeights | None
    final_ln: LayerNormWeights | None

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def n_heads(self) -> int:
        return self.layers[0].n_heads

    @property
    def d_model(self) -> int:
        return self.layers[0].d_model

    @property
    def d_head(self) -> int:
        return self.layers[0].d_head

    @property
    def causal(self) -> bool:
        return self.layers[0].causal


def _ln(module: torch.nn.LayerNorm) -> LayerNormWeights:
    return LayerNormWeights(module.weight.detach(), module.bias.detach(), module.eps)


def _split_heads_in(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[d, H*d'] (x @ W layout) -> [H, d, d']."""
    d, hd = weight.shape
    return weight.reshape(d, n_heads, hd // n_heads).permute(1, 0, 2).contiguous()


def _split_heads_bias(bias: torch.Tensor, n_heads: int) -> torch.Tensor:
    return bias.reshape(n_heads, -1).contiguous()


def _split_heads_out(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[H*d', d] (x @ W layout) -> [H, d', d]."""
    hd, d = weight.shape
    return weight.reshape(n_heads, hd // n_heads, d).contiguous()


def _bert_layer(layer, config, activation) -> LayerWeights:
    H = config.num_attention_heads
    self_attn = layer.attention.self
    d_head = config.hidden_size // H
    return LayerWeights(
        W_Q=_split_heads_in(self_attn.query.weight.detach().T, H),
        b_Q=_split_heads_bias(self_attn.query.bias.detach(), H),
        W_K=_split_heads_in(self_attn.key.weight.detach().T, H),
        b_K=_split_heads_bias(self_attn.key.bias.detach(), H),
        W_V=_split_heads_in(self_attn.value.weight.detach().T, H),
        b_V=_split_heads_bias(self_attn.value.bias.detach(), H),
        W_O=_split_heads_out(layer.attention.output.dense.weight.detach().T, H),
        b_O=layer.attention.output.dense.bias.detach(),
        ln_attn=_ln(layer.attention.output.LayerNorm),
        ln_ff=_ln(layer.output.LayerNorm),
        W_in=layer.intermediate.dense.weight.detach().T.contiguous(),
        b_in=layer.intermediate.dense.bias.detach(),
        W_out=layer.output.dense.weight.detach().T.contiguous(),
        b_out=layer.output.dense.bias.detach(),
        activation=activation,
        pre_ln=False,
        causal=False,
        scale=d_head**-0.5,
    )


def _gpt2_layer(block, config, activation, index: int) -> LayerWeights:
    H = config.n_head
    d = config.n_embd
    W_qkv = block.attn.c_attn.weight.detach()  # Conv1D: [d, 3d], already x @ W
    b_qkv = block.attn.c_attn.bias.detach()
    scale = (d // H) ** -0.5 if config.scale_attn_weights else 1.0
    if config.scale_attn_by_inverse_layer_idx:
        scale /= index + 1
    return LayerWeights(
        W_Q=_split_heads_in(W_qkv[:, :d], H),
        b_Q=_split_heads_bias(b_qkv[:d], H),
        W_K=_split_heads_in(W_qkv[:, d : 2 * d], H),
        b_K=_split_heads_bias(b_qkv[d : 2 * d], H),
        W_V=_split_heads_in(W_qkv[:, 2 * d :], H),
        b_V=_split_heads_bias(b_qkv[2 * d :], H),
        W_O=_split_heads_out(block.attn.c_proj.weight.detach(), H),
        b_O=block.attn.c_proj.bias.detach(),
        ln_attn=_ln(block.ln_1),
        ln_ff=_ln(block.ln_2),
        W_in=block.mlp.c_fc.weight.detach(),
        b_in=block.mlp.c_fc.bias.detach(),
        W_out=block.mlp.c_proj.weight.detach(),
        b_out=block.mlp.c_proj.bias.detach(),
        activation=activation,
        pre_ln=True,
        causal=True,
        scale=scale,
    )


def base_model(model):
    """The bare encoder/decoder of a model that may carry a task head."""
    prefix = getattr(model, "base_model_prefix", "")
    return getattr(model, prefix, model) if prefix else model


def canonical_weights(model) -> ModelWeights:
    """Extract canonical weights from a loaded `transformers` model (any head)."""
    from transformers.activations import ACT2FN

    config = model.config
    model_type = config.model_type
    core = base_model(model)
    if model_type in BERT_FAMILY:
        if getattr(core, "embeddings_project", None) is not None:
            raise UnsupportedModelError(
                f"{model_type} with embedding_size != hidden_size is not supported"
            )
        activation = ACT2FN[config.hidden_act]
        emb = core.embeddings
        positions = emb.position_embeddings.weight.detach()
        if model_type in ("roberta", "xlm-roberta", "camembert"):
            positions = positions[config.pad_token_id + 1 :]
        return ModelWeights(
            family="bert",
            model_type=model_type,
            layers=[_bert_layer(lay, config, activation) for lay in core.encoder.layer],
            word_embeddings=emb.word_embeddings.weight.detach(),
            position_embeddings=positions,
            token_type_embeddings=emb.token_type_embeddings.weight.detach(),
            embedding_ln=_ln(emb.LayerNorm),
            final_ln=None,
        )
    if model_type in GPT2_FAMILY:
        activation = ACT2FN[config.activation_function]
        return ModelWeights(
            family="gpt2",
            model_type=model_type,
            layers=[_gpt2_layer(block, config, activation, i) for i, block in enumerate(core.h)],
            word_embeddings=core.wte.weight.detach(),
            position_embeddings=core.wpe.weight.detach(),
            token_type_embeddings=None,
            embedding_ln=None,
            final_ln=_ln(core.ln_f),
        )
    raise UnsupportedModelError(
        f"model_type {model_type!r} is not supported; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
    )


def load_model(path: str, device: str = "cpu", with_lm_head: bool = False):
    """Load a model from a local folder with eager attention, in eval mode.

    `with_lm_head`: load the masked-LM head too (for gradient analyses); returns None
    when the checkpoint has none.
    """
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM

    config = AutoConfig.from_pretrained(path)
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        raise UnsupportedModelError(
            f"model at {path} has model_type {config.model_type!r}; "
            f"supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        )
    if with_lm_head:
        if not has_mlm_head(path):
            return None
        model = AutoModelForMaskedLM.from_pretrained(path, attn_implementation="eager")
    else:
        model = AutoModel.from_pretrained(path, attn_implementation="eager")
    return model.to(device).eval()


def has_mlm_head(path: str) -> bool:
    """Whether the checkpoint in `path` stores masked-LM head weights."""
    import json
    from pathlib import Path

    from safetensors import safe_open

    folder = Path(path)
    names: set[str] = set()
    index = folder / "model.safetensors.index.json"
    if index.exists():
        names = set(json.loads(index.read_text())["weight_map"])
    elif (folder / "model.safetensors").exists():
        with safe_open(folder / "model.safetensors", "pt") as f:
            names = set(f.keys())
    elif (folder / "pytorch_model.bin").exists():
        state = torch.load(folder / "pytorch_model.bin", map_location="cpu")
        names = set(state)
    return any(n.startswith(("cls.predictions", "lm_head", "generator_lm_head")) for n in names)


def pick_device(setting: str) -> str:
    """Resolve the `device` setting (auto/cpu/cuda) to a torch device string."""
    if setting == "cpu":
        return "cpu"
    available = torch.cuda.is_available()
    if setting == "cuda" and not available:
        raise RuntimeError("device: cuda was asked for, but torch sees no CUDA device")
    return "cuda" if available else "cpu"
