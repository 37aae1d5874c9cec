"""Registry of architectures, keyed by `config.model_type`.

Adding an architecture: a module here that defines `ARCHITECTURE` (see `base.Architecture`),
and its name in `ARCHITECTURES` below.
"""

from __future__ import annotations

import json
from pathlib import Path

from attnscope.architectures import bert, decoders, gpt2, neox
from attnscope.architectures.base import (
    Architecture,
    UnsupportedModelError,
    base_model,
    unembedding_input,
)
from attnscope.core.canonical import CanonicalLayer, CanonicalModel

ARCHITECTURES = (bert.ARCHITECTURE, gpt2.ARCHITECTURE, decoders.ARCHITECTURE, neox.ARCHITECTURE)
BY_MODEL_TYPE = {model_type: arch for arch in ARCHITECTURES for model_type in arch.model_types}
SUPPORTED_MODEL_TYPES = tuple(BY_MODEL_TYPE)

__all__ = [
    "Architecture",
    "MismatchedWeightsError",
    "StreamingUnavailableError",
    "UnsupportedModelError",
    "SUPPORTED_MODEL_TYPES",
    "architecture",
    "base_model",
    "canonical_layer",
    "canonical_weights",
    "check_weight_names",
    "checkpoint_files",
    "has_mlm_head",
    "lm_head_kind",
    "load_model",
    "prediction_head",
    "unembedding_input",
]


def architecture(model_type: str, what: str = "the model") -> Architecture:
    """The architecture of a `model_type`; UnsupportedModelError naming `what` otherwise."""
    try:
        return BY_MODEL_TYPE[model_type]
    except KeyError:
        raise UnsupportedModelError(
            f"{what} has model_type {model_type!r}; supported: {', '.join(SUPPORTED_MODEL_TYPES)}"
        ) from None


def canonical_weights(model) -> CanonicalModel:
    """Canonical weights of a loaded `transformers` model (any head)."""
    return architecture(model.config.model_type).canonical_weights(model)


def canonical_layer(model, index: int) -> CanonicalLayer:
    """Canonical weights of layer `index` (from 0) of a loaded model, alone."""
    return architecture(model.config.model_type).canonical_layer(model, index)


class ModelLayer:
    """Layer `index` (0-based) of a model as the analyses read it: `weights`, its canonical
    form, and `attention_output`, the module's own attention block, which every
    decomposition is checked against. On the layer-streamed route (`streamed_weights`) reading
    a layer's canonical form loads its module and unloads the layer read before; the handle
    loads its layer (`StreamedLayers.load`) before running the module, so its output is the
    layer's whatever was read since (a no-op where the layer is loaded). `LoadedModel.layer`
    hands these out."""

    def __init__(self, model, weights: CanonicalModel, index: int):
        self.model, self.index, self.layers = model, index, weights.layers
        self.weights: CanonicalLayer = weights.layers[index]
        self.architecture = architecture(model.config.model_type)

    def attention_output(self, X, mask):
        """The module's attention output for layer inputs X [B, n, d], mask [B, n].  [B, n, d]"""
        load = getattr(self.layers, "load", None)  # layers read on use (`StreamedLayers`)
        if load is not None:
            load(self.index)  # the module's layer, where another was read since
        return self.architecture.attention_output(self.model, self.index, X, mask)


def prediction_head(model):
    """The `PredictionHead` of a model loaded with its LM head (`load_model(head=...)`), or
    None for a bare model."""
    return architecture(model.config.model_type).prediction_head(model)


def load_model(path: str, device: str = "cpu", head: str | None = None, dtype: str = "float32"):
    """Load a model from a local folder with eager attention, in eval mode, its weights in
    `dtype` (extraction's `compute_dtype`; float32 for the analyses).

    `head`: None for the bare model; "masked" or "causal" to load that language-model head
    too (for the gradient analysis; `lm_head_kind` says which a checkpoint has).
    """
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

    architecture(AutoConfig.from_pretrained(path).model_type, f"model at {path}")
    loader = {None: AutoModel, "masked": AutoModelForMaskedLM, "causal": AutoModelForCausalLM}
    try:
        model, report = loader[head].from_pretrained(
            path, attn_implementation="eager", dtype=getattr(torch, dtype), output_loading_info=True
        )
    except Exception as error:  # safetensors, torch.load and transformers raise their own types
        raise OSError(f"cannot load the model weights {_weight_files(path)}: {error}") from error
    check_weight_names(model, report["missing_keys"], report["unexpected_keys"], path)
    return model.to(device).eval()


class MismatchedWeightsError(ValueError):
    """A checkpoint lacks tensors that the model runs, or holds tensors of the model that it
    does not have (a layer beyond config.json's count): `transformers` would fill the first
    at random and drop the second, without a word."""


def check_weight_names(model, missing, unexpected, path) -> None:
    """Refuse a checkpoint whose tensors are not those of `model` (loaded, or on the meta
    device). `missing`, `unexpected`: the loading report of `transformers` (its renamings
    applied; tied weights and the buffers it ignores already taken out).

    Allowed: tensors of a task head that the loaded class lacks (outside the bare model:
    BERT's cls.*, ELECTRA's generator_*, a decoder's lm_head loaded as a bare model) and those
    of the architecture's `unused_modules` (BERT's pooler). Any other missing tensor would run
    with random values; any other unexpected one (a layer beyond num_hidden_layers) is
    refused too. MismatchedWeightsError names a few of each and their number."""
    arch = architecture(model.config.model_type)
    base = base_model(model)
    prefix = f"{model.base_model_prefix}." if model.base_model_prefix else ""
    bare = {n.split(".")[0] for n in base.state_dict()} | {n for n, _ in base.named_children()}
    unused = set(arch.unused_modules)

    def module(name: str) -> str:  # the top-level module of the bare model a name falls in
        return (name[len(prefix) :] if prefix and name.startswith(prefix) else name).split(".")[0]

    missing = sorted(n for n in missing if module(n) not in unused)
    unexpected = sorted(n for n in unexpected if module(n) in bare - unused)
    if not missing and not unexpected:
        return
    problems = [
        f"{what} {_some(names)}"
        for what, names in (
            ("lacks tensors the model runs:", missing),
            ("holds tensors the model does not have:", unexpected),
        )
        if names
    ]
    raise MismatchedWeightsError(
        f"the checkpoint in {path} does not match its config.json "
        f"({model.config.num_hidden_layers} layers): it "
        f"{'; it '.join(problems)}. A truncated or mixed-up copy? Copy or download the model "
        "again, or correct config.json"
    )


def _some(names: list[str], shown: int = 4) -> str:
    """A few of `names` and their number, for messages."""
    more = f", ... ({len(names)} in all)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _weight_files(path: str) -> str:
    """The weight files of a model folder, for error messages, with the fix."""
    files = sorted(
        str(p) for p in Path(path).iterdir() if p.suffix in (".safetensors", ".bin")
    ) or [f"in {path}"]
    return f"{', '.join(files)} (damaged or truncated? delete the folder and rerun acquire_model)"


SAFETENSORS_INDEX = "model.safetensors.index.json"


class StreamingUnavailableError(ValueError):
    """A checkpoint the layer-streamed route cannot read (no safetensors files)."""


def checkpoint_files(folder: str | Path) -> dict[str, Path]:
    """{tensor name: safetensors file} of a model folder, single or sharded."""
    from safetensors import safe_open

    folder = Path(folder)
    index = folder / SAFETENSORS_INDEX
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return {name: folder / file for name, file in weight_map.items()}
    single = folder / "model.safetensors"
    if not single.is_file():
        raise StreamingUnavailableError(
            f"{folder} has no safetensors weights (model.safetensors or {SAFETENSORS_INDEX}); "
            "the layer-streamed route reads safetensors only: set loading: whole-model"
        )
    with safe_open(single, "pt") as f:
        return {name: single for name in f.keys()}


def _weight_names(path: str) -> set[str]:
    """The tensor names a checkpoint stores (single, sharded or pickled)."""
    folder = Path(path)
    try:
        return set(checkpoint_files(folder))
    except StreamingUnavailableError:  # no safetensors: a pickle, or no weights at all
        pass
    except Exception as error:
        raise OSError(f"cannot read {_weight_files(path)}: {error}") from error
    if (folder / "pytorch_model.bin").exists():
        import torch

        return set(torch.load(folder / "pytorch_model.bin", map_location="cpu"))
    return set()


def has_mlm_head(path: str) -> bool:
    """Whether the checkpoint in `path` stores masked-LM head weights for its architecture."""
    from transformers import AutoConfig

    prefixes = architecture(AutoConfig.from_pretrained(path).model_type).mlm_head_prefixes
    return bool(prefixes) and any(name.startswith(prefixes) for name in _weight_names(path))


def lm_head_kind(path: str) -> str | None:
    """ "masked" (a masked-LM head is stored), "causal" (a causal LM whose head is stored, or
    tied to its word embeddings, as GPT-2's and Gemma's are), or None."""
    from transformers import AutoConfig

    if has_mlm_head(path):
        return "masked"
    config = AutoConfig.from_pretrained(path)
    prefixes = architecture(config.model_type).causal_lm_prefixes
    if not prefixes:
        return None
    tied = bool(getattr(config, "tie_word_embeddings", False))
    if tied or any(name.startswith(prefixes) for name in _weight_names(path)):
        return "causal"
    return None
