"""Compare a hidden-state store with a fresh `transformers` forward pass.

Usage: python tools/check_store.py results/{model}/{corpus}/hidden_states.h5 \
           results/{model}/model/manifest.json [--batch-size 32]
Prints the largest absolute difference per layer over all real tokens; exits 1 above 1e-4
(for a float16 store: above 1e-4 plus float16's rounding, 2^-11 of the value), saying why.
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
from attnscope.core.store import HiddenStates, batch_spans  # noqa: E402
from attnscope.pipeline.models import read_manifest  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store")
    parser.add_argument("manifest")
    parser.add_argument("--batch-size", type=int, default=7)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    model = load_model(read_manifest(args.manifest)["path"])
    family = architecture(model.config.model_type)
    final_ln = canonical_weights(model).final_ln
    with HiddenStates(args.store) as store:
        worst = np.zeros(store.n_layers + 1)
        excess = np.zeros(store.n_layers + 1)  # largest difference beyond what is allowed
        storage = store.storage_dtype  # float32, float16 or bfloat16
        rounding = torch.finfo(getattr(torch, storage)).eps / 2 if storage != "float32" else 0.0
        for start, stop, n in batch_spans(store.lengths, args.batch_size):
            tensors = {
                key: torch.from_numpy(getattr(store, key)[start:stop, :n].astype(np.int64))
                for key in ("input_ids", "attention_mask", "token_type_ids")
            }
            with torch.no_grad():
                inputs = family.model_inputs(model, **tensors)
                fresh = model(**inputs, output_hidden_states=True).hidden_states
            valid = store.attention_mask[start:stop, :n].astype(bool)
            for l, state in enumerate(fresh):
                stored = store.hidden(l, start, stop)[:, :n]
                if final_ln is not None and l == store.n_layers:
                    stored = final_ln(torch.from_numpy(stored)).numpy()
                fresh_l = state.numpy()[valid]
                diff = np.abs(stored[valid] - fresh_l)
                worst[l] = max(worst[l], diff.max())
                allowed = args.tolerance + rounding * np.abs(fresh_l)
                excess[l] = max(excess[l], (diff - allowed).max())
        print(f"{store.n_sequences} sequences, {int(store.lengths.sum())} real tokens")
    for l, diff in enumerate(worst):
        print(f"hidden/{l}: max abs diff {diff:.3g}")
    allowed = f"{args.tolerance:g}" + (
        f" + {rounding:.2g} x |value| ({storage})" if rounding else ""
    )
    if excess.max() > 0:
        layer = int(excess.argmax())
        print(f"FAIL: hidden/{layer} differs by {worst[layer]:.3g}, more than {allowed} allows")
        return 1
    print(f"OK: every layer within {allowed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
