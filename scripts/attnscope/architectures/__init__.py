"""Registry of architecture families, keyed by `config.model_type`.

Adding a family: a module here that defines `ARCHITECTURE` (see `base.Architecture`), and
its name in `FAMILIES` below.
"""

from __future__ import annotations

import json
from pathlib import Path

from attnscope.architectures import bert, decoders, gpt2, neox
from attnscope.architectures.base import Architecture, UnsupportedModelError, base_model
from attnscope.core.canonical import CanonicalModel

FAMILIES = (bert.ARCHITECTURE, gpt2.ARCHITECTURE, decoders.ARCHITECTURE, neox.ARCHITECTURE)
BY_MODEL_TYPE = {model_type: family for family in FAMILIES for model_type in family.model_types}
SUPPORTED_MODEL_TYPES = tuple(BY_MODEL_TYPE)

__all__ = [
    "Architecture",
    "UnsupportedModelError",
    "SUPPORTED_MODEL_TYPES",
    "architecture",
    "base_model",
    "canonical_weights",
    "has_mlm_head",
    "load_model",
]


def architecture(model_type: str, what: str = "the model") -> Architecture:
    """The family of a `model_type`; UnsupportedModelError naming `what` otherwise."""
    try:
        return BY_MODEL_TYPE[model_type]
    except KeyError:
        raise UnsupportedModelError(
            f"{what} has model_type {model_type!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        ) from None


def canonical_weights(model) -> CanonicalModel:
    """Canonical weights of a loaded `transformers` model (any head)."""
    return architecture(model.config.model_type).canonical_weights(model)


def load_model(path: str, device: str = "cpu", with_lm_head: bool = False):
    """Load a model from a local folder with eager attention, in eval mode.

    `with_lm_head`: load the masked-LM head too (for gradient analyses); returns None
    when the checkpoint has none.
    """
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM

    architecture(AutoConfig.from_pretrained(path).model_type, f"model at {path}")
    if with_lm_head and not has_mlm_head(path):
        return None
    loader = AutoModelForMaskedLM if with_lm_head else AutoModel
    try:
        model = loader.from_pretrained(path, attn_implementation="eager")
    except Exception as error:  # safetensors, torch.load and transformers raise their own types
        raise OSError(f"cannot load the model weights {_weight_files(path)}: {error}") from error
    return model.to(device).eval()


def _weight_files(path: str) -> str:
    """The weight files of a model folder, for error messages, with the fix."""
    files = sorted(
        str(p) for p in Path(path).iterdir() if p.suffix in (".safetensors", ".bin")
    ) or [f"in {path}"]
    return f"{', '.join(files)} (damaged or truncated? delete the folder and rerun acquire_model)"


def has_mlm_head(path: str) -> bool:
    """Whether the checkpoint in `path` stores masked-LM head weights for its family."""
    from safetensors import safe_open
    from transformers import AutoConfig

    prefixes = architecture(AutoConfig.from_pretrained(path).model_type).mlm_head_prefixes
    folder = Path(path)
    names: set[str] = set()
    index = folder / "model.safetensors.index.json"
    if index.exists():
        names = set(json.loads(index.read_text())["weight_map"])
    elif (folder / "model.safetensors").exists():
        try:
            with safe_open(folder / "model.safetensors", "pt") as f:
                names = set(f.keys())
        except Exception as error:
            raise OSError(f"cannot read {_weight_files(path)}: {error}") from error
    elif (folder / "pytorch_model.bin").exists():
        import torch

        names = set(torch.load(folder / "pytorch_model.bin", map_location="cpu"))
    return bool(prefixes) and any(name.startswith(prefixes) for name in names)
