"""Canonical per-layer weights: one convention for every supported architecture.

Analyses never touch `transformers` modules directly: they read a `CanonicalModel`, whose
tensors follow one convention for every architecture (row vectors, x @ W):

    W_Q            [H, d, d']      b_Q            [H, d']
    W_K, W_V       [H_kv, d, d']   b_K, b_V       [H_kv, d']   (H_kv < H: grouped-query)
    W_O            [H, d', d]      b_O            [d]
    feed-forward   `FeedForward` (plain or gated) or `MixtureOfExperts`

Query head h reads key/value head h // (H / H_kv) (`CanonicalLayer.kv_head`). Norms are
`CanonicalLayerNorm` whether LayerNorm or RMSNorm (`centred`), with any (1 + w) weight
already folded into gamma. Multipliers an architecture applies outside these weights (Granite's
residual multiplier) are folded into W_O, b_O and the feed-forward's output weights.

Each module of `attnscope.architectures` builds these from one architecture's `transformers`
modules.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, is_dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where tensors are made: the registry is read without it
    import torch

Activation = Callable[["torch.Tensor"], "torch.Tensor"]


@dataclass(frozen=True)
class CanonicalLayerNorm:
    """LayerNorm (`centred`: gamma (x - mean) / sqrt(var + eps) + beta) or RMSNorm (not
    centred: gamma x / sqrt(mean(x^2) + eps) + beta, beta zero). gamma, beta [d], or with
    leading axes that broadcast over the normalised vectors: a QK-norm with its own weights
    per head ([H, 1, d'] over heads [B, H, n, d']: StableLM, Cohere)."""

    gamma: torch.Tensor
    beta: torch.Tensor
    eps: float
    centred: bool = True

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """The per-vector divisor s over the last axis.  [..., d] -> [..., 1]"""
        if self.centred:
            return (x.var(-1, unbiased=False, keepdim=True) + self.eps).sqrt()
        return (x.pow(2).mean(-1, keepdim=True) + self.eps).sqrt()

    def centre(self, x: torch.Tensor) -> torch.Tensor:
        """x minus its mean over the last axis (LayerNorm), x itself (RMSNorm)."""
        return x - x.mean(-1, keepdim=True) if self.centred else x

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        import torch

        if self.centred and self.gamma.dim() == 1:
            return torch.nn.functional.layer_norm(x, x.shape[-1:], self.gamma, self.beta, self.eps)
        if self.centred:  # weights per head: layer_norm takes [d] weights only
            normed = torch.nn.functional.layer_norm(x, x.shape[-1:], eps=self.eps)
            return self.gamma * normed + self.beta
        return self.gamma * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


@dataclass(frozen=True)
class Rotary:
    """Rotary position embedding of one layer: the first `dims` dimensions of every query and
    key head turn by angle position * inv_freq[b] in band b (`dims` / 2 bands). Pairs are
    (b, b + dims/2) (`interleaved` False, Llama's rotate_half) or (2b, 2b + 1) (True, Cohere).
    cos and sin are multiplied by `scaling` (the rope type's attention factor). The angles are
    computed in float32, as the models compute them, unless the input is float64."""

    inv_freq: torch.Tensor  # [dims / 2]
    dims: int
    interleaved: bool = False
    scaling: float = 1.0

    def cos_sin(self, n: int, dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin per position and rotated dimension, positions 0..n-1.  Each [n, dims]"""
        import torch

        work = torch.float64 if dtype == torch.float64 else torch.float32
        positions = torch.arange(n, device=device, dtype=work)
        angles = positions[:, None] * self.inv_freq.to(device=device, dtype=work)[None]
        if self.interleaved:
            angles = angles.repeat_interleave(2, dim=-1)
        else:
            angles = torch.cat([angles, angles], dim=-1)
        cos, sin = angles.cos() * self.scaling, angles.sin() * self.scaling
        return cos.to(dtype), sin.to(dtype)

    def partner(self, x: torch.Tensor) -> torch.Tensor:
        """The rotation's partner of every rotated dimension, signed.  [..., dims]"""
        import torch

        if self.interleaved:
            return torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)
        half = self.dims // 2
        return torch.cat([-x[..., half:], x[..., :half]], dim=-1)

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        """Heads rotated by their position (axis -2).  x [B, H, n, d'] -> same shape."""
        import torch

        cos, sin = self.cos_sin(x.shape[-2], x.dtype, x.device)
        turned, kept = x[..., : self.dims], x[..., self.dims :]
        return torch.cat([turned * cos + self.partner(turned) * sin, kept], dim=-1)


def rotary_bands(rotary: Rotary | None, d_head: int) -> torch.Tensor:
    """The band of every head dimension: b for the pair turned by inv_freq[b], dims / 2 for
    the unrotated dimensions of a partial-rotary head (0 for all where `rotary` is None).
    [d_head] int64"""
    import torch

    if rotary is None:
        return torch.zeros(d_head, dtype=torch.long)
    half = rotary.dims // 2
    band = torch.full((d_head,), half, dtype=torch.long)
    turned = torch.arange(half)
    band[: rotary.dims] = turned.repeat_interleave(2) if rotary.interleaved else turned.repeat(2)
    return band


@dataclass(frozen=True)
class Linearised:
    """A feed-forward block linearised around one batch by Integrated Gradients: for parts
    z_p of its input h = sum_p z_p (bias part included), the output is exactly

        FF(h) = sum_p fold((z_p W_pre) * c) W_post + b_out,

    with c [B, n, m] the per-token coefficients (they depend on the token's own h only).
    `pair_width` w > 0 (gated blocks): the m pre-activations are blocks [gate (w) | in (w)]
    (one per expert), and `fold` adds each block's two halves before W_post, whose rows are
    the blocks' w units: the gate's and the input's shares go through W_out once."""

    W_pre: torch.Tensor  # [d, m]
    b_pre: torch.Tensor  # [m]
    c: torch.Tensor  # [B, n, m]
    W_post: torch.Tensor  # [m, d], or [m / 2, d] with pair_width
    b_out: torch.Tensor  # [d]
    pair_width: int = 0

    def fold(self, u: torch.Tensor) -> torch.Tensor:
        """[..., m] -> [..., m / 2] (each block's gate half plus its input half), or u."""
        if not self.pair_width:
            return u
        return u.unflatten(-1, (-1, 2, self.pair_width)).sum(-2).flatten(-2)


@dataclass(frozen=True)
class FeedForward:
    """act(h W_in + b_in) W_out + b_out (plain), or act(h W_gate + b_gate) * (h W_in + b_in)
    W_out + b_out (gated: SwiGLU, GeGLU). W_in, W_gate [d, d_ff], W_out [d_ff, d]."""

    W_in: torch.Tensor
    b_in: torch.Tensor
    W_out: torch.Tensor
    b_out: torch.Tensor
    activation: Activation
    W_gate: torch.Tensor | None = None
    b_gate: torch.Tensor | None = None
    activation_name: str | None = None  # transformers' name: picks a closed-form IG integral

    @property
    def gated(self) -> bool:
        return self.W_gate is not None

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        """FF(h).  [..., d] -> [..., d]"""
        U = h @ self.W_in + self.b_in
        if self.gated:
            return (self.activation(h @ self.W_gate + self.b_gate) * U) @ self.W_out + self.b_out
        return self.activation(U) @ self.W_out + self.b_out

    def linearise(self, h: torch.Tensor, ig_steps: int, weight=None) -> Linearised:
        """IG coefficients at the total input h [B, n, d]; `weight` [B, n] scales the
        output per token (a router's weight)."""
        import torch

        from attnscope.core.activation_split import ig_coefficients
        from attnscope.core.gated_split import gated_coefficients

        U = h @ self.W_in + self.b_in
        if self.gated:
            G = h @ self.W_gate + self.b_gate
            c_gate, c_in = gated_coefficients(self.activation, G, U, ig_steps, self.activation_name)
            c = torch.cat([c_gate, c_in], dim=-1)
            W_pre = torch.cat([self.W_gate, self.W_in], dim=1)
            b_pre = torch.cat([self.b_gate, self.b_in])
            width = self.W_in.shape[1]
        else:
            c = ig_coefficients(self.activation, U, ig_steps)
            W_pre, b_pre, width = self.W_in, self.b_in, 0
        if weight is not None:
            c = c * weight[..., None]
        return Linearised(W_pre, b_pre, c, self.W_out, self.b_out, width)


@dataclass(frozen=True)
class MixtureOfExperts:
    """Sparse mixture of gated experts (Mixtral): router logits h W_router [B, n, E], softmax,
    the top `top_k` kept and renormalised to sum 1 (`normalise`), output sum_e w_e FF_e(h).
    The routing depends on the token's own h only, so it is fixed per token like a norm's
    scale and each chosen expert is split as a `FeedForward` weighted by w_e."""

    W_router: torch.Tensor  # [d, E]
    experts: list[FeedForward]
    top_k: int
    normalise: bool = True
    b_out: torch.Tensor | None = field(default=None)  # [d], none in Mixtral

    def routing(self, h: torch.Tensor) -> torch.Tensor:
        """w [B, n, E]: the weight of every expert per token, 0 where not chosen."""
        import torch

        probs = torch.softmax((h @ self.W_router).float(), dim=-1)
        top, index = probs.topk(self.top_k, dim=-1)
        if self.normalise:
            top = top / top.sum(-1, keepdim=True)
        return torch.zeros_like(probs).scatter_(-1, index, top).to(h.dtype)

    def __call__(self, h: torch.Tensor) -> torch.Tensor:
        w = self.routing(h)
        out = sum(w[..., e, None] * expert(h) for e, expert in enumerate(self.experts))
        return out if self.b_out is None else out + self.b_out

    def linearise(self, h: torch.Tensor, ig_steps: int) -> Linearised:
        """The chosen experts' linearisations side by side (experts no token chose are left
        out), each weighted by its routing weight."""
        import torch

        w = self.routing(h)
        used = [e for e in range(len(self.experts)) if bool((w[..., e] > 0).any())]
        parts = [self.experts[e].linearise(h, ig_steps, w[..., e]) for e in used]
        b_out = torch.zeros_like(h[0, 0]) if self.b_out is None else self.b_out
        widths = {p.pair_width for p in parts}
        if len(widths) != 1:
            raise ValueError("experts of one mixture must share their width and gating")
        return Linearised(
            torch.cat([p.W_pre for p in parts], dim=1),
            torch.cat([p.b_pre for p in parts]),
            torch.cat([p.c for p in parts], dim=-1),
            torch.cat([p.W_post for p in parts], dim=0),
            b_out,
            widths.pop(),
        )


@dataclass(frozen=True)
class BlockPlan:
    """The block order of one layer, the only reading of `CanonicalLayer`'s order fields
    (`CanonicalLayer.plan`). Every architecture's layer X -> X_{l+1} is, stage by stage
    (the scopes of `maps.layer_decomposition`; a None norm is the identity):

        a      = attn_out_norm(Attn(attn_in_norm(X)))                      Attn
        h      = X + a                                                     AttnRes
        ff_in  = ff_in_norm(X if ff_reads_block_input else h)              AttnResLn
        f      = ff_out_norm(FF(ff_in))                                    AttnResLnFf
        r      = (ff_in if residual_is_ff_input else h) + f                AttnResLnFfRes
        X_{l+1} = output_norm(r)

    post-LN (BERT): attn_in_norm None, ff_in_norm ln_attn, residual_is_ff_input, output_norm
    ln_ff. pre-LN (GPT-2, Llama): attn_in_norm ln_attn, ff_in_norm ln_ff, output_norm None
    (X_{l+1} = r, which the next layer's attn_in_norm or the final norm reads). Parallel
    (GPT-NeoX, Cohere): as pre-LN with ff_reads_block_input. Sandwich (Gemma-2/3) and OLMo-2
    add attn_out_norm and ff_out_norm; OLMo-2 has no input norms."""

    attn_in_norm: CanonicalLayerNorm | None
    attn_out_norm: CanonicalLayerNorm | None
    ff_reads_block_input: bool
    ff_in_norm: CanonicalLayerNorm | None
    ff_out_norm: CanonicalLayerNorm | None
    residual_is_ff_input: bool
    output_norm: CanonicalLayerNorm | None

    @property
    def ends_on_stream(self) -> bool:
        """Whether X_{l+1} is the residual sum r itself (no output norm: pre-LN)."""
        return self.output_norm is None


@dataclass(frozen=True)
class CanonicalLayer:
    """One transformer layer in canonical form (see the module docstring for shapes).

    Block order, as the architectures state it (`plan` is its one reading): `pre_ln` False
    for post-LN (BERT: LN after each residual sum), True for the residual-stream architectures
    (GPT-2, Llama, ...): X -> + Attn -> + FF, each block reading its own norm of the stream;
    `parallel` (GPT-NeoX, Cohere): X + Attn(ln_attn X) + FF(ln_ff X).
    `ln_attn`, `ln_ff`: the norm before each block in pre-LN (None: the block reads the stream
    itself, OLMo-2), after each residual sum in post-LN. `post_attn`, `post_ff`: a norm on a
    block's output before it joins the stream (Gemma-2/3 sandwich, OLMo-2), or None.
    `q_norm`, `k_norm`: QK-norm on each head ([d'] weights, Qwen3; [H, 1, d'] and
    [H_kv, 1, d'] where every head has its own, StableLM and Cohere) or on the whole
    projection (`qk_norm_whole`: [H d'] and [H_kv d'] weights, OLMo-2), before the rotation.
    `scale` multiplies the scores q k^T; `softcap` c: scores -> c tanh(scores / c) before the
    mask (Gemma-2); `sliding_window` w: query i sees keys i - w < j <= i.
    """

    W_Q: torch.Tensor
    b_Q: torch.Tensor
    W_K: torch.Tensor
    b_K: torch.Tensor
    W_V: torch.Tensor
    b_V: torch.Tensor
    W_O: torch.Tensor
    b_O: torch.Tensor
    ln_attn: CanonicalLayerNorm | None
    ln_ff: CanonicalLayerNorm | None
    ff: FeedForward | MixtureOfExperts
    pre_ln: bool
    causal: bool
    scale: float
    parallel: bool = False
    post_attn: CanonicalLayerNorm | None = None
    post_ff: CanonicalLayerNorm | None = None
    rotary: Rotary | None = None
    q_norm: CanonicalLayerNorm | None = None
    k_norm: CanonicalLayerNorm | None = None
    qk_norm_whole: bool = False
    softcap: float | None = None
    sliding_window: int | None = None

    @property
    def plan(self) -> BlockPlan:
        """The block order of this layer as one `BlockPlan`."""
        if self.pre_ln:
            return BlockPlan(
                self.ln_attn, self.post_attn, self.parallel, self.ln_ff, self.post_ff, False, None
            )
        return BlockPlan(
            None, self.post_attn, self.parallel, self.ln_attn, self.post_ff, True, self.ln_ff
        )

    @property
    def n_heads(self) -> int:
        return self.W_Q.shape[0]

    @property
    def n_kv_heads(self) -> int:
        return self.W_K.shape[0]

    @property
    def d_model(self) -> int:
        return self.W_Q.shape[1]

    @property
    def d_head(self) -> int:
        return self.W_Q.shape[2]

    def kv_head(self, h: int) -> int:
        """The key/value head query head h reads."""
        return h // (self.n_heads // self.n_kv_heads)


@dataclass(frozen=True)
class PredictionHead:
    """A language-model head on the last state h (after the final norm of a pre-LN model):

        logits = softcap(multiplier * (LN(transform(h)) W_U + b_U)),  softcap(z) = c tanh(z / c)

    `transform`: a masked-LM head's dense layer and activation as a `FeedForward` whose W_out
    is the identity (BERT, RoBERTa, ELECTRA), or None (causal LMs); `ln` its LayerNorm.
    W_U [d_e, V], b_U [V]; `multiplier` (Granite's 1 / logits_scaling, Cohere's logit_scale)
    and `softcap` c (Gemma-2/3's final_logit_softcapping, or None)."""

    W_U: torch.Tensor
    b_U: torch.Tensor
    transform: FeedForward | None = None
    ln: CanonicalLayerNorm | None = None
    multiplier: float = 1.0
    softcap: float | None = None


@dataclass(frozen=True)
class CanonicalModel:
    """A whole model in canonical form.

    `position_embeddings` [T, d] holds only the rows that real positions use (RoBERTa's
    reserved rows before padding_idx + 1 are dropped); None for rotary models. `final_ln`
    is the norm after the last layer (None for post-LN architectures). `embedding_scale`
    multiplies the word embeddings inside the model (Gemma's sqrt(d), Granite's multiplier).
    `padding_id`, `padding_position`: RoBERTa-style position ids, which count only the pieces
    that are not the pad id; a pad piece reads the padding row (`position_rows`).
    """

    architecture: str  # its `Architecture.name` in attnscope.architectures
    model_type: str
    layers: Sequence[CanonicalLayer]  # a list, or `StreamedLayers` (read on use)
    word_embeddings: torch.Tensor  # [V, d_emb], or `EmbeddingRows` (rows read on indexing)
    position_embeddings: torch.Tensor | None  # [T, d_emb]
    token_type_embeddings: torch.Tensor | None  # [types, d_emb]
    embedding_ln: CanonicalLayerNorm | None
    final_ln: CanonicalLayerNorm | None
    embedding_scale: float = 1.0
    padding_id: int | None = None  # positions skip the pieces of this id (RoBERTa)
    padding_position: torch.Tensor | None = None  # [d_emb] the position row a pad piece reads

    @property
    def outline(self) -> Sequence[CanonicalLayer]:
        """Every layer, for its shapes, settings and norms: the layers themselves, or those of
        a model streamed layer by layer with their matrices on the meta device (reading them
        loads nothing)."""
        return getattr(self.layers, "outline", self.layers)

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def n_heads(self) -> int:
        return self.outline[0].n_heads

    @property
    def d_model(self) -> int:
        return self.outline[0].d_model

    @property
    def d_head(self) -> int:
        return self.outline[0].d_head

    @property
    def causal(self) -> bool:
        return self.outline[0].causal

    @property
    def learned_positions(self) -> bool:
        """Whether positions enter as learned rows added to the embeddings (BERT, GPT-2)."""
        return self.position_embeddings is not None

    @property
    def any_rotary(self) -> bool:
        """Whether some layer turns its queries and keys by rotary embeddings (read from the
        outline: no layer is loaded)."""
        return any(layer.rotary is not None for layer in self.outline)

    def position_rows(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The learned position embedding each piece of one sequence reads, as the module
        numbers positions: row t at position t; with `padding_id` (RoBERTa), row k - 1 for
        the k-th piece that is not the pad id, `padding_position` for a pad piece (so that a
        pad inside a text moves the pieces after it).  input_ids [n] -> [n, d_emb]"""
        import torch

        if self.padding_id is None:
            return self.position_embeddings[: input_ids.shape[-1]]
        real = input_ids != self.padding_id
        rows = self.position_embeddings[(real.cumsum(-1) - 1).clamp(min=0)]
        return torch.where(real[..., None], rows, self.padding_position)


def cast(value, dtype):
    """A copy of a canonical object (layer, norm, feed-forward, head; nested) with every
    floating tensor in `dtype`; other fields (activations, settings) shared. None -> None."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, list):
        return [cast(item, dtype) for item in value]
    if is_dataclass(value) and not isinstance(value, type):
        return replace(
            value, **{f.name: cast(getattr(value, f.name), dtype) for f in fields(value)}
        )
    return value
