"""The whole-layer decomposition carried from the input tokens through every layer.

The per-layer stages (`layer_decomposition.layer_stages`) split a layer's output by the tokens
of its own input X_l. Here the split is carried instead (as DecompX, Modarressi et al. 2023,
does for BERT): the embedding output starts split by input token, and every stage of every
layer is applied to the carried parts, so the state after layer l is

    x_{l, i} = sum_j p_{l, i<-j} + bias_{l, i},     p [B, n, n, d] (token i, input token j).

Start: the embedding output at position i is input token i's part (its word, position and
type embeddings and the embedding norm act at position i alone), and the bias is 0; every
bias term of the layers (b_O, b_V, norm offsets, FF biases) joins `bias`. Exact through
norms and gated FF blocks: a norm's scale and the FF's IG coefficients depend only on each
token's total, which the parts sum to. What is carried is the residual stream state X_l
(pre-LN: the block output, `AttnResLnFfRes`; post-LN: `AttnResLnFfResLn`).

Precision: the parts and every stage's arithmetic are float64 (`CARRY_DTYPE`; the layer's
weights are cast one layer at a time), the stored states and the module references stay
float32. Carried in float32, the rounding of n parts per token accumulates through the depth
and a correct split of a real 30-layer model with a 12,000 massive activation missed the
1e-4 bound (1.3e-4 at its last layer); in float64 the residual is what the float32 forward's
own rounding leaves, and the bound means the same at every depth.

Memory: the carried parts plus up to four stage tensors, each [B, n, n, d] float64: at d 4096
and n 512, 8 GiB per sequence and tensor. Cost per layer: the attention mixes every part,
B n^3 d multiply-adds, and the FF block B n^2 d d_ff (twice for a gated one).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from attnscope.architectures import architecture
from attnscope.core.canonical import CanonicalModel, cast
from attnscope.maps.layer_decomposition import (
    Carried,
    closing_layer_norm,
    layer_stages,
    reference_outputs,
)
from attnscope.maps.layer_maps import COMPLETENESS

CARRY_DTYPE = torch.float64  # the carried parts and every stage's arithmetic (module docstring)


def carried_scope(pre_ln: bool) -> str:
    """The stage that is the residual stream state X_{l+1}."""
    return "AttnResLnFfRes" if pre_ln else "AttnResLnFfResLn"


def token_split(X0: torch.Tensor) -> Carried:
    """The embedding output split by input token: x_{0, i} is token i's one part, bias 0.
    X0 [B, n, d] -> parts [B, n, n, d]."""
    parts = torch.zeros(*X0.shape[:2], *X0.shape[1:], dtype=X0.dtype, device=X0.device)
    parts.diagonal(dim1=1, dim2=2).copy_(X0.transpose(1, 2))
    return Carried(parts, torch.zeros_like(X0))


def propagate(
    model,
    weights: CanonicalModel,
    state: Callable[[int], torch.Tensor | None],
    mask: torch.Tensor,
    ig_steps: int,
    check: Callable[[int, str, torch.Tensor, torch.Tensor], None],
    on_layer: Callable[[int, Carried], None] | None = None,
) -> Carried:
    """Carry the token split of one batch through every layer; return the last state's split.

    `state(l)`: the stored hidden state X_l [B, n, d] (l = 0 .. L), or None where the store is
    not exact (float16): the layer then reads the carried total. `check(layer, stage, got,
    want)` receives every stage's rebuilt output and the real one (1-based layer; the
    attention from the module itself, the last stage the stored next state when exact; also
    `FfCompleteness`). `on_layer(l, carried)` (1-based) sees each layer's state split before
    the next layer starts.
    """
    arch = architecture(model.config.model_type)
    carried = token_split(state(0).to(CARRY_DTYPE))
    for index, layer in enumerate(weights.layers):
        X = state(index)
        X = carried.total().to(state(0).dtype) if X is None else X
        X_next = state(index + 1)
        closing = closing_layer_norm(weights.outline, weights.final_ln, index)
        y = arch.attention_output(model, index, X, mask)
        reference = reference_outputs(X, y, layer, closing, X_next)
        extra: dict = {}
        wanted = carried_scope(layer.pre_ln)
        stages = layer_stages(
            X.to(CARRY_DTYPE),
            mask,
            cast(layer, CARRY_DTYPE),
            cast(closing, CARRY_DTYPE),
            ig_steps,
            extra,
            carried=carried,
        )
        for stage in stages:
            check(index + 1, stage.scope, stage.total(), reference[stage.scope])
            if stage.scope == "AttnResLnFf":
                check(index + 1, COMPLETENESS, stage.total(), extra["ff_real"])
            if stage.scope == wanted:  # later stages make new tensors: no copy needed
                following = Carried(stage.parts, stage.bias)
        carried = following
        if on_layer is not None:
            on_layer(index + 1, carried)
    return carried


def contribution_norms(carried: Carried, visible: torch.Tensor) -> torch.Tensor:
    """||p_{i<-j}|| with invisible pairs and padding 0.  -> [B, n, n]"""
    return carried.parts.norm(dim=-1) * visible


def bias_share(carried: Carried) -> torch.Tensor:
    """||bias_i|| / (sum_j ||p_{i<-j}|| + ||bias_i||): the share of the state's norm budget
    that no input token carries.  [B, n]"""
    bias = carried.bias.norm(dim=-1)
    total = carried.parts.norm(dim=-1).sum(-1) + bias
    return torch.where(total > 0, bias / total.clamp_min(1e-30), torch.zeros_like(total))
