"""Layer shards: a per-layer analysis split into jobs that each read a block of layers.

With `shards: S` (S > 1) a sharded family runs S jobs per model and corpus (rule
`<family>_shard`, wildcard `shard` = 1..S). Shard k analyses the k-th of S consecutive,
nearly equal blocks of the analysed layers (every layer, or the `layers:` setting's;
`shard_layers`) and writes its accumulators (`save_part`)
and its layers' maps. The rule `collect_shards` moves them into one folder
(`<family>/shards/collected`, empty with one shard), and the family's own rule gathers them
from there: the accumulators `merged` (`core.streaming`: every statistic of a layer lives in
one shard, so the merge is exact) and the map datasets copied into the one maps file, so its
tables are those of one job. The gathering job reads that one folder whatever S is, and the
shards' files keep no Snakemake record once a run ends (`forget_shard_records`), so changing
`shards` after a finished run reruns nothing.
"""

from __future__ import annotations

import functools
import pickle
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

from attnscope.core.files import atomic_path


class ShardError(ValueError):
    """A shard setting the model cannot take (more shards than layers)."""


def shard_layers(layers: int | list[int], shards: int, shard: int) -> list[int]:
    """The layers (0-based) of shard `shard` (1-based) of `shards` among `layers` (0-based,
    in order; an int n: 0..n - 1): consecutive blocks whose sizes differ by at most one, the
    larger first."""
    layers = list(range(layers)) if isinstance(layers, int) else list(layers)
    if shards > len(layers):
        raise ShardError(f"config: shards is {shards}, but {len(layers)} layers are analysed")
    if not 1 <= shard <= shards:
        raise ShardError(f"shard {shard} is not one of 1..{shards}")
    size, extra = divmod(len(layers), shards)
    start = (shard - 1) * size + min(shard - 1, extra)
    return layers[start : start + size + (shard <= extra)]


def layers_text(layers: list[int]) -> str:
    """0-based layers as the 1-based numbers a log names."""
    return ", ".join(str(l + 1) for l in layers)


def save_part(path: str | Path, part) -> None:
    """Write a shard's accumulators (any picklable object) to `path`, atomically."""
    with atomic_path(path) as partial:
        Path(partial).write_bytes(pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL))


def collected(folder: str | Path, suffix: str) -> list[Path]:
    """The shards' files of one kind (`pkl` accumulators, `h5` maps) in a `collect_shards`
    folder, in shard order ([] with one shard)."""
    return sorted(Path(folder).glob(f"*.{suffix}"), key=lambda path: int(path.stem))


def gather_parts(paths: list[str | Path]):
    """The shards' accumulators merged into those of the whole model (shards in order)."""
    from attnscope.core.streaming import merged

    parts = [pickle.loads(Path(path).read_bytes()) for path in paths]
    return functools.reduce(merged, parts)


def gather_maps(paths: list[str | Path], out) -> None:
    """Copy every dataset of the shards' map files (HDF5, disjoint names) into the open HDF5
    file `out`, chunk by chunk, with the first file's attributes."""
    import h5py

    for k, path in enumerate(paths):
        with h5py.File(path, "r") as part:
            if k == 0:
                out.attrs.update(part.attrs)

            def copy(name, item, part=part):
                if isinstance(item, h5py.Dataset):
                    part.copy(item, out, name=name)

            part.visititems(copy)


def sharded_analysis(job, analyse: Callable):
    """Run the job of a sharded family (`job.Job`); return the result its
    tables are written from, or None for a shard's job (its part saved to `output.part`).

    - the gathering job (input `shards`, the `collect_shards` folder, with shards: S > 1):
      the shards' results `merged`, and their maps copied into `output.maps`;
    - otherwise `analyse(loaded, store, maps, layers)` with the model (`job.model()`), the
      hidden-state store, the open `output.maps` HDF5 file (None
      when the family writes none) and the 0-based layers to analyse: those the store was
      made for (`layers:`), or a shard's block of them; None (all) in the one job of
      shards: 1 with every layer. A shard's rule passes `shards` as a param, so that
      another shard count reruns the shards.
    """
    from attnscope.core.store import HiddenStates, atomic_h5

    log, output, folder = job.log, job.output, job.input.get("shards")
    parts = collected(folder, "pkl") if folder else []
    maps_path = output.get("maps")
    if parts:
        log.info("gathering %d layer shards", len(parts))
        if maps_path:
            with atomic_h5(maps_path) as maps:
                gather_maps(collected(folder, "h5"), maps)
        return gather_parts(parts)
    loaded = job.model()
    shard = job.wildcards.get("shard")
    opened = atomic_h5(maps_path) if maps_path else nullcontext()
    with HiddenStates(job.input.hidden_states) as store, opened as maps:
        log.info("%d sequences of at most %d pieces", store.n_sequences, store.length)
        layers = None if len(store.layers) == store.n_layers else store.layers
        if shard:
            layers = shard_layers(store.layers, job.params.shards, int(shard))
        if layers is not None:
            part = f" (shard {shard})" if shard else ""
            log.info("analysing layers %s%s", layers_text(layers), part)
        result = analyse(loaded, store, maps, layers)
    if not shard:
        return result
    save_part(output.part, result)
    log.info("wrote %s", output.part)
    return None
