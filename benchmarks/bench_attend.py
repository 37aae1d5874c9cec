"""The attend family's cost per layer against the norms family's, on the same stored states,
and its peak memory against the number of sequences.

Random Llamas (float32, eager attention) with `--layers` layers at two shapes (cost is per
layer, but the attend family's grows with depth: layer l reads about 1 + (l - 1)(H + 1) + 1
components):
    smollm2   SmolLM2-135M's sizes (`bench_rotary.SMOLLM2`: width 576, 9 heads, 3 key-value
              heads, FF 1536)
    llama-1b  Llama-3.2-1B's sizes (width 2048, 32 heads, 8 key-value heads of 64, FF 8192,
              rope_theta 500000) with SmolLM2's vocabulary (the embedding matrix's size costs
              neither family anything per layer)
One encoded corpus of random pieces, n = `--length` (128), every position real
(`bench_scale.write_corpus`), its hidden states extracted once per shape
(`model.extract`).

Each measure runs in a fresh process that sets glibc's allocator as the rule's job does
(`allocator.keep_freed_memory`, and `allocator.release_freed_memory` on the layer-streamed route;
`--allocator release`: `allocator.release_freed_memory` on both routes; `--allocator default`:
glibc's defaults), loads the saved model (`streamed_model` on the layer-streamed route, as
`loading: layer-streamed` does; on the whole-model route `from_pretrained` maps the
safetensors file, so every weight is read once here to be resident before the baseline,
else the pages the pass first touches, the weights the canonical form shares with the
module and each sequence's embedding rows, count as the pass's) and opens the store, resets
the kernel's peak-RSS counter (5 to /proc/self/clear_refs resets VmHWM), reads VmRSS, runs one
family's `corpus_pass` and reads VmHWM: the peak is VmHWM - VmRSS, what the pass needed on
top of the model and its inputs; the time is the pass's wall time.
    time     both families over the first `--sequences` sequences (norms reads the whole
             store, so the store holds just those); seconds per layer and sequence, and
             attend / norms
    memory   the attend family over 1, 2, ... `--memory-sequences` sequences of one store
             (it holds one sequence's split at a time: the peak should stay flat)
    depth    with `--depths N M ..`: the attend family on the layer-streamed route over one
             sequence of a model of N, M, ... layers (one safetensors file each), and the
             peaks' ratio to the first depth's. One layer's weights are held whatever the
             depth, but the split of a sequence, [C, n, d] with C = 2 + L (H + 1) after L
             layers, and the pair sums of `statistics.LiftSums`, K x H x C x C per layer, grow
             with it by design; with `--window w` (`component_window`) C is bounded, and
             only the pair sums' count of layers (small) grows
    compare  with `--compare REV`: the attend family of this worktree (every key class, the
             token classes induction and duplicate included, the key side split along one
             residual dimension as along the massive ones, and groups.tsv made) against
             the one of revision REV (`git archive` of its scripts/ into the folder), on the
             same states over `--sequences` sequences: seconds per layer and sequence (wall
             and the process's CPU time, the steadier of the two on a loaded machine), peak,
             and the ratios now / REV

Run: .venv/bin/python benchmarks/bench_attend.py [--shapes smollm2 llama-1b] [--layers 4]
     [--sequences 2] [--memory-sequences 1 2 4] [--length 128] [--folder /tmp/bench-attend]
     [--depths 4 8] [--window 2] [--skip-time] [--allocator job|release|default]
     [--compare REV]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from bench_rotary import SMOLLM2  # noqa: E402
from bench_scale import write_corpus  # noqa: E402

SHAPES = {
    "smollm2": SMOLLM2,
    "llama-1b": dict(
        SMOLLM2,
        hidden_size=2048,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=64,
        intermediate_size=8192,
        rope_theta=500000.0,
    ),
}
BOUND = 1e-3  # the checks' relative bound (random float32 models)


def prepare(folder: Path, shape: str, layers: int, sequences: int, length: int) -> Path:
    """Save a random model of `shape` (safetensors, `folder / name(shape, layers)`) and extract
    the states of `sequences` random sequences; returns the states' path."""
    from transformers import LlamaConfig, LlamaModel

    from attnscope.model.extract import ExtractSettings, extract

    torch.manual_seed(0)
    config = LlamaConfig(num_hidden_layers=layers, attn_implementation="eager", **SHAPES[shape])
    model = LlamaModel(config).eval()
    model.save_pretrained(folder / name(shape, layers))
    encoded = folder / f"{shape}-{sequences}-encoded.h5"
    write_corpus(encoded, SHAPES[shape]["vocab_size"], sequences, length)
    states = folder / f"{name(shape, layers)}-{sequences}-states.h5"
    extract(model, encoded, states, ExtractSettings(batch_size=4))
    return states


def name(shape: str, layers: int) -> str:
    return f"{shape}-L{layers}"


def peak_kib() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in KiB."""
    lines = Path("/proc/self/status").read_text().splitlines()
    field = dict(line.split(":", 1) for line in lines)
    return int(field["VmRSS"].split()[0]), int(field["VmHWM"].split()[0])


def use_scripts(folder: str) -> None:
    """Import attnscope from `folder` (another revision's scripts/) from here on."""
    for loaded in [n for n in sys.modules if n == "attnscope" or n.startswith("attnscope.")]:
        del sys.modules[loaded]
    sys.path.insert(0, folder)


def child(family, model_folder: str, states: str, sequences: int, route, allocator, window):
    """One family's pass in this process; prints {"seconds", "peak_mib"}. `family` attend,
    norms, or circuits: attend with a direction split (dimension 0) and groups.tsv's table."""
    import h5py
    from transformers import AutoModel

    from attnscope.analyses.attend.corpus_pass import corpus_pass as attend
    from attnscope.analyses.attend.settings import AttendSettings
    from attnscope.analyses.norms.corpus_pass import corpus_pass as norms
    from attnscope.analyses.norms.settings import NormsSettings
    from attnscope.architectures import canonical_weights
    from attnscope.core.store import HiddenStates
    from attnscope.model.allocator import keep_freed_memory, release_freed_memory
    from attnscope.model.loaded import as_loaded
    from attnscope.model.streamed_weights import streamed_model

    if allocator == "job":  # as `runlog.start` and `loaded.open_model` set it
        keep_freed_memory()
        if route == "layer-streamed":
            release_freed_memory()
    elif allocator == "release":
        release_freed_memory()
    if route == "layer-streamed":
        model, weights = streamed_model(model_folder, "cpu")
    else:
        model = AutoModel.from_pretrained(model_folder, attn_implementation="eager").eval()
        weights = canonical_weights(model)
        for parameter in model.parameters():  # memory-mapped: page them in before the baseline
            parameter.sum()
    with HiddenStates(states) as store, h5py.File(states + "-norms.h5", "w") as maps:
        Path("/proc/self/clear_refs").write_text("5")
        before = peak_kib()[0]
        start, cpu = time.perf_counter(), time.process_time()
        if family in ("attend", "circuits"):
            settings = AttendSettings(sequences, max_rel_residual=BOUND, component_window=window)
            if family == "attend":
                attend(store, as_loaded(model, weights), settings)
            else:
                from attnscope.analyses.attend.groups import groups_table

                sums, _ = attend(store, as_loaded(model, weights), settings, None, (0,))
                groups_table(sums, BOUND)
        else:
            settings = NormsSettings(
                4, spearman_sample_size=1000000, seed=0, max_rel_residual=BOUND
            )
            norms(store, as_loaded(model, weights), maps, settings)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    peak = (peak_kib()[1] - before) / 1024
    print(json.dumps({"seconds": seconds, "cpu_seconds": cpu, "peak_mib": peak}))


def measure(family, model_folder: Path, states: Path, sequences: int, route, allocator, window=0):
    command = [sys.executable, __file__, "--child", family, str(model_folder), str(states)]
    options = [str(sequences), "--route", route, "--allocator", allocator, "--window", str(window)]
    if isinstance(route, tuple):  # (route, another revision's scripts/)
        route, scripts = route
        options = [str(sequences), "--route", route, "--allocator", allocator]
        options += ["--window", str(window), "--scripts", scripts]
    done = subprocess.run([*command, *options], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--sequences", type=int, default=2)
    parser.add_argument("--memory-sequences", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--depths", type=int, nargs="*", default=[])
    parser.add_argument("--skip-time", action="store_true", help="no time rows")
    parser.add_argument("--allocator", choices=("job", "release", "default"), default="job")
    parser.add_argument("--window", type=int, default=0, help="component_window of the depths")
    parser.add_argument("--route", default="whole-model", help="the child's route")
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/bench-attend"))
    parser.add_argument("--child", nargs=4, metavar=("FAMILY", "MODEL", "STATES", "N"))
    parser.add_argument("--compare", metavar="REV", help="attend now against revision REV")
    parser.add_argument("--scripts", help="(child) import attnscope from this folder")
    args = parser.parse_args()
    if args.child:
        if args.scripts:
            use_scripts(args.scripts)
        family, model_folder, states, n = args.child
        return child(family, model_folder, states, int(n), args.route, args.allocator, args.window)
    args.folder.mkdir(parents=True, exist_ok=True)
    print(f"n = {args.length}, {args.layers} layers, {torch.get_num_threads()} threads, "
          f"allocator {args.allocator}")  # fmt: skip
    if args.compare:
        return compare(args)
    print("shape     family  sequences  s/layer/sequence  attend/norms  peak MiB")
    for shape in args.shapes:
        model = args.folder / name(shape, args.layers)
        if not args.skip_time:
            states = prepare(args.folder, shape, args.layers, args.sequences, args.length)
            timed = {
                f: measure(f, model, states, args.sequences, "whole-model", args.allocator)
                for f in ("norms", "attend")
            }
            per = {f: r["seconds"] / args.layers / args.sequences for f, r in timed.items()}
            for family, result in timed.items():
                ratio = f"{per['attend'] / per['norms']:.1f}" if family == "attend" else ""
                print(f"{shape:9} {family:7} {args.sequences:9d}  {per[family]:16.3f}  "
                      f"{ratio:>12}  {result['peak_mib']:8.0f}")  # fmt: skip
        if args.memory_sequences:
            most = max(args.memory_sequences)
            states = prepare(args.folder, shape, args.layers, most, args.length)
        for n in args.memory_sequences:
            result = measure("attend", model, states, n, "whole-model", args.allocator)
            per_layer = result["seconds"] / args.layers / n
            print(
                f"{shape:9} attend  {n:9d}  {per_layer:16.3f}  {'':>12}  {result['peak_mib']:8.0f}"
            )
        first = None
        for depth in args.depths:
            states = prepare(args.folder, shape, depth, 1, args.length)
            folder = args.folder / name(shape, depth)
            result = measure(
                "attend", folder, states, 1, "layer-streamed", args.allocator, args.window
            )
            first = first or result["peak_mib"]
            print(f"{shape:9} attend, layer-streamed, window {args.window}, {depth} layers: "
                  f"{result['seconds'] / depth:.3f} s/layer, peak {result['peak_mib']:.0f} MiB "
                  f"({result['peak_mib'] / first:.2f} x {args.depths[0]} layers')")  # fmt: skip


def compare(args) -> None:
    """`--compare REV`: the attend family now (circuits) against revision REV's."""
    old = args.folder / f"rev-{args.compare}"
    if not old.is_dir():
        old.mkdir(parents=True)
        root = Path(__file__).resolve().parents[1]
        archive = subprocess.run(
            ["git", "-C", str(root), "archive", args.compare, "scripts"],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
    print(
        f"shape     attend revision  s/layer/sequence  CPU s/layer/sequence  peak MiB  "
        f"ratio now / {args.compare} (wall, CPU)"
    )
    for shape in args.shapes:
        model = args.folder / name(shape, args.layers)
        states = prepare(args.folder, shape, args.layers, args.sequences, args.length)
        routes = {args.compare: ("whole-model", str(old / "scripts")), "now": "whole-model"}
        families = {args.compare: "attend", "now": "circuits"}
        found = {
            rev: measure(families[rev], model, states, args.sequences, route, args.allocator)
            for rev, route in routes.items()
        }
        count = args.layers * args.sequences
        timed = ("seconds", "cpu_seconds")
        per = {rev: {w: r[w] / count for w in timed} for rev, r in found.items()}
        for rev, result in found.items():
            ratio = ""
            if rev == "now":
                ratio = ", ".join(f"{v / per[args.compare][w]:.2f}" for w, v in per[rev].items())
            wall, cpu, peak = per[rev]["seconds"], per[rev]["cpu_seconds"], result["peak_mib"]
            print(f"{shape:9} {rev:16} {wall:16.3f}  {cpu:20.3f}  {peak:8.0f}  {ratio}")


if __name__ == "__main__":
    main()
