"""How close each heavy step of the default run comes to this machine's own rates (issue #48).

Each step calls attnscope's own function for it (the one its rule's script reaches) on random
weights and states at the default models' shapes, and its work is counted from the shapes
(`*_work` below). Achieved GFLOP/s is the counted FLOPs over the median of `--repeats` timed
calls (after one warm-up call on 16 pieces); it is set against the rate torch.matmul reaches
here at a few comparable sizes (the best of them; float64 for the propagation, which carries
its split in float64), in the same process and at the same thread count. A step below half of
it is set against its memory traffic, the bytes it must read and write counted from the shapes,
over the bandwidth of a large tensor copy (read + write) measured here too.

Shapes (`--shapes`; `--layers` of each model's layers, the per-layer steps' figures per layer):
    smollm2   SmolLM2-135M: a random Llama, d 576, 9 heads, 3 key-value heads of 64, gated FF
              1536, vocab 49152, causal
    minilm    all-MiniLM-L6-v2: a random BERT, d 384, 12 heads of 32, FF 1536, vocab 30522
    tiny      a random Llama, d 32, 4 heads, 2 key-value heads, FF 64, vocab 128 (tests)
Sequences of n = `--length` random pieces, every position real.

Steps and the function each times (what its rule's script reaches):
    extract     `Architecture.residual_states` under `extract.sdpa_attention`, a batch of
                `batch_size` 16 (config.yaml): `model.extract.extract`'s per-batch forward
                (the HDF5 writes, in a background thread there, left out)
    norms       per layer and batch of 4: `attention_probs`, `value_vectors`,
                `attention_output`, the module's own output (the check), `head_summed_norms`
                (`analyses.norms.corpus_pass`'s per-batch compute without its accumulators)
    mixing      per layer, one sequence: `maps.layer_maps.layer_scope_maps`, closed-form FF
                split (`ig_steps: 0`), every stage checked (`mixing.corpus_pass`'s per batch)
    propagate   one sequence through `--layers` layers: `maps.propagation.propagate` (what
                `mixing.depth_pass` runs per batch), closed form, float64 carry
    attend      at the last of `--layers` layers, one sequence: `analyses.attend.lift.lift_sums`
                on queries and keys by component [H, C, n, d'] with C = the components there
                (the embedding parts + (layers - 1)(H + 1) + the bias) and the weightings of
                `key_weights` (the logit split; the split's carry is left out)
    probe       `analyses.probing.probe.train_and_score` of the attn+emb probe, 2 epochs over
                4 batches of 32 sentences of 32 words, features 2 x layers x heads maps
    js          `analyses.weights.head_distances.js_sums(smoothed_entries(..))` over one batch
                of 8 sequences (`distance_batch_size`), every head of `--layers` layers

What is counted: the FLOPs of the matrix products the step calls (2 m k n for [m, k] x
[k, n], batched products times their batch; for the JS distances, whose work is element by
element, 4 operations per head pair and entry: add, log, multiply, sum, the log counted as
one). Left out: softmax, norms, masks, the IG coefficients, sums and every other elementwise
pass, which have no matrix-product rate to reach; they show in the bytes. The bytes: every
counted product's operands and result, each once per call, plus the large elementwise passes
named in each `*_work` (a lower bound on what the step moves; caches can hold small operands).

Where the time goes: one more call of each step runs under torch's profiler, which splits its
wall time into the matrix products' kernels, every other torch operator and the rest (Python,
the profiler's own cost), and gives the products' own GFLOP/s. Verdict: `matmul` at half of the
matmul rate or more; else `memory` where the bytes run at half of the copy bandwidth or more;
else the largest share of the time: `products` (the products themselves run below the rate:
thin or many small ones), `elementwise` (the other operators) or `python`.

Run: .venv/bin/python benchmarks/bench_flops.py [--shapes smollm2 minilm] [--layers 4]
     [--length 128] [--repeats 3] [--steps extract norms ...] [--threads 1] [--json out.json]
     [--tiny]   (docs/benchmarks.md's table: --threads 1, what a model job gets on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

STEPS = ("extract", "norms", "mixing", "propagate", "attend", "probe", "js")
BATCH = {"extract": 16, "norms": 4, "mixing": 1, "propagate": 1, "attend": 1, "js": 8}
PROBE = dict(batches=4, sentences=32, words=32, epochs=2)  # the probe's training run
HALF = 0.5  # the verdict's threshold, a fraction of the machine's rate


@dataclass(frozen=True)
class Shape:
    """A model's sizes: width d, H query heads, G key-value heads of d_head, FF width ff
    (gated: a gate and an input matrix), causal or not."""

    name: str
    d: int
    heads: int
    kv_heads: int
    d_head: int
    ff: int
    vocab: int
    gated: bool
    causal: bool
    embed_parts: int  # the attend family's embedding components (word; word, position, type)

    @property
    def d_kv(self) -> int:
        return self.kv_heads * self.d_head

    @property
    def pre(self) -> int:
        """The FF's pre-activation width: [gate; input] for a gated FF."""
        return 2 * self.ff if self.gated else self.ff


SHAPES = {
    "smollm2": Shape("smollm2", 576, 9, 3, 64, 1536, 49152, True, True, 1),
    "minilm": Shape("minilm", 384, 12, 12, 32, 1536, 30522, False, False, 3),
    "tiny": Shape("tiny", 32, 4, 2, 8, 64, 128, True, True, 1),
}


@dataclass(frozen=True)
class Work:
    """Floating-point operations and bytes read and written."""

    flops: float = 0.0
    bytes: float = 0.0

    def __add__(self, other: Work) -> Work:
        return Work(self.flops + other.flops, self.bytes + other.bytes)

    def __mul__(self, times: float) -> Work:
        return Work(self.flops * times, self.bytes * times)


def matmul(m: float, k: float, n: float, batch: float = 1, itemsize: int = 4) -> Work:
    """[m, k] x [k, n], `batch` times: 2 m k n FLOPs each; its operands and result once."""
    return Work(2 * m * k * n * batch, (m * k + k * n + m * n) * batch * itemsize)


def passes(elements: float, times: float = 1, itemsize: int = 4) -> Work:
    """`times` elementwise passes over a tensor of `elements` values: bytes only."""
    return Work(0.0, elements * times * itemsize)


def attention_work(s: Shape, B: int, n: int, itemsize: int = 4) -> Work:
    """One attention block's products on B sequences of n: the Q, K, V projections
    (B n x d x (d + 2 d_kv)), the logits and the weighted values (B H of n x d' x n and
    n x n x d'), the output projection (B n x d x d)."""
    tokens = B * n
    return (
        matmul(tokens, s.d, s.d + 2 * s.d_kv, itemsize=itemsize)
        + matmul(n, s.d_head, n, B * s.heads, itemsize)
        + matmul(n, n, s.d_head, B * s.heads, itemsize)
        + matmul(tokens, s.d, s.d, itemsize=itemsize)
    )


def ff_work(s: Shape, tokens: int, itemsize: int = 4) -> Work:
    """The FF block on `tokens` vectors: tokens x d x pre, then tokens x ff x d."""
    pre = matmul(tokens, s.d, s.pre, itemsize=itemsize)
    return pre + matmul(tokens, s.ff, s.d, itemsize=itemsize)


def extract_work(s: Shape, B: int, n: int, layers: int) -> Work:
    """The forward of `layers` layers on B sequences of n: attention and FF per layer, the
    residual states [B, n, d] written once per layer (the embedding lookup left out; SDPA
    counted as the whole n x n, causal or not)."""
    per_layer = attention_work(s, B, n) + ff_work(s, B * n) + passes(B * n * s.d)
    return per_layer * layers


def norms_work(s: Shape, B: int, n: int, layers: int) -> Work:
    """Per layer: alpha (Q, K projections and logits), f(x) = (x W_V) W_O per head
    (B n x d x d_kv, B H of n x d' x d), y = sum_h alpha f(x) (B of n x H n x d), the
    module's own attention (the check: `attention_work`), and the head-summed norms: the
    Gram matrices (B n of H x d x H) and the quadratic forms in float64 (B n of n x H x H,
    then a H-wide multiply and sum: one pass over [B, H, n, n] float64)."""
    y = matmul(n, s.heads * n, s.d, B)
    gram = matmul(s.heads, s.d, s.heads, B * n)
    forms = matmul(n, s.heads, s.heads, B * n, itemsize=8) + passes(B * s.heads * n * n, 2, 8)
    return (alpha_fx_work(s, B, n) + y + attention_work(s, B, n) + gram + forms) * layers


def ff_pairs(B: int, queries: int, keys: int, pre: int, causal: bool) -> int:
    """The (query, key) pairs `feed_forward_parts` takes through the FF: its queries go in
    sub-chunks of FF_CHUNK_ELEMENTS // (B keys pre), and in a causal layer each sub-chunk
    skips the keys after its last query (so about half the pairs, at real shapes)."""
    from attnscope.maps.layer_decomposition import FF_CHUNK_ELEMENTS

    chunk = max(1, FF_CHUNK_ELEMENTS // max(1, B * keys * pre))
    total = 0
    for i0 in range(0, queries, chunk):
        i1 = min(queries, i0 + chunk)
        total += (i1 - i0) * (min(keys, i1) if causal else keys)
    return total


def alpha_fx_work(s: Shape, B: int, n: int, itemsize: int = 4) -> Work:
    """alpha (the Q and K projections, the logits) and f(x) = (x W_V) W_O per head
    (`attention_probs`, `value_vectors`)."""
    tokens = B * n
    alpha = matmul(tokens, s.d, s.d + s.d_kv, itemsize=itemsize)
    alpha += matmul(n, s.d_head, n, B * s.heads, itemsize)
    fx = matmul(tokens, s.d, s.d_kv, itemsize=itemsize)
    return alpha + fx + matmul(n, s.d_head, s.d, B * s.heads, itemsize)


def mixing_work(s: Shape, B: int, n: int, layers: int) -> Work:
    """Per layer (`layer_scope_maps`, head-factored FF, closed form, one query chunk): the
    module's attention (the check), alpha and f(x); the parts z_ij = sum_h alpha f(x_j)
    (B of n x H x n d); the FF's linearisation at the real input (tokens x d x pre), its head
    vectors and residuals times W_pre (B H n and B n x d x pre), the parts' pre-activations
    mixed from them (P pairs x H x pre, `ff_pairs`) and through W_out (P x ff x d); the FF
    applied three times besides (the real output twice, the bias). Bytes besides: six stages
    of parts [B, n, n, d], each written and read twice (the stage, its maps' norms)."""
    tokens, pairs = B * n, B * ff_pairs(B, n, n, s.pre, s.causal)
    parts = matmul(n, s.heads, n * s.d, B)
    factors = matmul(tokens, s.d, s.pre) + matmul(B * s.heads * n, s.d, s.pre)
    factors += matmul(tokens, s.d, s.pre)
    ff = matmul(pairs, s.heads, s.pre) + matmul(pairs, s.ff, s.d) + ff_work(s, tokens) * 3
    stages = passes(B * n * n * s.d, 6 * 4)
    check = attention_work(s, B, n)
    return (check + alpha_fx_work(s, B, n) + parts + factors + ff + stages) * layers


def carried_work(s: Shape, B: int, n: int, m: int, itemsize: int = 8) -> Work:
    """`carried_attention` of a split of m sources and the FF of its parts (no head factors):
    the values (B n m x d x d_kv), mixed by alpha (B H of n x n x m d'), through W_O
    (B n m x d x d), the bias likewise; the parts' pre-activations (P x d x pre) and through
    W_out (P x ff x d), P = `ff_pairs` of n queries and m keys; the FF on the bias."""
    tokens, pairs = B * n, B * ff_pairs(B, n, m, s.pre, s.causal)
    values = matmul(B * n * m, s.d, s.d_kv, itemsize=itemsize)
    values += matmul(n, n, m * s.d_head, B * s.heads, itemsize)
    values += matmul(B * n * m, s.d, s.d, itemsize=itemsize)
    bias = matmul(tokens, s.d, s.d_kv, itemsize=itemsize)
    bias += matmul(n, n, s.d_head, B * s.heads, itemsize)
    bias += matmul(tokens, s.d, s.d, itemsize=itemsize)
    ff = matmul(pairs, s.d, s.pre, itemsize=itemsize) + matmul(pairs, s.ff, s.d, itemsize=itemsize)
    return values + bias + ff + ff_work(s, tokens, itemsize)


def propagation_work(s: Shape, B: int, n: int, layers: int) -> Work:
    """Per layer (`propagate`, one chunk of sources: all n): alpha, the whole state's split
    of one source and the token split of m = n sources (`carried_work`, float64), the FF's
    linearisation and its real output twice, and the check's module attention (float32).
    Bytes besides: six stages of [B, n, n, d] float64, each written and read twice."""
    tokens = B * n
    alpha = matmul(tokens, s.d, s.d + s.d_kv, itemsize=8)
    alpha += matmul(n, s.d_head, n, B * s.heads, 8)
    carried = carried_work(s, B, n, 1) + carried_work(s, B, n, n)
    ff = matmul(tokens, s.d, s.pre, itemsize=8) + ff_work(s, tokens, 8) * 2
    stages = passes(B * n * n * s.d, 6 * 4, 8)
    return (alpha + carried + ff + attention_work(s, B, n) + stages) * layers


def weightings(s: Shape) -> int:
    """The attend family's weightings: attended, first, previous, self, (encoders: CLS, SEP,
    punct), induction, duplicate (`lift.key_classes`)."""
    return 1 + 3 + (0 if s.causal else 3) + 2


def components(s: Shape, layers: int) -> int:
    """The split's components at the last of `layers` layers, the bias included."""
    return s.embed_parts + (layers - 1) * (s.heads + 1) + 1


def attend_work(s: Shape, n: int, C: int) -> Work:
    """`lift_sums` for H heads, K weightings, C components, d' per head: per weighting the
    key differences dk = W K (H of n x n x C d') and the pairs (H of C x n d' x C); the
    marginals W k and W^T q (H K of n x n x d'), the query and key sums (H of C x n d' x K,
    twice)."""
    H, K, e = s.heads, weightings(s), s.d_head
    pairs = (matmul(n, n, C * e, H) + matmul(C, n * e, C, H)) * K
    marginals = matmul(n, n, e, H * K) * 2 + matmul(C, n * e, K, H) * 2
    return pairs + marginals


def probe_work(features: int, d: int, batches: int, B: int, W: int, epochs: int) -> Work:
    """The attn+emb probe's training and its score on one test batch: the forward (the
    embeddings through the two [d, C] maps, B of W x d x C and (W + 1) x d x C; the scores,
    B W of (W + 1) x C x 1 and B (W + 1) of W x C x 1, C = `features`); the backward takes
    the weights' gradients (as many FLOPs as the forward) and, through ROOT's learned vector
    in the candidates' embeddings, the candidates' gradient ((W + 1) x C x d once more)."""
    C = features
    head = matmul(W + 1, d, C, B)
    forward = matmul(W, d, C, B) + head + matmul(W + 1, C, 1, B * W) * 2
    return (forward * 2 + head) * (batches * epochs) + forward


def js_work(heads: int, B: int, n: int, causal: bool) -> Work:
    """`js_sums` over G = `heads` heads' smoothed entries, V visible entries (n (n + 1) / 2 per
    sequence when causal, n^2 otherwise): 4 operations per head pair a <= b and entry (m =
    (p + q) / 2, log m, m log m, the sum), 3 per head and entry (p log p); bytes: the entries
    and their halves read and written once, the attention [G, B, n, n] read once."""
    V = B * (n * (n + 1) / 2 if causal else n * n)
    pairs = heads * (heads + 1) / 2
    return Work(4 * pairs * V + 3 * heads * V, 4 * (3 * heads * V + heads * B * n * n))


def wall_times(run: Callable[[], object], repeats: int) -> list[float]:
    """The wall times of `repeats` calls of `run`."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return times


def median_seconds(run: Callable[[], object], repeats: int) -> float:
    """The median wall time of `repeats` calls of `run`."""
    return statistics.median(wall_times(run, repeats))


def matmul_rates(sizes, dtype: torch.dtype, repeats: int) -> dict[str, float]:
    """GFLOP/s of torch.matmul [m, k] x [k, n] at each (m, k, n), this process's threads: the
    fastest of `repeats` calls (what the machine can do, on a shared machine too)."""
    rates = {}
    for m, k, n in sizes:
        a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
        a @ b  # warm-up
        seconds = min(wall_times(lambda a=a, b=b: a @ b, repeats))
        rates[f"{m}x{k}x{n}"] = 2 * m * k * n / seconds / 1e9
    return rates


def copy_bandwidth(mib: int, repeats: int) -> float:
    """GB/s of copying a float32 tensor of `mib` MiB into another (bytes read + written), the
    fastest of `repeats` copies."""
    source = torch.randn(mib * 2**18)
    target = torch.empty_like(source)
    target.copy_(source)
    seconds = min(wall_times(lambda: target.copy_(source), repeats))
    return 2 * source.numel() * 4 / seconds / 1e9


def random_model(s: Shape, layers: int):
    """A random `transformers` model of shape `s` with `layers` layers (eager attention)."""
    from transformers import BertConfig, BertModel, LlamaConfig, LlamaModel

    torch.manual_seed(0)
    if s.causal:
        config = LlamaConfig(
            hidden_size=s.d,
            num_attention_heads=s.heads,
            num_key_value_heads=s.kv_heads,
            head_dim=s.d_head,
            intermediate_size=s.ff,
            vocab_size=s.vocab,
            num_hidden_layers=layers,
            attn_implementation="eager",
        )
        return LlamaModel(config).eval()
    config = BertConfig(
        hidden_size=s.d,
        num_attention_heads=s.heads,
        intermediate_size=s.ff,
        vocab_size=s.vocab,
        num_hidden_layers=layers,
        attn_implementation="eager",
    )
    return BertModel(config).eval()


class Steps:
    """Each step's call on one model: `call(step, n)` returns a function that runs it once on
    sequences of n pieces (inputs made beforehand), and `work(step, n)` its counted work."""

    def __init__(self, s: Shape, layers: int):
        from attnscope.architectures import architecture, canonical_weights

        self.shape, self.layers = s, layers
        self.model = random_model(s, layers)
        self.weights = canonical_weights(self.model)
        self.arch = architecture(self.model.config.model_type)

    def inputs(self, B: int, n: int) -> dict:
        ids = torch.randint(5, self.shape.vocab, (B, n))
        mask = torch.ones(B, n, dtype=torch.long)
        return self.arch.model_inputs(self.model, ids, mask, torch.zeros_like(ids))

    def states(self, B: int, n: int):
        inputs = self.inputs(B, n)
        return inputs["attention_mask"], self.arch.residual_states(self.model, inputs)

    def work(self, step: str, n: int) -> Work:
        s, L, B = self.shape, self.layers, BATCH.get(step, 1)
        if step == "extract":
            return extract_work(s, B, n, L)
        if step == "norms":
            return norms_work(s, B, n, L)
        if step == "mixing":
            return mixing_work(s, B, n, L)
        if step == "propagate":
            return propagation_work(s, B, n, L)
        if step == "attend":
            return attend_work(s, n, components(s, L))
        if step == "probe":
            words, batches = PROBE["words"], PROBE["batches"]
            features = 2 * L * s.heads
            return probe_work(features, s.d, batches, PROBE["sentences"], words, PROBE["epochs"])
        return js_work(L * s.heads, B, n, s.causal)

    def describe(self, step: str, n: int) -> str:
        """The shapes of one call, for the table."""
        s, L = self.shape, self.layers
        if step == "probe":
            words, sentences = PROBE["words"], PROBE["sentences"]
            return (f"{2 * L * s.heads} features, d {s.d}, {PROBE['batches']} x {sentences} "
                    f"sentences of {words} words, {PROBE['epochs']} epochs")  # fmt: skip
        if step == "js":
            return f"{L * s.heads} heads, {BATCH[step]} x n {n}"
        if step == "attend":
            return f"H {s.heads}, C {components(s, L)}, K {weightings(s)}, n {n}"
        return f"{BATCH[step]} x n {n}, per layer"

    def call(self, step: str, n: int) -> Callable[[], object]:
        return getattr(self, f"_{step}")(BATCH.get(step, 1), n)

    def _extract(self, B: int, n: int):
        from attnscope.model.extract import sdpa_attention

        inputs = self.inputs(B, n)

        def run():
            with sdpa_attention(self.model), torch.inference_mode():
                return self.arch.residual_states(self.model, inputs)

        return run

    def _norms(self, B: int, n: int):
        from attnscope.architectures import ModelLayer
        from attnscope.core.attention import (
            attention_output,
            attention_probs,
            value_vectors,
            visible_pairs,
        )
        from attnscope.maps.head_norms import head_summed_norms

        mask, states = self.states(B, n)

        def run():
            for l in range(self.layers):
                handle = ModelLayer(self.model, self.weights, l)
                layer, X = handle.weights, states[l]
                alpha, fx = attention_probs(X, mask, layer), value_vectors(X, layer)
                attention_output(alpha, fx, layer)
                handle.attention_output(X, mask)
                head_summed_norms(alpha, fx) * visible_pairs(mask, layer.causal)

        return run

    def _mixing(self, B: int, n: int):
        from attnscope.core.checks import ResidualLog
        from attnscope.maps.layer_maps import LayerBatch, layer_scope_maps

        mask, states = self.states(B, n)

        def run():
            log = ResidualLog(1e-3, None)
            for l in range(self.layers):
                at = LayerBatch(l, states[l], mask, states[l + 1])
                layer_scope_maps(self.model, self.weights, at, 0, log)

        return run

    def _propagate(self, B: int, n: int):
        from attnscope.core.checks import ResidualLog
        from attnscope.maps.propagation import StageCheck, propagate

        mask, states = self.states(B, n)

        def run():
            log = ResidualLog(1e-3, None)
            for event in propagate(self.model, self.weights, states.__getitem__, mask):
                if isinstance(event, StageCheck):
                    event.record(log, mask)

        return run

    def _attend(self, B: int, n: int):
        from attnscope.analyses.attend.lift import key_weights, lift_sums
        from attnscope.core.attention import attention_probs, layer_visible_pairs
        from attnscope.core.canonical import rotary_bands

        s = self.shape
        mask, states = self.states(1, n)
        layer = self.weights.layers[self.layers - 1]
        alpha = attention_probs(states[self.layers - 1], mask, layer)[0]
        visible = layer_visible_pairs(mask, layer)[0]
        pieces = {"category": torch.randint(0, 4, (n,)), "ids": torch.randint(5, 40, (n,))}
        _, W, _ = key_weights(alpha, visible, pieces, layer.causal)
        C = components(s, self.layers)
        Q, K = (torch.randn(s.heads, C, n, s.d_head) for _ in range(2))
        band = rotary_bands(layer.rotary, layer.d_head)
        return lambda: lift_sums(Q, K, W, layer.scale, band)

    def _probe(self, B: int, n: int):
        from attnscope.analyses.probing.probe import Sequence, batches, train_and_score

        rng = torch.Generator().manual_seed(0)
        words, features = PROBE["words"], self.layers * self.shape.heads
        count = PROBE["batches"] * PROBE["sentences"]
        sequences = []
        for _ in range(count):
            maps = torch.rand(features, words + 1, words + 1, generator=rng)
            heads = torch.randint(-1, words, (words,), generator=rng)
            heads = torch.where(heads == torch.arange(words), -1, heads)
            sequences.append(
                Sequence(
                    (maps / maps.sum(-1, keepdim=True)).numpy(),
                    torch.randn(words, self.shape.d, generator=rng).numpy(),
                    heads.numpy(),
                    torch.zeros(words, dtype=torch.long).numpy(),
                    torch.ones(words, dtype=torch.bool).numpy(),
                )
            )
        train = batches(sequences, "attn", PROBE["sentences"])
        test = train[:1]

        def run():
            with torch.enable_grad():
                return train_and_score(
                    "attn+emb", train, test, seed=0, epochs=PROBE["epochs"], learning_rate=0.02
                )

        return run

    def _js(self, B: int, n: int):
        from attnscope.analyses.weights.head_distances import js_sums, smoothed_entries
        from attnscope.core.attention import attention_probs

        mask, states = self.states(B, n)
        alpha = torch.cat(
            [
                attention_probs(states[l], mask, layer).transpose(0, 1)
                for l, layer in enumerate(self.weights.layers)
            ]
        )  # [G, B, n, n], every layer's heads
        causal = self.shape.causal
        return lambda: js_sums(smoothed_entries(alpha, mask, causal))


def machine(repeats: int, tiny: bool) -> dict:
    """The machine's float32 and float64 matmul rates (GFLOP/s per size, and the best) and its
    copy bandwidth (GB/s), in this process at torch's thread count."""
    sizes = [(64, 64, 64)] if tiny else [(256, 256, 256), (2048, 576, 1536), (1024, 1024, 1024)]
    found = {"threads": torch.get_num_threads()}
    for name, dtype in (("float32", torch.float32), ("float64", torch.float64)):
        rates = matmul_rates(sizes, dtype, repeats)
        found[name] = {"sizes": rates, "best": max(rates.values())}
    found["copy_gb_s"] = copy_bandwidth(16 if tiny else 512, repeats)
    return found


PRODUCTS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm")
PRODUCTS += ("aten::_scaled_dot_product_flash_attention_for_cpu",)  # SDPA's fused kernel


def time_split(run: Callable[[], object]) -> dict[str, float]:
    """Where one call's wall time goes, under torch's profiler: shares in the matrix
    products' kernels (self time of PRODUCTS), in every other torch operator (elementwise,
    reductions, copies, indexing) and outside torch's operators (Python, the profiler's own
    cost). -> {"products", "other_ops", "outside", "product_seconds"}"""
    from torch.profiler import ProfilerActivity, profile

    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        run()
    wall = time.perf_counter() - start
    events = profiled.key_averages()
    products = sum(e.self_cpu_time_total for e in events if e.key in PRODUCTS) / 1e6
    ops = sum(e.self_cpu_time_total for e in events) / 1e6
    return {
        "products": products / wall,
        "other_ops": (ops - products) / wall,
        "outside": max(0.0, wall - ops) / wall,
        "product_seconds": products,
    }


def verdict(row: dict) -> str:
    """`matmul` at HALF of the matmul rate or more, else `memory` where the bytes run at HALF
    of the copy bandwidth or more, else where the time goes: `products` (the products
    themselves run below the rate: thin or batched small ones), `elementwise` (the other
    operators) or `python` (outside the operators)."""
    if row["of_matmul"] >= HALF:
        return "matmul"
    if row["of_copy"] >= HALF:
        return "memory"
    shares = {"products": row["products"], "elementwise": row["other_ops"]}
    shares["python"] = row["outside"]
    return max(shares, key=shares.get)


def measure(step: str, steps: Steps, n: int, rates: dict, repeats: int) -> dict:
    """One row: the step's counted work, median seconds, rates and fractions, per layer for
    the per-layer steps (every layer's heads at once for js, every map for the probe), and
    one more call's time split (`time_split`)."""
    steps.call(step, 16)()  # warm-up on 16 pieces: kernels loaded outside the measurement
    run = steps.call(step, n)
    with torch.no_grad():
        seconds = median_seconds(run, repeats)
        split = time_split(run)
    work = steps.work(step, n)
    layered = step in ("extract", "norms", "mixing", "propagate")
    per = steps.layers if layered else 1
    peak = rates["float64" if step == "propagate" else "float32"]["best"]
    gflops, gbs = work.flops / seconds / 1e9, work.bytes / seconds / 1e9
    row = {
        "step": step,
        "shape": steps.shape.name,
        "per": "layer" if layered else "call",
        "shapes": steps.describe(step, n),
        "gflop": work.flops / 1e9 / per,
        "seconds": seconds / per,
        "gflop_s": gflops,
        "of_matmul": gflops / peak,
        "bytes": work.bytes / per,
        "gb_s": gbs,
        "of_copy": gbs / rates["copy_gb_s"],
        "products": split["products"],
        "other_ops": split["other_ops"],
        "outside": split["outside"],
        "product_gflop_s": (  # none where the counted work is no product (js)
            work.flops / split["product_seconds"] / 1e9
            if split["product_seconds"] and step != "js"
            else None
        ),
    }
    return row | {"verdict": verdict(row)}


def table(rows: list[dict]) -> str:
    """The rows as a Markdown table (shares of the profiled call's time: in products, other
    operators, outside them; the products' own GFLOP/s in that call)."""
    lines = [
        "| step | shapes | GFLOP | seconds | GFLOP/s | of matmul | MB | GB/s | of copy "
        "| time in products / other ops / outside | products' GFLOP/s | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        shapes = f"{r['shape']}: {r['shapes']}"
        split = f"{r['products']:.0%} / {r['other_ops']:.0%} / {r['outside']:.0%}"
        products = "-" if r["product_gflop_s"] is None else f"{r['product_gflop_s']:.3g}"
        lines.append(
            f"| {r['step']} | {shapes} | {r['gflop']:.3g} | {r['seconds']:.3g} | "
            f"{r['gflop_s']:.3g} | {r['of_matmul']:.2f} | {r['bytes'] / 1e6:.3g} | "
            f"{r['gb_s']:.3g} | {r['of_copy']:.2f} | {split} | {products} | "
            f"{r['verdict']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", choices=list(SHAPES), default=["smollm2", "minilm"])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS))
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's)")
    parser.add_argument("--tiny", action="store_true", help="the tiny shape, n 16 (tests)")
    parser.add_argument("--json", type=Path, help="write the machine's rates and the rows here")
    args = parser.parse_args(argv)
    if args.tiny:
        args.shapes, args.length = ["tiny"], 16
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.set_grad_enabled(False)
    rates = machine(max(args.repeats, 5), args.tiny)
    f32, f64 = rates["float32"], rates["float64"]
    print(f"torch threads {rates['threads']}; matmul GFLOP/s float32 "
          + ", ".join(f"{k}: {v:.1f}" for k, v in f32["sizes"].items())
          + "; float64 " + ", ".join(f"{k}: {v:.1f}" for k, v in f64["sizes"].items())
          + f"; copy {rates['copy_gb_s']:.1f} GB/s (read + write)", flush=True)  # fmt: skip
    rows = []
    for name in args.shapes:
        steps = Steps(SHAPES[name], args.layers)
        for step in args.steps:
            rows.append(measure(step, steps, args.length, rates, args.repeats))
            print(f"  {name} {step}: {rows[-1]['seconds']:.3g} s", file=sys.stderr, flush=True)
    print(table(rows))
    result = {"machine": rates, "layers": args.layers, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
