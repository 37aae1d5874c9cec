"""Canonical per-layer weights: one convention for every supported architecture family.

Analyses never touch `transformers` modules directly: they read a `CanonicalModel`, whose
tensors follow one convention for every family (row vectors, x @ W):

    W_Q, W_K, W_V  [H, d, d']    b_Q, b_K, b_V  [H, d']
    W_O            [H, d', d]    b_O            [d]
    W_in           [d, d_ff]     b_in           [d_ff]
    W_out          [d_ff, d]     b_out          [d]

Each module of `attnscope.architectures` builds these from one family's `transformers` modules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where tensors are made: the registry is read without it
    import torch


@dataclass(frozen=True)
class CanonicalLayerNorm:
    gamma: torch.Tensor  # [d]
    beta: torch.Tensor  # [d]
    eps: float

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        from torch.nn.functional import layer_norm

        return layer_norm(x, x.shape[-1:], self.gamma, self.beta, self.eps)


@dataclass(frozen=True)
class CanonicalLayer:
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
    ln_attn: CanonicalLayerNorm
    ln_ff: CanonicalLayerNorm
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
class CanonicalModel:
    """A whole model in canonical form.

    `position_embeddings` [T, d] holds only the rows that real positions use (RoBERTa's
    reserved rows before padding_idx + 1 are dropped). `final_ln` is GPT-2's ln_f (None
    for post-LN families). Token categories use the ids in `cls_ids` / `sep_ids`.
    """

    family: str
    model_type: str
    layers: list[CanonicalLayer]
    word_embeddings: torch.Tensor  # [V, d_emb]
    position_embeddings: torch.Tensor  # [T, d_emb]
    token_type_embeddings: torch.Tensor | None  # [types, d_emb]
    embedding_ln: CanonicalLayerNorm | None
    final_ln: CanonicalLayerNorm | None

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
