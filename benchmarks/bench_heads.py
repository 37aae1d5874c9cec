"""The heads family's cost: its role pass over a repeated corpus (induction, duplicate-token
and previous-token scores) against the weights family's statistics pass on the same stored
states (both recompute every layer's attention from the stored inputs), and the join of the
role table with circuits.tsv and the atlas page.

A random Llama of SmolLM2-135M's sizes (`bench_rotary.SMOLLM2`) with `--layers` layers, one
repeated corpus START r r of `--sequences` sequences with |r| = `--length` (the default run's
8 x 50), its hidden states extracted once; each pass is timed in this process after one warm-up
call on one sequence.

Run: .venv/bin/python benchmarks/bench_heads.py [--layers 4] [--sequences 8] [--length 50]
     [--folder /tmp/bench-heads]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from bench_rotary import SMOLLM2  # noqa: E402

from attnscope.analyses.heads.atlas import atlas_data, render  # noqa: E402
from attnscope.analyses.heads.circuits import circuits  # noqa: E402
from attnscope.analyses.heads.repeat_scores import role_scores  # noqa: E402
from attnscope.analyses.heads.roles import head_roles  # noqa: E402
from attnscope.analyses.weights.statistics import accumulate_statistics  # noqa: E402
from attnscope.architectures import canonical_weights  # noqa: E402
from attnscope.core.store import EncodedCorpus, HiddenStates, write_encoded  # noqa: E402
from attnscope.model.extract import ExtractSettings, extract  # noqa: E402


def repeated_corpus(path: Path, vocab: int, sequences: int, length: int) -> None:
    rng = np.random.default_rng(0)
    rows = [[1, *r, *r] for r in (rng.choice(np.arange(1000, vocab), length, replace=False)
                                 for _ in range(sequences))]  # fmt: skip
    ids = np.array(rows, dtype=np.int32)
    write_encoded(
        path,
        EncodedCorpus(
            kind="repeated_random", input_ids=ids, attention_mask=np.ones(ids.shape, np.int8),
            token_type_ids=np.zeros(ids.shape, np.int8), category=np.zeros(ids.shape, np.int8),
            word_ids=np.tile(np.arange(-1, 2 * length, dtype=np.int32), (sequences, 1)),
            meta=[{} for _ in rows], settings={},
        ),
    )  # fmt: skip


def timed(call) -> tuple[float, object]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--sequences", type=int, default=8)
    parser.add_argument("--length", type=int, default=50)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/bench-heads"))
    args = parser.parse_args()
    from transformers import AutoConfig, AutoModelForCausalLM

    args.folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    config = AutoConfig.for_model("llama", num_hidden_layers=args.layers, **SMOLLM2)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    encoded, states = args.folder / "encoded.h5", args.folder / "hidden_states.h5"
    repeated_corpus(encoded, SMOLLM2["vocab_size"], args.sequences, args.length)
    extract(model, encoded, states, ExtractSettings(batch_size=8))
    weights = canonical_weights(model)
    L, H = weights.n_layers, weights.n_heads
    with HiddenStates(states) as store:
        role_scores(store, weights, 1)  # warm-up
        heads_time, scores = timed(lambda: role_scores(store, weights, 16))
        weights_time, _ = timed(lambda: accumulate_statistics(store, weights, 16))
    groups = pd.DataFrame(
        [(l, h, "induction", side, f"L{l - 1}.H{g}", "head", 1.0, 1.0 / H)
         for l in range(2, L + 1) for h in range(1, H + 1) for side in ("query", "key")
         for g in range(1, H + 1)],
        columns=["layer", "head", "keys", "side", "group", "kind", "lift", "share"],
    )  # fmt: skip
    scores["induction"] = 1.0  # every head a role: circuits.tsv at its largest

    def join():
        roles, rules = head_roles(list(range(1, L + 1)), H, {"role_scores": scores}, {})
        edges = circuits(roles, groups, 0.1)
        return render(atlas_data("bench", roles, rules, edges, {}, None, []), "bench")

    join_time, _ = timed(join)
    per = args.sequences * L
    print(f"{L} layers x {H} heads, {args.sequences} sequences of {1 + 2 * args.length} pieces")
    print(f"heads role pass   {heads_time:7.2f} s  ({heads_time / per * 1e3:6.1f} ms per layer "
          f"and sequence)")  # fmt: skip
    ratio = heads_time / weights_time
    print(f"weights statistics {weights_time:6.2f} s  (heads / weights {ratio:.2f})")
    print(f"roles + circuits + page {join_time:6.2f} s")


if __name__ == "__main__":
    main()
