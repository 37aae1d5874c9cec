"""The rotary band statistics (`analyses.position.rotary`) against the code they replaced.

A random Llama with SmolLM2-135M's sizes (width 576, 9 heads, 3 key-value heads, head width
64: 32 bands, FF 1536, rope_theta 100000; `--layers` of them, cost is per layer) and
`--sequences` windows of `--lengths` random pieces, full (no padding), as the workflow's
`position_rotary` reads them: each layer's input from the model's own forward, the sequences
in batches of `--batch-size`, t_max as the default config's.

old  the pre-change `RotaryStatistics.update`, kept here only for this comparison: per head,
     every band's [B, n, n] scores computed twice (the shares need sum_b |s^b| first), about
     a dozen elementwise passes per band, and the per-offset sums by index_add_ over all
     n^2 pairs in float64
new  `rotary.RotaryStatistics`: the scores once per block of query rows, every head and band
     at once, laid out by offset (the causal pairs alone), per-offset sums as column sums

Both routes write the same tables (`band_table`, `offset_table`, the residual per layer):
the script checks every numeric column to 1e-5 of its largest magnitude (sums reorder),
NaN where the other has NaN, and prints the wall time of each route and old / new. The
residual check is not compared (rounding either way); the new one must stay within BOUND.
On a machine shared with other work, compare `--threads 1` too: small parallel operations
wait for a second core there, which both routes pay per operation.

Run: .venv/bin/python benchmarks/bench_rotary.py [--lengths 512 1024] [--layers 2]
     [--sequences 8] [--batch-size 16] [--threads 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from attnscope.analyses.position import rotary  # noqa: E402
from attnscope.architectures import canonical_weights  # noqa: E402
from attnscope.core.attention import layer_visible_pairs, queries_keys  # noqa: E402
from attnscope.core.canonical import Rotary  # noqa: E402

SMOLLM2 = dict(
    hidden_size=576,
    num_attention_heads=9,
    num_key_value_heads=3,
    intermediate_size=1536,
    rope_theta=100000.0,
    vocab_size=49152,
    max_position_embeddings=8192,
    tie_word_embeddings=True,
)
T_MAX = 10  # config.yaml's analyses.position.t_max
TOLERANCE = 1e-5  # largest difference over the column's largest magnitude


# ---- the pre-change code path, kept only for this comparison (rotary.py before the change) --


def _old_band_dims(rotary_: Rotary | None, d_head: int, device) -> list[torch.Tensor]:
    band = rotary.bands(rotary_, d_head)
    return [torch.nonzero(band == b).flatten().to(device) for b in range(int(band.max()) + 1)]


def _old_head_band_scores(q, k, dims, scale):
    for index in dims:
        yield (q[..., index] @ k[..., index].transpose(-1, -2)) * scale


def _old_offset_index(n: int, device) -> torch.Tensor:
    position = torch.arange(n, device=device)
    return (position[:, None] - position[None, :]).clamp(min=0).flatten()


class OldRotaryStatistics(rotary.RotaryStatistics):
    """The same accumulators and results; `update` as it was before the change."""

    def update(self, X: torch.Tensor, mask: torch.Tensor) -> None:
        self.dims = _old_band_dims(self.layer.rotary, self.layer.d_head, X.device)
        q, k = queries_keys(X, self.layer)
        visible = layer_visible_pairs(mask, self.layer).tril()
        offsets = _old_offset_index(X.shape[1], X.device)
        self.counts.index_add_(0, offsets, visible.sum(0).flatten().double())
        real = mask.bool()
        self.tokens += int(real.sum())
        for name, t in (("q", q), ("k", k)):
            self.norm_sums[name] += self._band_norms(t, real)
        for h in range(self.layer.n_heads):
            self._update_head(h, q[:, h], k[:, h], visible, offsets)

    def _update_head(self, h: int, q, k, visible: torch.Tensor, offsets: torch.Tensor) -> None:
        scale = self.layer.scale
        total, total_abs = 0.0, 0.0
        for s in _old_head_band_scores(q, k, self.dims, scale):
            total, total_abs = total + s, total_abs + s.abs()
        self._check(total, (q @ k.transpose(-1, -2)) * scale, visible)
        counted = visible & (total_abs > 0)
        self.share_pairs[h] += counted.sum()
        divisor = torch.where(counted, total_abs, 1.0)
        for b, s in enumerate(_old_head_band_scores(q, k, self.dims, scale)):
            shares = torch.where(counted, s.abs() / divisor, 0.0)
            self.share_sums[h, b] += shares.sum(dtype=torch.float64)
            seen = torch.where(visible, s, 0.0).double()
            self.sums[h, b].index_add_(0, offsets, seen.sum(0).flatten())
            self.squares[h, b].index_add_(0, offsets, seen.square().sum(0).flatten())


# ---- end of the pre-change code ----------------------------------------------------------


def smollm2_shaped(layers: int):
    """A random Llama of SmolLM2-135M's sizes with `layers` layers, eval mode."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(num_hidden_layers=layers, attn_implementation="eager", **SMOLLM2)
    return LlamaForCausalLM(config).eval()


def tables(statistics, weights, states, mask, batch_size: int) -> dict:
    """Every layer's statistics over the batches: the route's tables and seconds taken."""
    start = time.perf_counter()
    summaries = []
    n = mask.shape[1]
    for l, layer in enumerate(weights.layers):
        stats = statistics(layer, n, T_MAX)
        for first in range(0, len(mask), batch_size):
            stats.update(states[l][first : first + batch_size], mask[first : first + batch_size])
        summaries.append(stats.summary())
    seconds = time.perf_counter() - start
    result = rotary.RotaryResult.collect(summaries)
    return {
        "seconds": seconds,
        "bands": rotary.band_table(result),
        "offsets": rotary.offset_table(result),
        "residual": result.residual,
    }


def largest_difference(old: dict, new: dict) -> float:
    """The worst numeric column's max |new - old| over its max |old|; NaN must match."""
    worst = 0.0
    for name in ("bands", "offsets"):
        a, b = old[name], new[name]
        assert list(a.columns) == list(b.columns) and len(a) == len(b), name
        for column in a.columns:
            x, y = a[column].to_numpy(), b[column].to_numpy()
            if x.dtype.kind not in "fi":
                assert (x == y).all(), (name, column)
                continue
            assert np.array_equal(np.isnan(x), np.isnan(y)), (name, column)
            finite = np.isfinite(x)
            assert (x[~finite] == y[~finite]).all() or np.isnan(x[~finite]).all(), column
            if finite.any():
                scale = max(np.abs(x[finite]).max(), np.finfo(float).tiny)
                worst = max(worst, float(np.abs(x[finite] - y[finite]).max() / scale))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--sequences", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16, help="config.yaml's batch_size")
    parser.add_argument("--threads", type=int, default=0, help="torch threads; 0: default")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model = smollm2_shaped(args.layers)
    weights = canonical_weights(model.model)
    layer = weights.layers[0]
    print(
        f"SmolLM2-shaped Llama: {args.layers} layers, {layer.n_heads} heads, "
        f"{rotary.n_bands(layer.rotary, layer.d_head)} bands, {args.sequences} sequences, "
        f"batch {args.batch_size}, t_max {T_MAX}, torch threads {torch.get_num_threads()}"
    )
    print(f"{'n':>6} {'old s':>9} {'new s':>9} {'old/new':>8} {'max rel diff':>13}")
    for n in args.lengths:
        generator = torch.Generator().manual_seed(n)
        ids = torch.randint(100, SMOLLM2["vocab_size"], (args.sequences, n), generator=generator)
        mask = torch.ones_like(ids)
        with torch.no_grad():
            states = model.model(ids, attention_mask=mask, output_hidden_states=True)
            states = states.hidden_states
            old = tables(OldRotaryStatistics, weights, states, mask, args.batch_size)
            new = tables(rotary.RotaryStatistics, weights, states, mask, args.batch_size)
        difference = largest_difference(old, new)
        assert difference <= TOLERANCE, f"n = {n}: tables differ by {difference:.2e}"
        assert (new["residual"] < rotary.BOUND).all(), new["residual"]
        ratio = old["seconds"] / new["seconds"]
        print(
            f"{n:>6} {old['seconds']:>9.2f} {new['seconds']:>9.2f} {ratio:>8.1f} "
            f"{difference:>13.1e}",
            flush=True,
        )


if __name__ == "__main__":
    main()
