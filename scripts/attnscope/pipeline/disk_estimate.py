"""The size of what a run will write, estimated before any job and checked against the disk.

Per model and corpus: hidden_states.h5, (n_layers + 1) states of [N, length, d] in the
configured `dtype` (chunks past a batch's longest sequence are not stored, so short
sequences take less; a chunk that does not divide `max_length` can add its overhang, which
extraction counts when it checks the disk again), and each family's per-pair map files
(`Family.map_bytes`, exact). With `shards: S` > 1, each sharded family's S layer shards'
files too, which lie beside the gathered maps until the gathering job ends: `{shard}.h5`, its
layers' share of the maps (exact), and `{shard}.pkl`, its accumulators (`Family.part_bytes`,
at most, and `PART_ALLOWANCE` for the small tables and pickle framing); they count as written
once the family's first corpus table, which the gathering job writes, exists. Tables,
figures and views are small beside them and left out.
A GGUF model still to dequantise adds its float32 folder (`resources/models/<name>`, 4 bytes
per element of the GGUF's tensors: 4-8 times the GGUF), on the same disk as the results.
Files already in the results folder count as written, and with the run's jobs known
(`needed`) only the files they make count: an encode-only target needs no room for states.
N is the corpus's `n_sequences` (an upper bound), at most what its data files can yield
whatever the tokenizer (`CorpusKind.most_sequences`: an unreachable n_sequences is sized by
what the data holds, and said so), the number of `texts`, or the sequences of its encoded.h5
once encoded; a corpus of all its data (`n_sequences: 0`) is sized when it is encoded
(extraction checks the disk again then, with the exact size).
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path

from attnscope.analyses.family import Family, ModelShape
from attnscope.architectures import architecture
from attnscope.core.layer_selection import selected_layers, stored_states, whole_model
from attnscope.data.corpora import KINDS as CORPUS_KINDS
from attnscope.data.corpus_settings import corpus_for_model, cut_to_context
from attnscope.model.disk_space import (
    DiskSpaceError,
    free_bytes,
    hidden_state_bytes,
    readable,
)
from attnscope.model.sources import local_model_config, pending_dequantisation
from attnscope.pipeline.shards import shard_layers

PART_ALLOWANCE = 2**16  # bytes per `{shard}.pkl` beyond its arrays: small tables, pickle framing


@dataclass(frozen=True)
class PlannedFile:
    path: Path
    size: int | None  # bytes; None: the corpus is sized once encoded


def corpus_sequences(
    settings: dict, encoded: Path, data: Path = Path("resources/data"), mirror: str = ""
) -> int | None:
    """N of a corpus: its encoded.h5's sequences once written, else `n_sequences` (when not 0;
    at most what its data can yield, `yield_bound`) or the number of `texts`; None when only
    encoding tells."""
    if encoded.is_file():
        try:
            import h5py  # not in a driver environment without the model packages
        except ImportError:
            return settings.get("n_sequences") or None
        with h5py.File(encoded, "r") as f:
            return f["input_ids"].shape[0]
    if settings["kind"] == "texts":
        return len(settings["texts"])
    n_sequences = settings.get("n_sequences") or None
    most = yield_bound(settings, data, mirror) if n_sequences else None
    return n_sequences if most is None else min(n_sequences, most)


def yield_bound(settings: dict, data: Path, mirror: str = "") -> int | None:
    """The most sequences corpus `settings` can yield from its data files (acquired under
    `data`, or in the `mirror` folder), whatever the tokenizer (`CorpusKind.most_sequences`);
    None where unknown (a kind without a bound, a data file not here yet)."""
    files = []
    for data_file in CORPUS_KINDS[settings["kind"]].data_files:
        places = [data / data_file.relpath] + ([Path(mirror) / data_file.relpath] if mirror else [])
        found = [str(path) for path in places if path.is_file()]
        if not found:
            return None
        files.append(found[0])
    return _kind_bound(settings["kind"], tuple(files), settings["max_length"])


@functools.lru_cache
def _kind_bound(kind: str, files: tuple[str, ...], max_length: int) -> int | None:
    try:  # the readers need the data packages (not in a bare driver environment)
        return CORPUS_KINDS[kind].most_sequences(list(files), {"max_length": max_length})
    except ImportError:
        return None


def shortfalls(config: dict, results: Path) -> list[str]:
    """One line per corpus (and model) whose `n_sequences` its data cannot fill: encoded with
    fewer sequences, or, not yet encoded, above what its data files can yield."""
    lines = []
    data = results.parent / "resources" / "data"
    for model in config["models"]:
        for corpus in config["corpora"]:
            settings = corpus_for_model(config, model, corpus)
            wanted = settings.get("n_sequences") or 0
            if not wanted or settings["kind"] == "texts":
                continue
            encoded = results / model / corpus / "encoded.h5"
            N = corpus_sequences(settings, encoded, data, config.get("mirror", ""))
            if N is None or N >= wanted:
                continue
            if encoded.is_file():
                lines.append(
                    f"corpus {corpus!r} for model {model!r}: {N} sequences encoded, fewer than "
                    f"its n_sequences {wanted} (its data holds no more of at most "
                    f"{settings['max_length']} pieces)"
                )
            else:
                lines.append(
                    f"corpus {corpus!r}: n_sequences {wanted}, but its data can yield at most "
                    f"{N} sequences (kind {settings['kind']}, max_length "
                    f"{settings['max_length']}): sized as {N}; lower n_sequences (0: all)"
                )
    return list(dict.fromkeys(lines))


def model_shape(model_config: dict, n_layers: int, d_model: int) -> ModelShape:
    """Layers, heads, head width and width of a model from its config.json."""
    n_heads = model_config.get("num_attention_heads") or model_config.get("n_head") or d_model
    d_head = model_config.get("head_dim") or d_model // n_heads
    return ModelShape(n_layers, n_heads, d_head, d_model)


def shard_file_sizes(
    family: Family, settings: dict, shape: ModelShape, layers: list[int], shards: int, N, length
) -> dict[str, int | None]:
    """{`<family>/shards/<k>.pkl` and `.h5`: bytes (None: N unknown)} of the `shards` layer
    shards of the 0-based `layers` of one corpus of N sequences of `length` pieces."""
    sizes = {}
    for k in range(1, shards + 1):
        block = shard_layers(layers, shards, k)
        part = family.part_bytes(settings, shape, N, length, len(block)) if N else None
        sizes[f"{family.name}/shards/{k}.pkl"] = part + PART_ALLOWANCE if N else None
        for file in family.shard_maps:
            maps = family.map_bytes(settings, len(block), N, length)[file] if N else None
            sizes[f"{family.name}/shards/{k}.h5"] = maps
    return sizes


def corpus_readers(config: dict, families: dict[str, Family]) -> dict[str, list[Family]]:
    """{corpus: the enabled families that read it}."""
    readers: dict[str, list[Family]] = {}
    for name, family in families.items():
        settings = config["analyses"][name]
        if settings.get("enabled", True):
            for corpus in family.corpora(settings):
                readers.setdefault(corpus, []).append(family)
    return readers


def planned_files(config: dict, families: dict[str, Family], results: Path) -> list[PlannedFile]:
    """The large files of every model with a local folder and every corpus an analysis reads
    (hub models still to fetch are sized when extraction runs)."""
    readers = corpus_readers(config, families)
    data = results.parent / "resources" / "data"
    planned = []
    for model, spec in config["models"].items():
        model_config = local_model_config(model, spec, config["mirror"])
        if model_config is None:
            continue
        if (pending := pending_dequantisation(model, spec, config["mirror"])) is not None:
            folder, size = pending  # built beside the folder, then renamed (a stale one too)
            planned.append(PlannedFile(folder.with_name(f"{folder.name}.*.partial"), size))
        anatomy = architecture(model_config["model_type"])
        n_layers, d_model = anatomy.dimensions(model_config)
        limit = anatomy.max_positions(model_config)
        layers = selected_layers(config.get("layers", "all"), n_layers, f"model {model!r}")
        every_layer = whole_model(config.get("layers"), n_layers)  # else no every_layer files
        for corpus, corpus_families in readers.items():
            settings = cut_to_context(corpus_for_model(config, model, corpus), limit)
            out = results / model / corpus
            encoded = out / "encoded.h5"
            N = corpus_sequences(settings, encoded, data, config.get("mirror", ""))
            length = settings["max_length"]
            sizes = {"hidden_states.h5": None}
            if N is not None:
                sizes["hidden_states.h5"] = hidden_state_bytes(
                    len(stored_states(layers, n_layers)), N, length, d_model, config["dtype"]
                )
            for family in corpus_families:
                family_settings = config["analyses"][family.name]
                shape = (family_settings, len(layers), N or 0, length)
                for file, size in family.map_bytes(*shape).items():
                    if every_layer or file not in family.every_layer:
                        sizes[f"{family.name}/{file}"] = size if N is not None else None
                gathered = out / family.name / family.tables["corpus"][0]
                shards = config.get("shards", 1)
                if shards > 1 and family.part_bytes is not None and not gathered.exists():
                    whole = model_shape(model_config, n_layers, d_model)
                    sizes |= shard_file_sizes(
                        family, family_settings, whole, layers, shards, N, length
                    )
            planned += [PlannedFile(out / file, size) for file, size in sizes.items()]
    return planned


def check_disk_space(
    config: dict,
    families: dict[str, Family],
    results: str | Path = "results",
    out=sys.stderr,
    needed: set[str] | None = None,
) -> int:
    """Print each corpus's shortfall (`shortfalls`) and the estimate of the files still to
    write, of those the run makes (`needed`: their paths as the jobs name them, e.g.
    results/m/wiki/hidden_states.h5; None: every one), and raise DiskSpaceError when the disk
    of `results` has less free space; returns the bytes still to write."""
    results = Path(results)
    for line in shortfalls(config, results):
        print(f"warning: {line}", file=out)
    planned = planned_files(config, families, results)
    if needed is not None:
        made = {Path(path).resolve() for path in needed}
        planned = [p for p in planned if p.path.resolve() in made]
    to_write = [p for p in planned if not p.path.exists()]
    total = sum(p.size or 0 for p in to_write)
    unsized = [str(p.path) for p in to_write if p.size is None]
    free = free_bytes(results)
    print(f"disk estimate: {readable(total)} still to write, {readable(free)} free", file=out)
    for planned in to_write:
        size = "sized when encoded" if planned.size is None else readable(planned.size)
        print(f"  {planned.path}: {size}", file=out)
    if total > free:
        shards = sum(p.size or 0 for p in to_write if p.path.suffix == ".pkl")
        raise DiskSpaceError(
            f"results folder {results}: the stores still to write need about {readable(total)}, "
            f"but its disk has {readable(free)} free (largest: "
            f"{max(to_write, key=lambda p: p.size or 0).path}). Free space, or shrink the run: "
            "fewer n_sequences, dtype: float16 or bfloat16, maps_dtype: float16"
            + (
                f"; the layer shards' accumulators ({{shard}}.pkl, {readable(shards)}) grow "
                "with shards (one per shard) and analyses.norms.spearman_sample_size (each "
                "norms shard's sample): fewer shards or a smaller sample"
                if shards
                else ""
            )
            + (f"; not yet sized: {', '.join(unsized)}" if unsized else "")
        )
    return total
