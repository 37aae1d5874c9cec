"""Why a head attends where it does: its pre-softmax logits split exactly into query-side
component x key-side component terms (issue #36).

The residual stream entering layer l is a sum of components c, each a vector per token:

    embed            the embedding output; split into embed.word, embed.position and
                     embed.type where the model has learned position / token-type embeddings
    L{m}.H{h}        what head h of layer m writes: sum_j alpha_ij x_j W_V^h W_O^h
                     (x: what the attention block reads; b_V^h W_O^h goes to `bias`)
    L{m}.FF          what layer m's feed-forward block writes, without its output bias
                     (a mixture of experts: one component per expert, L{m}.FF.E{e},
                     w_e (FF_e(h) - b_out_e), zero where no token chose expert e)
    bias             every bias and norm shift (b_O, b_V W_O, FF output biases, every norm's
                     beta and the centred, scaled bias that passes through a norm)

Each norm is affine once its per-token scale s_i is fixed (at its value in the real forward,
the convention of every family): LayerNorm maps component c to gamma (c_i - mean(c_i)) / s_i,
RMSNorm to gamma c_i / s_i, and beta joins `bias`. Post-LN models (BERT) renormalise the
stream after each sublayer; pre-LN decoders norm only each block's input (and its output in
the sandwich / OLMo-2 layout). The head's query and key projections, the QK-norm (its scale
fixed per token and head again), the rotary rotation (linear per position) and the logit
scale are linear too, so with q_i = sum_c q_i(c) and k_j = sum_c' k_j(c'):

    s_ij = scale q_i . k_j = sum_c sum_c' scale q_i(c) . k_j(c')          terms [n, n, C, C]

exactly, before the mask and any soft-capping. On request the split goes on over the rotary
bands b (`Attend.bands`, `Attend.band_terms`; `canonical.rotary_bands` numbers them as the
position family does): s_ij = sum_b scale q_i[band b] . k_j[band b]. The split is checked
twice: the terms must rebuild the logits recomputed from the real layer input
(`attention.queries_keys`), and those logits must give the module's own attention weights
(`output_attentions`; a logit is known from them up to a constant per query row, so the
check compares each row's spread of rebuilt logit minus log alpha). Each carried residual
state is checked against the real one. A relative residual above the bound raises
`checks.CheckError`.

Shapes: one sequence without padding, n tokens; components are carried as parts [C, n, d]
plus a bias [n, d]. Memory: terms hold n^2 C^2 numbers (SmolLM2's last layer reads
29 x (9 heads + FF) + embed + bias = 292 components: at n = 20, 136 MB in float32).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnscope.architectures import architecture
from attnscope.core.attention import (
    attention_input,
    attention_probs,
    layer_forward,
    layer_visible_pairs,
    queries_keys,
    through,
)
from attnscope.core.canonical import (
    CanonicalLayer,
    CanonicalLayerNorm,
    CanonicalModel,
    MixtureOfExperts,
    rotary_bands,
)
from attnscope.core.checks import require, residual

BIAS = "bias"
DIRECTIONS = ("dir.massive", "dir.rest")


@dataclass
class Attend:
    """One head's logits on one text, split by component (module docstring).

    logits [n, n]: scale q_i . k_j (query i, key j) before the mask and soft-capping.
    terms [n, n, C, C]: query-side component c x key-side component c'; terms.sum((-1, -2))
    is `logits` to rounding. components: the C names, the same order on both sides, `bias`
    last. tokens: the n pieces (`attnscope.attend`). residuals: the relative residual of
    every check: "terms vs logits" (max |difference| / max |logits|), "logits vs module"
    (`_module_residual`), "state {m}" per carried layer input (the largest per-token
    ||difference|| / ||state||, as `checks.residual`); check: the largest of them."""

    layer: int  # 1-based
    head: int  # 1-based
    components: list[str]
    logits: torch.Tensor
    terms: torch.Tensor
    residuals: dict[str, float]
    queries: torch.Tensor  # [C, n, d'] q_i(c) as the scores read them (normed, rotated)
    keys: torch.Tensor  # [C, n, d'] k_j(c')
    scale: float
    band: torch.Tensor  # [d'] the rotary band of every head dimension (`rotary_bands`)
    tokens: list[str] | None = None  # the n pieces, where the caller knows them

    @property
    def check(self) -> float:
        return max(self.residuals.values())

    @property
    def n_bands(self) -> int:
        """Rotary bands (0 = highest frequency; a partial-rotary head's unrotated dimensions
        last); 1 for a head without rotation."""
        return int(self.band.max()) + 1

    def bands(self) -> torch.Tensor:
        """The logits split by rotary band (summed over components): s^b_ij = scale
        q_i[band b] . k_j[band b]; they sum over b to `logits`.  [n, n, bands]"""
        q, k = self.queries.sum(0), self.keys.sum(0)
        return (
            torch.stack(
                [q[:, self.band == b] @ k[:, self.band == b].T for b in range(self.n_bands)], -1
            )
            * self.scale
        )

    def band_terms(self, band: int) -> torch.Tensor:
        """The terms of one rotary band: query component x key component.  [n, n, C, C]"""
        keep = self.band == band
        return (
            torch.einsum("cie,dje->ijcd", self.queries[..., keep], self.keys[..., keep])
            * self.scale
        )

    def term(self, query: str, key: str) -> torch.Tensor:
        """The [n, n] term of one component pair, by name."""
        return self.terms[:, :, self.components.index(query), self.components.index(key)]


@dataclass
class _Split:
    """A state [n, d] as components: parts [C, n, d] (named) + bias [n, d]."""

    names: list[str]
    parts: torch.Tensor
    bias: torch.Tensor

    def total(self) -> torch.Tensor:
        return self.parts.sum(0) + self.bias

    def normed(self, norm: CanonicalLayerNorm | None, total: torch.Tensor) -> _Split:
        """Through `norm` with its scale fixed at `total` [n, d] (the real sum), or self."""
        if norm is None:
            return self
        parts, bias = _normed(self.parts, self.bias, norm, total)
        return _Split(self.names, parts, bias)

    def joined(self, other: _Split) -> _Split:
        return _Split(
            self.names + other.names,
            torch.cat([self.parts, other.parts]),
            self.bias + other.bias,
        )

    def grouped(self, last: int) -> _Split:
        """Every component written by layers 1 .. `last` merged into two: `L1-{last}.heads`
        (their heads) and `L1-{last}.FF` (their FF blocks, experts included), in the place of
        layer 1's components; the rest unchanged. The sum is the same, so the split
        stays exact; C stops growing with depth when `last` follows the layer.  [C', n, d]"""
        groups: dict[str, list[int]] = {}
        for c, name in enumerate(self.names):
            layer = written_by(name)
            if layer is not None and layer <= last:
                kind = "FF" if name.split(".", 1)[1].startswith("FF") else "heads"
                groups.setdefault(f"L1-{last}.{kind}", []).append(c)
            else:
                groups[name] = [c]
        parts = torch.stack([self.parts[members].sum(0) for members in groups.values()])
        return _Split(list(groups), parts, self.bias)


def direction_split(X: torch.Tensor, dims) -> _Split:
    """A state X [n, d] as two components along residual directions: X restricted to the
    dimensions `dims` (0-based; e.g. the massive ones), `dir.massive`, and the rest of it,
    `dir.rest`; bias 0. Through a norm with its scale fixed at X (`_Split.normed`) and the
    query or key projection (`qk_split`) the parts stay exact: they sum to the real ones."""
    chosen = torch.zeros(X.shape[-1], dtype=torch.bool, device=X.device)
    chosen[list(dims)] = True
    return _Split(list(DIRECTIONS), torch.stack([X * chosen, X * ~chosen]), torch.zeros_like(X))


def written_by(name: str) -> int | None:
    """The last layer (1-based) whose output a component holds: `L3.H5` -> 3, `L1-4.FF` ->
    4; None for the embedding components."""
    if not name.startswith("L"):
        return None
    return int(name[1:].split(".", 1)[0].split("-")[-1])


def _normed(parts, bias, norm: CanonicalLayerNorm, total):
    """gamma C(part) / s per part, gamma C(bias) / s + beta; s from `total` (last axis)."""
    s = norm.scale(total)
    return norm.gamma * norm.centre(parts) / s, norm.gamma * norm.centre(bias) / s + norm.beta


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    """max |got - want| / max |want| (0 when both are 0)."""
    scale = float(want.abs().max())
    diff = float((got - want).abs().max())
    return diff / scale if scale > 0 else diff


def embedding_split(weights: CanonicalModel, inputs: dict, embed_parts: bool) -> _Split:
    """The embedding output (state 0) by component: word, position, type (learned ones, when
    `embed_parts`) or one `embed`; the embedding LayerNorm's scale from their sum."""
    ids = inputs["input_ids"][0]
    pieces = {"word": weights.word_embeddings[ids] * weights.embedding_scale}
    if weights.position_embeddings is not None:
        pieces["position"] = weights.position_rows(ids)
    if weights.token_type_embeddings is not None:
        types = inputs.get("token_type_ids")
        types = torch.zeros_like(ids) if types is None else types[0]
        pieces["type"] = weights.token_type_embeddings[types]
    parts = torch.stack(list(pieces.values()))
    names = [f"embed.{name}" for name in pieces]
    if not embed_parts or len(pieces) == 1:
        parts, names = parts.sum(0, keepdim=True), ["embed"]
    split = _Split(names, parts, torch.zeros_like(parts[0]))
    return split.normed(weights.embedding_ln, split.total())


def _head_outputs(X: torch.Tensor, mask: torch.Tensor, layer: CanonicalLayer, m: int) -> _Split:
    """What each head of layer m (0-based) writes, from the real layer input X [n, d]:
    parts [H, n, d], bias = sum_h (sum_j alpha_ij) b_V^h W_O^h + b_O; then the norm on the
    block's output where the layer has one."""
    alpha = attention_probs(X[None], mask, layer)[0]  # [H, n, n]
    kv = [layer.kv_head(h) for h in range(layer.n_heads)]
    x = attention_input(X[None], layer)[0]
    values = torch.einsum("nd,hde->hne", x, layer.W_V[kv])
    heads = torch.einsum("hij,hje,hed->hid", alpha, values, layer.W_O)
    bias = torch.einsum("hi,he,hed->id", alpha.sum(-1), layer.b_V[kv], layer.W_O) + layer.b_O
    split = _Split([f"L{m + 1}.H{h + 1}" for h in range(layer.n_heads)], heads, bias)
    return split.normed(layer.plan.attn_out_norm, split.total())


def _feed_forward(h: torch.Tensor, layer: CanonicalLayer, m: int) -> _Split:
    """What the FF block writes, read from its real input h [n, d]: one part (its output less
    b_out), or one per expert of a mixture; then the norm on its output where there is one."""
    ff = layer.ff
    if isinstance(ff, MixtureOfExperts):
        w = ff.routing(h)  # [n, E]
        parts = torch.stack(
            [w[:, e, None] * (expert(h) - expert.b_out) for e, expert in enumerate(ff.experts)]
        )
        bias = sum(w[:, e, None] * expert.b_out for e, expert in enumerate(ff.experts))
        bias = bias if ff.b_out is None else bias + ff.b_out
        names = [f"L{m + 1}.FF.E{e + 1}" for e in range(len(ff.experts))]
    else:
        out = ff(h)
        parts, bias, names = (out - ff.b_out)[None], ff.b_out.expand_as(out), [f"L{m + 1}.FF"]
    split = _Split(names, parts, bias)
    return split.normed(layer.plan.ff_out_norm, split.total())


def layer_split(state: _Split, X: torch.Tensor, mask: torch.Tensor, layer, m: int) -> _Split:
    """The split of X_m [n, d] (real) carried through layer m to X_{m+1}, each block's output
    one new component per head / FF block, every norm's scale from the real totals."""
    plan = layer.plan
    heads = _head_outputs(X, mask, layer, m)
    y = heads.total()
    stream = state.joined(heads)  # h = X + a
    read, read_total = (state, X) if plan.ff_reads_block_input else (stream, X + y)
    ff_in = through(plan.ff_in_norm, read_total)
    if plan.residual_is_ff_input:
        residual, residual_total = read.normed(plan.ff_in_norm, read_total), ff_in
    else:
        residual, residual_total = stream, X + y
    out = residual.joined(_feed_forward(ff_in, layer, m))
    if plan.ends_on_stream:
        return out
    f = through(plan.ff_out_norm, layer.ff(ff_in))
    return out.normed(plan.output_norm, residual_total + f)


def qk_split(read: _Split, X, layer: CanonicalLayer, side: str):
    """Queries or keys (`side` "q", "k") of every head of the layer by component: parts
    [C, H, n, d'], bias [H, n, d'], through the QK-norm (scale from the real projection) and
    the rotation."""
    W, b, norm = (
        (layer.W_Q, layer.b_Q, layer.q_norm)
        if side == "q"
        else (layer.W_K, layer.b_K, layer.k_norm)
    )
    parts = torch.einsum("cnd,hde->chne", read.parts, W)
    bias = torch.einsum("nd,hde->hne", read.bias, W) + b[:, None]
    if norm is not None:
        total = torch.einsum("nd,hde->hne", attention_input(X[None], layer)[0], W) + b[:, None]
        if layer.qk_norm_whole:  # one norm over all heads' projections: [.., n, H d']
            H, n, e = bias.shape

            def flat(t):
                return t.transpose(-3, -2).reshape(*t.shape[:-3], n, H * e)

            def heads(t):
                return t.reshape(*t.shape[:-2], n, H, e).transpose(-3, -2)

            p, c = _normed(flat(parts), flat(bias), norm, flat(total))
            parts, bias = heads(p), heads(c)
        else:
            parts, bias = _normed(parts, bias, norm, total)
    if layer.rotary is not None:
        parts, bias = layer.rotary.rotate(parts), layer.rotary.rotate(bias)
    return parts, bias


def attend_split(
    module,
    weights: CanonicalModel,
    inputs: dict,
    layer: int,
    head: int,
    embed_parts: bool = True,
    bound: float = 1e-4,
    recompute: bool = False,
) -> Attend:
    """Head `head` of layer `layer` (both 0-based) on one sequence: `inputs` the forward's
    keyword arguments (`Architecture.model_inputs`), batch 1, no padding. `module`: the
    loaded `transformers` model with eager attention, `weights` its canonical form in the
    module's dtype. `embed_parts`: the learned embeddings as separate components. CheckError
    above `bound` (relative).

    The layer inputs X_m, which fix the norms' scales and the attention weights, are the
    module's (`Architecture.residual_states`); `recompute`: recomputed instead from the
    embedding output with the canonical formulas (`attention.layer_forward`), so that in
    float64 the split is checked against the same formulas to float64 rounding (the modules
    compute some norms in float32 whatever the dtype)."""
    arch = architecture(module.config.model_type)
    mask = inputs["attention_mask"]
    if mask.shape[0] != 1 or not bool(mask.all()):
        raise ValueError("attend_split takes one sequence without padding (batch 1, mask all 1)")
    if not 0 <= layer < weights.n_layers:
        raise ValueError(f"layer {layer + 1} is not in 1..{weights.n_layers}")
    target = weights.layers[layer]
    if not 0 <= head < target.n_heads:
        raise ValueError(f"head {head + 1} is not in 1..{target.n_heads}")
    residuals = {}
    with torch.no_grad():
        real = [s[0] for s in arch.residual_states(module, inputs)]
        states = _recomputed(real[0], mask, weights, layer) if recompute else real
        state = embedding_split(weights, inputs, embed_parts)
        for m in range(layer + 1):
            residuals[f"state {m}"] = residual(state.total()[None], real[m][None], mask)[1]
            if m < layer:
                state = layer_split(state, states[m], mask, weights.layers[m], m)
        X = states[layer]
        read = state.normed(target.plan.attn_in_norm, X)
        q_parts, q_bias = qk_split(read, X, target, "q")
        k_parts, k_bias = qk_split(read, X, target, "k")
        kv = target.kv_head(head)
        Q = torch.cat([q_parts[:, head], q_bias[None, head]])  # [C, n, d']
        K = torch.cat([k_parts[:, kv], k_bias[None, kv]])
        terms = torch.einsum("cie,dje->ijcd", Q, K) * target.scale
        q, k = queries_keys(X[None], target)
        logits = (q[0, head] @ k[0, head].T) * target.scale
        residuals["terms vs logits"] = relative(terms.sum((-1, -2)), logits)
        residuals["logits vs module"] = _module_residual(
            module, inputs, logits, target, layer, head
        )
    band = rotary_bands(target.rotary, target.d_head).to(Q.device)
    names = [*state.names, BIAS]
    found = Attend(layer + 1, head + 1, names, logits, terms, residuals, Q, K, target.scale, band)
    for what, value in residuals.items():
        require(f"attend layer {layer + 1} head {head + 1}: {what}", value, bound)
    return found


def _recomputed(X0: torch.Tensor, mask, weights: CanonicalModel, layer: int):
    """X_0 .. X_layer [n, d] recomputed from X_0 with the canonical layers."""
    states = [X0]
    for m in range(layer):
        states.append(layer_forward(states[-1][None], mask, weights.layers[m])[0])
    return states


def _module_residual(module, inputs, logits, layer: CanonicalLayer, index: int, head: int):
    """How far `logits` [n, n] are from the module's own attention weights: per query row,
    the spread (max - min over visible keys) of capped logit - log alpha, which is 0 when
    the logits are the module's up to the row's constant; relative to max |logits|, or
    absolute (in log-weight units) where all logits are below 1 (random models: the float32
    rounding of log alpha would dominate a relative measure)."""
    out = module(**inputs, output_attentions=True)
    attentions = getattr(out, "attentions", None)
    if not attentions or attentions[index] is None:
        raise ValueError(
            f"{module.config.model_type}: the model returned no attention weights; load it "
            "with attn_implementation='eager'"
        )
    alpha = attentions[index][0, head].to(logits.dtype)
    capped = logits
    if layer.softcap is not None:
        capped = torch.tanh(logits / layer.softcap) * layer.softcap
    seen = layer_visible_pairs(inputs["attention_mask"], layer)[0] & (alpha > 1e-30)
    gap = torch.where(seen, capped - alpha.log(), torch.nan)
    spread = gap.nan_to_num(-torch.inf).amax(-1) - gap.nan_to_num(torch.inf).amin(-1)
    return float(spread.max()) / max(1.0, float(logits.abs().max()))
