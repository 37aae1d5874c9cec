"""Compare a hidden-state store with a fresh `transformers` forward pass.

Usage: python tools/check_store.py results/{model}/{corpus}/hidden_states.h5 \
           results/{model}/model/manifest.json [--batch-size 7] [--tolerance 1e-4]
Prints the largest difference per stored state over all real tokens, absolute and relative to
the token's scale (its largest |value| in that state), and exits 1 where a difference exceeds
the tolerance times that scale (for a float16 or bfloat16 store, plus the type's rounding:
half a step, 2^-11 or 2^-8 of the value), saying which state. The tolerance is relative because
float32 rounding is: a state of |x| = 25,000 (a decoder's first position) differs between two
correct forwards by more than 1e-4 in absolute terms. A store made with a `layers:` subset is
compared on the states it keeps.
Independent of the extraction code path: it calls the model directly, with its own batch
size (so batches are padded differently). Where the model has a final LayerNorm (GPT-2) the
last state is compared after it, which is what `transformers` returns (the store keeps it before).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parents[1] / "scripts"))

from attnscope.architectures import architecture, canonical_weights, load_model  # noqa: E402
from attnscope.core.checks import NonFiniteError  # noqa: E402
from attnscope.core.store import HiddenStates, batch_spans  # noqa: E402
from attnscope.model.sources import read_manifest  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("manifest")
    parser.add_argument("--batch-size", type=int, default=7)
    parser.add_argument(
        "--tolerance", type=float, default=1e-4, help="relative to each token's largest |value|"
    )
    args = parser.parse_args()
    try:
        return compare(args)
    except NonFiniteError as error:
        print(f"FAIL: {error}")
        return 1


def compare(args) -> int:
    model = load_model(read_manifest(args.manifest)["path"])
    arch = architecture(model.config.model_type)
    final_ln = canonical_weights(model).final_ln
    with HiddenStates(args.store) as store:
        worst_abs = dict.fromkeys(store.states, 0.0)
        worst_rel = dict.fromkeys(store.states, 0.0)
        excess = dict.fromkeys(store.states, 0.0)  # largest difference beyond what is allowed
        storage = store.storage_dtype  # float32, float16 or bfloat16
        rounding = torch.finfo(getattr(torch, storage)).eps / 2 if storage != "float32" else 0.0
        for start, stop, n in batch_spans(store.lengths, args.batch_size):
            tensors = {
                key: torch.from_numpy(getattr(store, key)[start:stop, :n].astype(np.int64))
                for key in ("input_ids", "attention_mask", "token_type_ids")
            }
            with torch.no_grad():
                inputs = arch.model_inputs(model, **tensors)
                fresh = model(**inputs, output_hidden_states=True).hidden_states
            valid = store.attention_mask[start:stop, :n].astype(bool)
            for l in store.states:  # those a `layers:` subset keeps
                stored = store.hidden(l, start, stop)[:, :n]
                if final_ln is not None and l == store.n_layers:
                    stored = final_ln(torch.from_numpy(stored)).numpy()
                fresh_l = fresh[l].numpy()[valid]  # [tokens, d]
                diff = np.abs(stored[valid] - fresh_l)
                scale = np.abs(fresh_l).max(axis=-1, keepdims=True)  # each token's largest |x|
                allowed = args.tolerance * scale + rounding * np.abs(fresh_l)
                worst_abs[l] = max(worst_abs[l], float(diff.max()))
                relative = diff / np.maximum(scale, np.finfo(np.float32).tiny)
                worst_rel[l] = max(worst_rel[l], float(relative.max()))
                excess[l] = max(excess[l], float((diff - allowed).max()))
        print(f"{store.n_sequences} sequences, {int(store.lengths.sum())} real tokens")
    for l in worst_abs:
        print(f"hidden/{l}: max abs diff {worst_abs[l]:.3g}, relative {worst_rel[l]:.3g}")
    allowed = f"{args.tolerance:g} x the token's largest |value|" + (
        f" + {rounding:.2g} x |value| ({storage})" if rounding else ""
    )
    failed = [l for l in excess if excess[l] > 0]
    if failed:
        layer = max(failed, key=excess.get)
        print(
            f"FAIL: hidden/{layer} differs by {worst_abs[layer]:.3g} (relative "
            f"{worst_rel[layer]:.3g}), more than {allowed} allows"
        )
        return 1
    print(f"OK: every stored state within {allowed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
