"""Peak memory and time of extraction, norms and mixing as models grow: layer-streamed
against whole-model.

Random checkpoints at real models' shapes (random weights cost what real ones do), written
layer by layer in bfloat16 as sharded safetensors (one shard per layer, never the whole model
in memory), and one encoded corpus of `--sequences` random sequences of `--length` pieces.
Each step runs in a fresh process with the allocator settings of its rule's job
(`allocator.keep_freed_memory`, and `allocator.release_freed_memory` on the layer-streamed route);
its peak RSS is the process's own VmHWM. The analyses read the states the same route's
extraction stored.

shapes   llama-1b, llama-3b, llama-8b: Llama-3.2-1B, Llama-3.2-3B and Llama-3.1-8B configs
         (grouped-query attention, 128,256-piece vocabulary); llama-w1024: a Llama of width
         1024 (16 heads, FF 4096, 16 layers); bert-base, bert-large: BERT-base's and
         BERT-large's configs; minilm: the embedded MiniLM's real weights (nothing written)
routes   streamed (`extract_streamed`, `streamed_model`) for every shape; whole (the bare model
         loaded in float32) for the shapes given to --whole (the model must fit in memory)
steps    extract, norms (the norm-based analysis), mixing (whole-layer mixing, exact FF split),
         propagate (the decomposition through the whole depth to the prediction's attribution,
         exact FF split, no rollouts; the causal LM head: the streamed route reads the head
         alone, the whole route loads the model with it)
--compute-dtype  the extraction's forward type (float32, bfloat16, float16; analyses: float32)
--every N [M ..] the `layers:` setting [N, 2N, ...] up to the last layer, each in turn
                 (default 1: all); the store's size is printed after each extraction
--depths N [M ..] each written shape at N layers, then M, ... (default: the shape's own),
                 to see how peak memory grows with depth

Run: .venv/bin/python benchmarks/bench_scale.py [--shapes llama-1b llama-3b llama-8b]
     [--whole llama-1b bert-base] [--folder /tmp/attnscope-scale] [--sequences 4]
     [--length 128] [--device cpu] [--steps extract norms mixing] [--compute-dtype float32]
     [--every 1 4] [--depths 4 32]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
sys.path.insert(0, str(SCRIPTS))

LLAMA = dict(
    model_type="llama",
    head="causal",
    vocab_size=128256,
    num_key_value_heads=8,
    max_position_embeddings=131072,
    rms_norm_eps=1e-5,
    rope_theta=500000.0,
    bos_token_id=128000,
    eos_token_id=128001,
)
SHAPES = {
    "llama-1b": dict(
        LLAMA,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=32,
        head_dim=64,
        tie_word_embeddings=True,
    ),
    "llama-3b": dict(
        LLAMA,
        hidden_size=3072,
        intermediate_size=8192,
        num_hidden_layers=28,
        num_attention_heads=24,
        head_dim=128,
        tie_word_embeddings=True,
    ),
    "llama-8b": dict(
        LLAMA,
        hidden_size=4096,
        intermediate_size=14336,
        num_hidden_layers=32,
        num_attention_heads=32,
        head_dim=128,
        tie_word_embeddings=False,
    ),
    "llama-w1024": dict(
        LLAMA,
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=16,
        num_attention_heads=16,
        head_dim=64,
        tie_word_embeddings=True,
    ),
    "bert-base": dict(model_type="bert", head="masked", vocab_size=30522),
    "bert-large": dict(
        model_type="bert",
        head="masked",
        vocab_size=30522,
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=24,
        num_attention_heads=16,
    ),
}


def write_checkpoint(folder: Path, shape: str, depth: int | None = None) -> int:
    """A random bfloat16 checkpoint of `shape` (at `depth` layers; None: the shape's own), one
    safetensors shard per layer (and one for everything else), written tensor group by tensor
    group; returns its parameter count."""
    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    settings = dict(SHAPES[shape])
    if depth is not None:
        settings["num_hidden_layers"] = depth
    head = {"causal": AutoModelForCausalLM, "masked": AutoModelForMaskedLM}[settings.pop("head")]
    config = AutoConfig.for_model(settings.pop("model_type"), **settings)
    config.dtype = "bfloat16"
    with torch.device("meta"):
        model = head.from_config(config)
    shapes = {name: p.shape for name, p in model.named_parameters()}
    groups: dict[str, list[str]] = {}
    for name in shapes:
        parts = name.split(".")
        layer = next((parts[i + 1] for i, p in enumerate(parts) if p in ("layers", "layer")), None)
        groups.setdefault("rest" if layer is None else f"layer-{int(layer):03d}", []).append(name)
    folder.mkdir(parents=True, exist_ok=True)
    weight_map, total = {}, 0
    generator = torch.Generator().manual_seed(0)
    for group, names in sorted(groups.items()):
        file = f"model-{group}.safetensors"
        tensors = {}
        for name in names:
            if len(shapes[name]) == 1:  # norm weights and biases
                value = (
                    torch.ones(shapes[name])
                    if name.endswith("weight")
                    else torch.zeros(shapes[name])
                )
                tensors[name] = value.to(torch.bfloat16)
            else:
                value = torch.randn(shapes[name], generator=generator, dtype=torch.bfloat16)
                tensors[name] = value.mul_(0.02)
            weight_map[name] = file
            total += tensors[name].numel()
        save_file(tensors, folder / file, metadata={"format": "pt"})
        del tensors
    index = {"metadata": {"total_size": 2 * total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    config.save_pretrained(folder)
    return total


def write_corpus(path: Path, vocab: int, sequences: int, length: int) -> None:
    """encoded.h5 of random pieces, every position real."""
    import numpy as np

    from attnscope.core.store import EncodedCorpus, write_encoded

    rng = np.random.default_rng(0)
    shape = (sequences, length)
    corpus = EncodedCorpus(
        kind="texts",
        input_ids=rng.integers(1000, vocab, shape).astype(np.int32),
        attention_mask=np.ones(shape, np.int8),
        token_type_ids=np.zeros(shape, np.int8),
        category=np.zeros(shape, np.int8),
        word_ids=np.tile(np.arange(length, dtype=np.int32), (sequences, 1)),
        meta=[{} for _ in range(sequences)],
        settings={},
        inputs=(),
        tokenizer="random",
        dropped=0,
    )
    write_encoded(path, corpus)


RUN = """
import json, sys, time
from functools import partial
sys.path.insert(0, {scripts!r})
import h5py, torch
from transformers import AutoModel, AutoModelForCausalLM
from attnscope.analyses.mixing.corpus_pass import corpus_pass as mixing
from attnscope.analyses.mixing.depth_pass import depth_pass
from attnscope.analyses.mixing.settings import MixingSettings
from attnscope.analyses.norms.corpus_pass import corpus_pass as norms
from attnscope.analyses.norms.settings import NormsSettings
from attnscope.architectures import canonical_weights, prediction_head
from attnscope.core.store import HiddenStates
from attnscope.model import allocator
from attnscope.model.extract import ExtractSettings, extract, extract_streamed
from attnscope.model.loaded import as_loaded
from attnscope.maps.prediction import Prediction, model_logits, stored_logits
from attnscope.model.streamed_weights import streamed_head, streamed_model
folder, encoded, states, step, route, device, compute = sys.argv[1:8]
layers = json.loads(sys.argv[8])  # all, or 1-based layers
allocator.keep_freed_memory()  # the allocator settings of the rule jobs (runlog.start, open_model)
if route == "streamed":
    allocator.release_freed_memory()
start = time.perf_counter()
if step == "extract":
    run = ExtractSettings(batch_size=4, device=device, compute_dtype=compute, layers=layers)
    if route == "streamed":
        extract_streamed(folder, encoded, states, run)
    else:
        dtype = getattr(torch, compute)
        model = AutoModel.from_pretrained(folder, dtype=dtype, attn_implementation="eager")
        extract(model.to(device), encoded, states, run)
else:
    head = None
    if route == "streamed":
        model, weights = streamed_model(folder, device)
        if step == "propagate":
            head = streamed_head(folder, "causal", device)
        reference = partial(stored_logits, head, weights)
    else:
        task = AutoModelForCausalLM if step == "propagate" else AutoModel
        model = task.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
        model = model.to(device).eval()
        weights = canonical_weights(model)
        head = prediction_head(model) if step == "propagate" else None
        reference = partial(model_logits, model)
    with HiddenStates(states) as store, h5py.File(states + f"-{{step}}.h5", "w") as maps:
        common = dict(batch_size=4, device=device, max_rel_residual=1e-3)
        chosen = None if layers == "all" else store.layers
        if step == "norms":
            settings = NormsSettings(spearman_sample_size=1000000, seed=0, **common)
            norms(store, as_loaded(model, weights), maps, settings, layers=chosen)
        else:
            settings = MixingSettings(ig_steps=0, maps_dtype="float16", **common)
            if step == "mixing":
                mixing(store, as_loaded(model, weights), maps, settings, layers=chosen)
            else:
                prediction = Prediction(head, None, None, str, reference)
                depth_pass(store, as_loaded(model, weights), maps, maps, prediction, settings)
seconds = time.perf_counter() - start
peak = int(open("/proc/self/status").read().split("VmHWM:")[1].split()[0])
print(seconds, peak)
"""


def run(
    model: Path, encoded: Path, step: str, route: str, device: str, compute: str, layers
) -> tuple[float, float]:
    """(seconds, peak RSS in MiB) of one step in a fresh process; `layers` as the setting."""
    states = encoded.parent / f"states-{route}.h5"
    code = RUN.format(scripts=str(SCRIPTS))
    command = [sys.executable, "-c", code, str(model), str(encoded), str(states), step, route]
    command += [device, compute, json.dumps(layers)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    seconds, peak = done.stdout.split()[-2:]
    return float(seconds), int(peak) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["llama-1b", "llama-3b", "llama-8b"])
    parser.add_argument("--whole", nargs="*", default=["llama-1b"])
    parser.add_argument("--folder", type=Path, default=Path("/tmp/attnscope-scale"))
    parser.add_argument("--sequences", type=int, default=4)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", nargs="+", default=["extract", "norms", "mixing"])
    parser.add_argument("--compute-dtype", default="float32", help="the extraction's type")
    parser.add_argument("--every", type=int, nargs="+", default=[1], help="every N-th layer")
    parser.add_argument("--depths", type=int, nargs="+", default=[None], help="layers a model")
    args = parser.parse_args()
    print("shape\tparameters\tcheckpoint_GB\tevery\tstep\troute\tseconds\tpeak_rss_MiB")
    for shape, depth in ((s, d) for s in args.shapes for d in args.depths):
        if depth is not None and shape not in SHAPES:
            raise SystemExit(f"--depths: {shape} is not written (its real weights are used)")
        folder = args.folder / (shape if depth is None else f"{shape}-{depth}layers")
        folder.mkdir(parents=True, exist_ok=True)
        if shape == "minilm":
            from attnscope.api import MINILM
            from attnscope.model.sources import resolve_folder

            model = resolve_folder("minilm", MINILM, "", Path())[0]
            vocab, parameters, size = (
                30522,
                22_713_728,
                (model / "model.safetensors").stat().st_size,
            )
        else:
            model = folder
            if not (folder / "model.safetensors.index.json").is_file():
                started = time.perf_counter()
                write_checkpoint(folder, shape, depth)
                print(f"# wrote {folder} in {time.perf_counter() - started:.0f} s", flush=True)
            index = json.loads((folder / "model.safetensors.index.json").read_text())
            vocab, size = SHAPES[shape]["vocab_size"], index["metadata"]["total_size"]
            parameters = size // 2  # bfloat16
        n_layers = SHAPES[shape].get("num_hidden_layers", 12) if shape in SHAPES else 6
        n_layers = depth or n_layers
        encoded = folder / "encoded.h5"
        write_corpus(encoded, vocab, args.sequences, args.length)
        routes = ["streamed"] + (["whole"] if shape in args.whole else [])
        for every, route in ((every, route) for every in args.every for route in routes):
            layers = "all" if every == 1 else list(range(every, n_layers + 1, every))
            for step in ["extract", *(s for s in args.steps if s != "extract")]:
                if step == "propagate" and layers != "all":
                    continue  # the whole depth: not made for a subset of layers
                timed = run(model, encoded, step, route, args.device, args.compute_dtype, layers)
                name = shape if depth is None else f"{shape}-{depth}layers"
                row = [name, f"{parameters:,}", f"{size / 1e9:.1f}", str(every), step, route]
                print("\t".join([*row, f"{timed[0]:.1f}", f"{timed[1]:.0f}"]), flush=True)
                if step == "extract":
                    stored = (folder / f"states-{route}.h5").stat().st_size
                    print(f"# store: {stored / 1e6:.1f} MB, layers {layers}", flush=True)
            for stored in folder.glob(f"states-{route}.h5*"):
                stored.unlink()


if __name__ == "__main__":
    main()
