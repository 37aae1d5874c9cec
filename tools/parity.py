"""Parity with the `transformers` forward, as a table (docs/parity.md;
tests/test_parity.py holds its bounds).

For every supported architecture (a tiny random model with its language-model head, built as
the tests build it: grouped-query heads, short sliding windows, soft-capping and biases on)
and for each model folder given with --folder, on both loading routes, over sequences of
ragged lengths (padded batches):

    states     max |stored X_l - transformers' hidden state l| / max |X_l|, over every layer
               (the last state through the final norm, which transformers applies to it)
    attention  max |alpha recomputed from the stored X_l - transformers' eager attention|
    logits     max |the LM head on the stored last state - transformers' logits| / max |logits|
    norms      the norms family's worst relative residual (sum_h sum_j alpha f(x) + b_O
               against the attention module's output)
    mixing     the mixing family's worst relative residual over every stage of every layer
               (each scope against the module, and the FF split's completeness)

Usage (from the repository root):
    python tools/parity.py --out parity.tsv
    python tools/parity.py --folder smollm2=resources/models/smollm2-135m --only-folders
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests"))  # the tests' tiny models of every architecture

from attnscope.architectures import architecture, load_model  # noqa: E402
from attnscope.core.attention import (  # noqa: E402
    attention_output,
    attention_probs,
    through,
    value_vectors,
)
from attnscope.core.checks import ResidualLog  # noqa: E402
from attnscope.core.lm_head import head_logits  # noqa: E402
from attnscope.core.store import HiddenStates, write_encoded  # noqa: E402
from attnscope.data.corpora import encode_corpus  # noqa: E402
from attnscope.maps.layer_maps import LayerBatch, layer_scope_maps  # noqa: E402
from attnscope.model.extract import ExtractSettings, extract, extract_streamed  # noqa: E402
from attnscope.model.loaded import open_model  # noqa: E402
from attnscope.model.sources import build_manifest, manifest_attrs, write_manifest  # noqa: E402

ROUTES = ("whole-model", "layer-streamed")
COLUMNS = ["model", "model_type", "route", "states", "attention", "logits", "norms", "mixing"]
TEXTS = [
    "The capital of France is Paris, and the capital of Italy is Rome.",
    ["The cat sat on the mat.", "It slept there all afternoon."],
    "Attention heads attend to the first token when they have nothing else to do.",
]


def tiny_folder(model_type: str, folder: Path) -> Path:
    """The tests' tiny random model of `model_type` with its LM head, saved (no tokenizer)."""
    from conftest import SPECIAL_VOCAB, tiny_model

    head = "causal" if model_type not in ("bert", "roberta", "electra") else "mlm"
    tiny_model(model_type, head=head).save_pretrained(folder)
    (folder / "vocab.txt").write_text(SPECIAL_VOCAB)
    return folder


def encoded_texts(folder: Path, out: Path, max_length: int) -> Path:
    """TEXTS encoded as the workflow encodes a `texts` corpus, with the folder's tokenizer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    write_encoded(
        out, encode_corpus("texts", [], tokenizer, {"texts": TEXTS, "max_length": max_length})
    )
    return out


def relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


def stored(folder: Path, encoded: Path, route: str, work: Path) -> tuple[Path, Path]:
    """The manifest and the hidden-state store of `folder` on `encoded`, made on `route`."""
    manifest = build_manifest(folder.name, {"source": "path", "path": str(folder)})
    write_manifest(work / "manifest.json", manifest)
    store = work / "hidden_states.h5"
    settings, attrs = ExtractSettings(batch_size=4), manifest_attrs(manifest)
    if route == "whole-model":
        extract(load_model(str(folder)), encoded, store, settings, attrs)
    else:
        extract_streamed(folder, encoded, store, settings, attrs)
    return work / "manifest.json", store


def deviations(folder: Path, encoded: Path, route: str, work: Path) -> dict:
    """The table's figures for one model folder on one loading route, over one padded batch
    of every sequence in `encoded`."""
    manifest_path, store = stored(folder, encoded, route, work)
    loaded = open_model(manifest_path, with_head=True, loading=route)
    reference = load_model(str(folder), head=loaded.manifest["lm_head"])
    arch, weights = architecture(loaded.manifest["model_type"]), loaded.weights
    with HiddenStates(store) as states:
        n = int(states.lengths.max())
        mask = torch.from_numpy(states.attention_mask[:, :n].astype(np.int64))
        X = [torch.from_numpy(states.hidden(s)[:, :n]) for s in states.states]
        ids, types = (
            torch.from_numpy(a[:, :n].astype(np.int64))
            for a in (states.input_ids, states.token_type_ids)
        )
    with torch.no_grad():
        out = reference(
            **arch.model_inputs(reference, ids, mask, types),
            output_hidden_states=True,
            output_attentions=True,
        )
    real = mask.bool()
    pairs = real[:, None, :, None] & real[:, None, None, :]  # [B, 1, query, key]
    found = {"states": 0.0, "attention": 0.0}
    norms, mixing = ResidualLog(1.0, None), ResidualLog(1.0, None)
    for l in range(weights.n_layers):
        layer = weights.layers[l]
        with torch.no_grad():
            alpha = attention_probs(X[l], mask, layer)
            y = attention_output(alpha, value_vectors(X[l], layer), layer)
            norms.add(l + 1, "Attn", y, arch.attention_output(loaded.module, l, X[l], mask), mask)
            layer_scope_maps(loaded.module, weights, LayerBatch(l, X[l], mask, X[l + 1]), 0, mixing)
        error = float(((alpha - out.attentions[l]) * pairs).abs().max())
        found["attention"] = max(found["attention"], error)
        found["states"] = max(found["states"], relative(X[l][real], out.hidden_states[l][real]))
    last = through(weights.final_ln, X[-1])
    found["states"] = max(found["states"], relative(last[real], out.hidden_states[-1][real]))
    found["logits"] = float("nan")
    if loaded.head is not None:
        with torch.no_grad():
            logits = head_logits(loaded.head, weights.final_ln, X[-1])
        found["logits"] = relative(logits[real], out.logits[real])
    found["norms"] = float(norms.table()["max_rel"].max())
    found["mixing"] = float(mixing.table()["max_rel"].max())
    model_type = loaded.manifest["model_type"]
    return {"model": folder.name, "model_type": model_type, "route": route, **found}


def model_rows(name: str, folder: Path, tmp: Path, max_length: int = 48) -> list[dict]:
    """The table's rows of one model folder, one per loading route: on TEXTS where the
    folder has a tokenizer that reads text, else on the tests' random pieces."""
    encoded = tmp / f"{name}-encoded.h5"
    if (folder / "tokenizer.json").exists() or (folder / "vocab.json").exists():
        encoded_texts(folder, encoded, max_length)
    else:
        from conftest import write_tiny_encoded

        write_tiny_encoded(encoded, name, 4, 16)
    rows = []
    for route in ROUTES:
        (tmp / name / route).mkdir(parents=True, exist_ok=True)
        rows.append({**deviations(folder, encoded, route, tmp / name / route), "model": name})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--types", nargs="*", help="tiny models of these types only (none: all)")
    parser.add_argument("--only-folders", action="store_true", help="no tiny models")
    parser.add_argument("--max-length", type=int, default=48)
    parser.add_argument("--out", type=Path, help="write the table as TSV here too")
    args = parser.parse_args()
    torch.set_num_threads(2)
    from conftest import CLASSIC, DECODERS

    tiny = () if args.only_folders else (args.types or (*CLASSIC, *DECODERS))
    given = [(name, Path(path)) for name, path in (f.split("=", 1) for f in args.folder)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="parity-") as tmp:
        tmp = Path(tmp)
        for name, folder in [(t, tiny_folder(t, tmp / t)) for t in tiny] + given:
            for row in model_rows(name, folder, tmp, args.max_length):
                print("\t".join(f"{v:.1e}" if isinstance(v, float) else v for v in row.values()))
                rows.append(row)
    table = pd.DataFrame(rows, columns=COLUMNS)
    if args.out:
        table.to_csv(args.out, sep="\t", index=False, float_format="%.2e")
    print(table.to_markdown(index=False, floatfmt=".1e"))


if __name__ == "__main__":
    main()
