"""What every architecture tells the rest of attnscope, and helpers the architectures share.

An architecture (one module of this package) knows its `transformers` modules; nothing outside this
package names a module path or branches on `model_type`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported inside the functions: the workflow reads the registry
    import torch  # when it parses the config, in an environment without torch

from attnscope.core.canonical import (
    CanonicalLayer,
    CanonicalLayerNorm,
    CanonicalModel,
    PredictionHead,
)


class UnsupportedModelError(ValueError):
    """The model's architecture is not in `attnscope.architectures`."""


@dataclass(frozen=True)
class Architecture:
    """One architecture: the `transformers` model types that share one module layout.

    model_types          `config.model_type` values the architecture handles
    canonical_weights    loaded model -> CanonicalModel
    canonical_layer      (loaded model, layer index from 0) -> that layer's CanonicalLayer alone
    uses_segment_ids     config -> whether the forward pass takes token_type_ids
    attention_output     (model, layer index from 0, X [B, n, d], mask [B, n]) -> the attention
                         block's output computed by the module itself, before any residual [B, n, d]
    residual_states      (model, inputs) -> the n_layers + 1 residual-stream states [B, n, d];
                         state l is the input of layer l + 1 (no final LayerNorm applied)
    max_positions        config.json as a dict -> the longest input (pieces) the model takes
    dimensions           config.json as a dict -> (number of layers, width of the residual stream)
    n_heads              config.json as a dict -> attention heads per layer (query heads)
    mlm_head_prefixes    weight-name prefixes of a masked-LM head (none for causal LMs)
    causal_lm_prefixes   weight-name prefixes of a causal LM's output head (none for encoders)
    has_mask_token       whether the architecture's tokenizers have a mask token ([MASK], <mask>)
    prediction_head      model loaded with its LM head -> its `PredictionHead` (read from the
                         head's modules and the config), None for a bare model
    zero_padding_states  whether `residual_states` sets the padding positions of every state
                         to 0 (the layer-streamed extraction does the same)
    unused_modules       top-level modules of the bare model that no analysis reads (BERT's
                         pooler): a checkpoint may lack their tensors, or hold them beside a head
    """

    name: str
    model_types: tuple[str, ...]
    canonical_weights: Callable[[torch.nn.Module], CanonicalModel]
    canonical_layer: Callable[[torch.nn.Module, int], CanonicalLayer]
    uses_segment_ids: Callable[[object], bool]
    attention_output: Callable[..., torch.Tensor]
    residual_states: Callable[[torch.nn.Module, dict], list[torch.Tensor]]
    max_positions: Callable[[dict], int]
    mlm_head_prefixes: tuple[str, ...] = ()
    causal_lm_prefixes: tuple[str, ...] = ()
    has_mask_token: bool = False
    prediction_head: Callable[[torch.nn.Module], PredictionHead | None] = lambda model: None
    zero_padding_states: bool = False
    unused_modules: tuple[str, ...] = ()
    dimensions: Callable[[dict], tuple[int, int]] = lambda config: (
        config["num_hidden_layers"],
        config["hidden_size"],
    )
    n_heads: Callable[[dict], int] = lambda config: config["num_attention_heads"]

    def model_inputs(self, model, input_ids, attention_mask, token_type_ids) -> dict:
        """Keyword arguments of the forward pass; segment ids only where the model uses them."""
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.uses_segment_ids(model.config):
            inputs["token_type_ids"] = token_type_ids
        return inputs


def base_model(model):
    """The bare encoder/decoder of a model that may carry a task head."""
    prefix = getattr(model, "base_model_prefix", "")
    return getattr(model, prefix, model) if prefix else model


@contextmanager
def unembedding_input(model, select: Callable):
    """While open, each forward of `model` (loaded with its LM head) hands its output
    embedding (the unembedding, W_U) `select(x)` instead of its input x [B, n, d_e] (after the
    final norm, and a masked-LM head's transform), and appends x to the yielded list: the
    model's own logits are then those of the positions `select` keeps (e.g. a few
    [P, 1, d_e]), never [B, n, V], and x keeps its autograd graph for a loss built from it
    in chunks (`core.lm_head`)."""
    seen: list = []

    def hook(module, args):
        seen.append(args[0])
        return (select(args[0]), *args[1:])

    handle = model.get_output_embeddings().register_forward_pre_hook(hook)
    try:
        yield seen
    finally:
        handle.remove()


def layer_norm(module: torch.nn.LayerNorm) -> CanonicalLayerNorm:
    return CanonicalLayerNorm(module.weight.detach(), module.bias.detach(), module.eps)


def split_heads_in(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[d, H*d'] (x @ W layout) -> [H, d, d']."""
    d, hd = weight.shape
    return weight.reshape(d, n_heads, hd // n_heads).permute(1, 0, 2).contiguous()


def split_heads_bias(bias: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[H*d'] -> [H, d']."""
    return bias.reshape(n_heads, -1).contiguous()


def split_heads_out(weight: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[H*d', d] (x @ W layout) -> [H, d', d]."""
    hd, d = weight.shape
    return weight.reshape(n_heads, hd // n_heads, d).contiguous()


def additive_mask(
    mask: torch.Tensor, causal: bool, dtype: torch.dtype, window: int | None = None
) -> torch.Tensor:
    """The [B, 1, n, n] additive mask a `transformers` attention module takes, built here
    independently of `attnscope.core.attention` so that checks against the module stay
    independent: 0 where query i may see key j (j <= i when causal, i - j < window within a
    sliding window), the dtype's minimum elsewhere."""
    import torch

    n = mask.shape[-1]
    visible = mask[:, None, None, :].bool()
    if causal:
        visible = visible & torch.ones(n, n, dtype=torch.bool, device=mask.device).tril()
    if window is not None:
        i, j = torch.arange(n, device=mask.device)[:, None], torch.arange(n, device=mask.device)
        visible = visible & (i - j < window)
    additive = torch.zeros(visible.shape, dtype=dtype, device=mask.device)
    return additive.masked_fill(~visible, torch.finfo(dtype).min)


def hidden_states_forward(model, inputs: dict) -> list[torch.Tensor]:
    """`output_hidden_states` of a forward pass without gradients, of the bare model (a
    model loaded with its LM head would build logits over the vocabulary, [B, n, V], for
    nothing).  n_layers + 1 x [B, n, d]"""
    import torch

    with torch.no_grad():
        return list(base_model(model)(**inputs, output_hidden_states=True).hidden_states)


def causal_head(model) -> PredictionHead | None:
    """A causal LM's head: its output embedding (`lm_head`, GPT-NeoX's `embed_out`; tied or
    not) after the final norm, then the config's logit multiplier (Granite divides by
    `logits_scaling`, Cohere multiplies by its `logit_scale`) and Gemma-2/3's soft-cap
    (`final_logit_softcapping`), as their `ForCausalLM.forward` applies them. None for a bare
    model."""
    import torch

    output = model.get_output_embeddings()
    if output is None:
        return None
    config = model.config
    W_U = output.weight.detach().T
    b_U = output.bias.detach() if output.bias is not None else torch.zeros_like(W_U[0])
    # Cohere's forward multiplies by the attribute its __init__ copied from the config
    multiplier = getattr(model, "logit_scale", 1.0) / getattr(config, "logits_scaling", 1.0)
    return PredictionHead(
        W_U, b_U, multiplier=multiplier, softcap=getattr(config, "final_logit_softcapping", None)
    )
