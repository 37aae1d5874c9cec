"""The attn+emb probe's training with its products as vector times matrix, and as before.

The probe's scores sum the features [B, W, W + 1, C] with one weight vector per row and one
per candidate. Since this change `Probe.forward` writes each as a row vector times the
features' transpose; before, as the features times a column vector. The same products, in
another order of summation (float32 rounding). Both forms, on one run's EWT features:

  vector-matrix   `Probe` (as the workflow trains it now)
  matrix-vector   the same module with the earlier forward

Each round trains both (their order rotating) on the dev split, one torch thread (a model
job's share of this 2-core machine), and scores UAS on the test split. Printed: seconds per
training, matrix-vector / vector-matrix, both UAS and the largest score difference of the
untrained probes on the first batch.

Run: .venv/bin/python benchmarks/bench_probe.py results/minilm-l6/ewt [--source weights]
     [--epochs 30] [--repeats 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from attnscope.analyses.probing import probe as probing  # noqa: E402
from attnscope.core.store import read_meta  # noqa: E402


class MatrixVectorProbe(probing.Probe):
    """`Probe` with the forward before this change: features times column vectors."""

    def forward(self, feats, feats_by_candidate, emb):
        by_row = self.bias + self.dep(emb)
        cand_emb = torch.cat([emb, self.root.expand(emb.shape[0], 1, -1)], dim=1)
        by_candidate = self.head(cand_emb)
        scores = (feats @ by_row[..., None]).squeeze(-1)
        return scores + (feats_by_candidate @ by_candidate[..., None]).squeeze(-1).mT


FORMS = {"vector-matrix": probing.Probe, "matrix-vector": MatrixVectorProbe}


def train(form: str, train_batches, test_batches, epochs: int) -> tuple[float, float]:
    """(seconds, UAS) of the attn+emb probe trained with `form`'s module."""
    probing.Probe = FORMS[form]  # train_and_score builds the module by this name
    try:
        start = time.perf_counter()
        uas, _ = probing.train_and_score(
            "attn+emb", train_batches, test_batches, seed=0, epochs=epochs, learning_rate=0.02
        )
        return time.perf_counter() - start, uas
    finally:
        probing.Probe = FORMS["vector-matrix"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("corpus", type=Path, help="a run's results/{model}/ewt folder")
    parser.add_argument("--source", default="weights")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    metas = read_meta(str(args.corpus / "encoded.h5"))
    features = str(args.corpus / "probing" / "probe_features.h5")
    train_batches = probing.batches(probing.load_split(features, args.source, metas, "dev"), "attn")
    test_batches = probing.batches(probing.load_split(features, args.source, metas, "test"), "attn")
    first = train_batches[0]
    with torch.no_grad():
        scores = []
        for module in FORMS.values():
            torch.manual_seed(0)
            probe = module(first.feats.shape[-1], first.emb.shape[-1], True)
            for parameter in probe.parameters():
                parameter.normal_()
            scores.append(probe(first.feats, first.feats_by_candidate, first.emb))
    print(f"largest score difference, untrained: {float((scores[0] - scores[1]).abs().max()):.2e}")
    seconds = {form: [] for form in FORMS}
    for round_ in range(args.repeats):
        forms = list(FORMS)[round_ % 2 :] + list(FORMS)[: round_ % 2]
        for form in forms:
            took, uas = train(form, train_batches, test_batches, args.epochs)
            seconds[form].append(took)
            print(f"round {round_ + 1} {form:14s} {took:7.2f} s  UAS {uas:.4f}", flush=True)
    old, new = (statistics.median(seconds[f]) for f in ("matrix-vector", "vector-matrix"))
    print(f"median: matrix-vector {old:.2f} s, vector-matrix {new:.2f} s, ratio {old / new:.2f}")


if __name__ == "__main__":
    main()
