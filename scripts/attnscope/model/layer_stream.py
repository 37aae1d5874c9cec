"""A model run one layer at a time, with one layer's weights in memory.

`LayerStream` builds the model's own `transformers` module on the meta device (no memory),
loads its frame (position tables, norms, the rotary buffers: everything outside the layers
and the word embeddings; and every layer's vectors, its norm weights and biases, which are
small) and then one layer's matrices at a time, straight from the
checkpoint's safetensors files through the library's own loader (its renamings and weight
conversions included: Mixtral's per-expert tensors become one fused tensor). The word
embeddings are read by the rows a corpus uses only.

Every pass runs the model's own forward, so masks, positions and rotary angles are the
library's: the layers before the one being run are passed over, the running layer's input
is replaced by the stored state X_l (a forward pre-hook), and its output is taken by a
forward hook that stops the forward there. Peak memory is one layer's weights, the used
embedding rows and one batch's activations, whatever the depth.
"""

from __future__ import annotations

from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import torch

from attnscope.architectures import (
    StreamingUnavailableError,
    check_weight_names,
    checkpoint_files,
)


class _Stop(Exception):
    """Raised by a hook to end the forward pass with the tensor it holds."""

    def __init__(self, hidden: torch.Tensor):
        self.hidden = hidden


class _PassOver(torch.nn.Module):
    """Stands in for a layer before the running one: hands its input on unchanged, in the
    form the model's loop expects (a tensor, or a 1-tuple in BERT's and GPT-2's loops)."""

    def __init__(self, as_tuple: bool):
        super().__init__()
        self.as_tuple = as_tuple

    def forward(self, hidden_states, *args, **kwargs):
        return (hidden_states,) if self.as_tuple else hidden_states


def _layer_list(model, n_layers: int) -> tuple[str, torch.nn.ModuleList]:
    """(path, module) of the model's list of layers: its one outermost ModuleList of n_layers
    entries (lists inside a layer, such as StableLM's per-head norms, are not it)."""
    lists = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, torch.nn.ModuleList) and len(module) == n_layers
    ]
    found = [(n, m) for n, m in lists if not any(n.startswith(f"{o}.") for o, _ in lists)]
    if len(found) != 1:
        raise StreamingUnavailableError(
            f"cannot tell the layer list of {type(model).__name__} "
            f"({[name for name, _ in found]} have {n_layers} entries)"
        )
    return found[0]


class LayerStream:
    """The bare model of a checkpoint folder, run layer by layer.

    `embedded(inputs)` gives X_0 [B, n, d] once `load_embedding_rows(ids)` has read the rows
    of every token id the corpus uses; `layer(l, inputs, X)` gives X_{l+1} from X_l [B, n, d].
    Call `load(l)` before layer l's passes and `unload(l)` after them; `inputs` are the
    forward's keyword arguments (input_ids, attention_mask, token_type_ids where used).
    `attention`: the attention implementation (SDPA where the model has it, else eager).
    """

    def __init__(
        self, folder: str | Path, device: str = "cpu", dtype=torch.float32, attention: str = "sdpa"
    ):
        from transformers import AutoConfig, AutoModel
        from transformers.utils import logging

        logging.disable_progress_bar()
        self.folder, self.device, self.dtype = Path(folder), device, dtype
        self.files = checkpoint_files(folder)
        self.config = AutoConfig.from_pretrained(folder)
        with torch.device("meta"):
            try:
                model = AutoModel.from_config(
                    self.config, attn_implementation=attention, dtype=dtype
                )
            except (ValueError, ImportError):  # a model without SDPA support
                model = AutoModel.from_config(self.config, attn_implementation="eager", dtype=dtype)
        self.model = model.eval()
        self.n_layers = self.config.num_hidden_layers
        self.layers_path, self.layer_list = _layer_list(model, self.n_layers)
        self.blocks = list(self.layer_list)  # the real layer modules, on meta until loaded
        self.prefix = f"{model.base_model_prefix}." if model.base_model_prefix else ""
        embedding = model.get_input_embeddings()
        self.embedding_name = next(n for n, p in model.named_parameters() if p is embedding.weight)
        self.as_tuple: bool | None = None  # whether layers return tuples, seen in layer 0's pass
        self.check_names(AutoModel)  # a layer lacking or beyond config.json's count
        self._load_frame()

    # ---- reading the checkpoint ---------------------------------------------------------
    def _module_name(self, key: str) -> str:
        """A checkpoint tensor name without the task model's prefix (`model.`, `bert.`...)."""
        return key[len(self.prefix) :] if self.prefix and key.startswith(self.prefix) else key

    def _checkpoint_key(self, name: str) -> str:
        for key in (name, self.prefix + name):
            if key in self.files:
                return key
        raise StreamingUnavailableError(f"{self.folder}: no tensor {name!r} in the checkpoint")

    @contextmanager
    def _slices(self, keys: list[str]):
        """{key: lazy safetensors slice}; the files are closed (unmapped) on exit, so that the
        pages read do not stay in the process's memory."""
        from safetensors import safe_open

        with ExitStack() as files:
            opened = {}
            for path in sorted({self.files[k] for k in keys}):
                opened[path] = files.enter_context(safe_open(path, "pt"))
            yield {key: opened[self.files[key]].get_slice(key) for key in keys}

    def _load(self, keys: list[str], model: torch.nn.Module | None = None) -> None:
        """Load checkpoint tensors into the meta model (or another `model` on the meta
        device) with the library's loader (renamings and weight conversions), in self.dtype
        on self.device."""
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import convert_and_load_state_dict_in_model
        from transformers.modeling_utils import LoadStateDictConfig

        model = self.model if model is None else model
        setting = LoadStateDictConfig(
            weight_mapping=get_model_conversion_mapping(model),
            dtype=self.dtype,
            device_map={"": torch.device(self.device)},
        )
        with self._slices(keys) as state:
            convert_and_load_state_dict_in_model(model, state, setting)

    def check_names(self, task) -> None:
        """Refuse a checkpoint whose tensors are not those of `task`'s model (AutoModel,
        AutoModelForMaskedLM...): `check_checkpoint_names`."""
        check_checkpoint_names(self.folder, task)

    def head_model(self, kind: str) -> torch.nn.Module:
        """The model with its language-model head (`kind` masked or causal) on the meta
        device, with the head's tensors read and the word embeddings when the head shares
        them (tied): everything the logits need after the final norm."""
        from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

        task = {"masked": AutoModelForMaskedLM, "causal": AutoModelForCausalLM}[kind]
        self.check_names(task)
        with torch.device("meta"):
            model = task.from_config(self.config, attn_implementation="eager", dtype=self.dtype)
        # the head's tensors: neither the bare model's nor inside a layer (checkpoint names,
        # which the loader renames: GPT-NeoX's embed_out is the library's lm_head)
        bare, inside = set(self.model.state_dict()), f"{self.layers_path}."
        keys = [
            key
            for key in self.files
            if (name := self._module_name(key)) not in bare and not name.startswith(inside)
        ]
        output = model.get_output_embeddings()
        tied = output is not None and output.weight is model.get_input_embeddings().weight
        if tied:
            keys.append(self._checkpoint_key(self.embedding_name))
        self._load(keys, model)
        if tied:
            model.tie_weights()
        return model.eval()

    def _load_frame(self) -> None:
        """Everything outside the layers and the word embeddings: tensors the bare model has
        (a task head's are left out), then the buffers `transformers` computes at init."""
        inside = f"{self.layers_path}."
        names = set(self.model.state_dict())
        keys = [
            key
            for key in self.files
            if (name := self._module_name(key)) in names
            and not name.startswith(inside)
            and name != self.embedding_name
        ]
        inside_keys = [k for k in self.files if self._module_name(k).startswith(inside)]
        with self._slices(inside_keys) as state:
            self.vector_keys = {k for k in inside_keys if len(state[k].get_shape()) == 1}
        self._load(keys + sorted(self.vector_keys))
        for module in self.model.modules():
            meta = [n for n, b in module.named_buffers(recurse=False) if b.device.type == "meta"]
            for name in meta:
                buffer = getattr(module, name)
                setattr(module, name, torch.empty_like(buffer, device=self.device))
            if meta:
                self.model._init_weights(module)
        # Tensors a checkpoint may lack stay on meta: those after the layers (BERT's pooler in
        # a masked-LM checkpoint) are never run; `_run` names any that a pass reaches.
        self.absent = [
            n
            for n, p in self.model.named_parameters()
            if p.device.type == "meta" and not n.startswith(inside) and n != self.embedding_name
        ]

    def load(self, layer: int) -> None:
        """Read layer `layer`'s matrices (and only those: its vectors are held) into its
        module."""
        inside = f"{self.layers_path}.{layer}."
        keys = [k for k in self.files if self._module_name(k).startswith(inside)]
        self._load([k for k in keys if k not in self.vector_keys])
        missing = [n for n, p in self.blocks[layer].named_parameters() if p.device.type == "meta"]
        if missing:
            raise StreamingUnavailableError(
                f"{self.folder}: layer {layer} lacks {missing} in the checkpoint"
            )

    def unload(self, layer: int) -> None:
        """Free layer `layer`'s matrices (back to the meta device); its vectors stay."""
        for module in self.blocks[layer].modules():
            for name, tensor in list(module.named_parameters(recurse=False)):
                if tensor.dim() > 1:
                    meta = torch.nn.Parameter(tensor.to("meta"), requires_grad=False)
                    setattr(module, name, meta)

    def embedding_rows(self, ids: np.ndarray) -> torch.Tensor:
        """The word-embedding rows of token ids `ids` [k], read from the checkpoint one row
        each, in self.dtype on self.device.  [k, d]"""
        key = self._checkpoint_key(self.embedding_name)
        with self._slices([key]) as state:
            rows = [state[key][int(i) : int(i) + 1] for i in np.asarray(ids).reshape(-1)]
        return torch.cat(rows).to(self.device, self.dtype)

    def embedding_shape(self) -> tuple[int, int]:
        """[V, d] of the word embeddings, from the checkpoint's header."""
        key = self._checkpoint_key(self.embedding_name)
        with self._slices([key]) as state:
            return tuple(state[key].get_shape())

    def load_embedding_rows(self, ids: np.ndarray) -> None:
        """Read the word-embedding rows of token ids `ids` only, and let the embedding module
        look token ids up in them."""
        ids = np.unique(ids)
        rows = self.embedding_rows(ids)
        module = self.model.get_input_embeddings()
        module.weight = torch.nn.Parameter(rows, requires_grad=False)
        lookup = torch.full((int(ids.max()) + 1,), -1, dtype=torch.long, device=self.device)
        lookup[torch.from_numpy(ids).to(self.device)] = torch.arange(len(ids), device=self.device)
        module.register_forward_pre_hook(lambda module, args: (lookup[args[0]], *args[1:]))

    # ---- passes -------------------------------------------------------------------------
    def _run(self, inputs: dict, until: int) -> torch.Tensor:
        """The model's forward up to layer `until`, whose hooks end it."""
        try:
            with torch.inference_mode():
                self.model(**inputs)
        except _Stop as stop:
            return stop.hidden
        except (NotImplementedError, RuntimeError) as error:
            if "meta" in str(error) and self.absent:
                raise StreamingUnavailableError(
                    f"{self.folder}: the forward needs {self.absent}, which the checkpoint lacks"
                ) from error
            raise
        raise RuntimeError(f"the forward pass did not reach layer {until}")

    def embedded(self, inputs: dict) -> torch.Tensor:
        """X_0: the input of layer 0 as the model's forward computes it.  [B, n, d]"""

        def stop(module, args, kwargs):
            raise _Stop(args[0] if args else kwargs["hidden_states"])

        hook = self.blocks[0].register_forward_pre_hook(stop, with_kwargs=True)
        try:
            return self._run(inputs, 0)
        finally:
            hook.remove()

    def layer(self, layer: int, inputs: dict, X: torch.Tensor) -> torch.Tensor:
        """X_{layer+1}: layer `layer`'s raw output from input X [B, n, d] (before any final
        norm), with the model's own mask and positions for `inputs`.  [B, n, d]"""
        if layer > 0 and self.as_tuple is None:
            raise RuntimeError("run layer 0's pass first (it tells the form layers return)")
        block = self.blocks[layer]

        def replace(module, args, kwargs):
            if args:
                return (X, *args[1:]), kwargs
            return args, {**kwargs, "hidden_states": X}

        def stop(module, args, output):
            self.as_tuple = isinstance(output, tuple)
            raise _Stop(output[0] if self.as_tuple else output)

        for j in range(self.n_layers):
            self.layer_list[j] = block if j == layer else _PassOver(bool(self.as_tuple))
        hooks = [
            block.register_forward_pre_hook(replace, with_kwargs=True),
            block.register_forward_hook(stop),
        ]
        embeds = torch.zeros(X.shape, dtype=X.dtype, device=X.device)  # replaced by X
        passed = {k: v for k, v in inputs.items() if k != "input_ids"}
        try:
            return self._run({**passed, "inputs_embeds": embeds}, layer)
        finally:
            for hook in hooks:
                hook.remove()
            for j in range(self.n_layers):
                self.layer_list[j] = self.blocks[j]


def loading_report(folder: str | Path, task) -> tuple:
    """(model, missing, unexpected): what `task.from_pretrained(folder)` (AutoModel,
    AutoModelForMaskedLM...) would report of a safetensors checkpoint, without reading a
    tensor: the library's loader run on the meta device with stand-ins of the checkpoint's
    shapes, then its tying and the names it ignores (as `from_pretrained` finishes). The
    model is built from a config of its own (`from_config` changes the config it is given)."""
    from safetensors import safe_open
    from transformers import AutoConfig
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import convert_and_load_state_dict_in_model
    from transformers.modeling_utils import LoadStateDictConfig
    from transformers.utils import logging

    logging.disable_progress_bar()  # nothing is loaded
    with torch.device("meta"):
        model = task.from_config(AutoConfig.from_pretrained(folder), attn_implementation="eager")
    by_file: dict[Path, list[str]] = {}
    for key, path in checkpoint_files(folder).items():
        by_file.setdefault(path, []).append(key)
    state = {}
    for path, keys in by_file.items():
        with safe_open(path, "pt") as f:
            state.update({k: torch.empty(f.get_slice(k).get_shape(), device="meta") for k in keys})
    setting = LoadStateDictConfig(
        weight_mapping=get_model_conversion_mapping(model), device_map={"": torch.device("meta")}
    )
    report, _ = convert_and_load_state_dict_in_model(model, state, setting)
    model.tie_weights(missing_keys=report.missing_keys, recompute_mapping=False)
    model._adjust_missing_and_unexpected_keys(report)
    return model, report.missing_keys, report.unexpected_keys


def check_checkpoint_names(folder: str | Path, task) -> None:
    """Refuse a safetensors checkpoint whose tensors are not those of `task`'s model (a layer
    lacking or beyond config.json's count), as the whole-model route does when it loads
    (`check_weight_names`), from the headers alone."""
    check_weight_names(*loading_report(folder, task), folder)


# ---- which route a model job takes --------------------------------------------------------
ROUTES = ("auto", "whole-model", "layer-streamed")


def weight_bytes(folder: str | Path, itemsize: int = 4) -> int:
    """The bytes a checkpoint's tensors take at `itemsize` bytes a value (4: float32), read
    from the safetensors headers."""
    from safetensors import safe_open

    total = 0
    by_file: dict[Path, list[str]] = {}
    for key, path in checkpoint_files(folder).items():
        by_file.setdefault(path, []).append(key)
    for path, keys in by_file.items():
        with safe_open(path, "pt") as f:
            total += sum(itemsize * int(np.prod(f.get_slice(k).get_shape())) for k in keys)
    return total


def free_memory(device: str) -> int:
    """Bytes free for a model on `device`: the GPU's free memory, or the host's available."""
    if device.startswith("cuda"):
        return torch.cuda.mem_get_info(torch.device(device))[0]
    import psutil

    return psutil.virtual_memory().available


def loading_route(setting: str, folder: str | Path, device: str, itemsize: int = 4) -> str:
    """The route of a job that reads a model: the `loading` setting, or with `auto` the
    layer-streamed route when the model's weights at `itemsize` bytes a value (4: float32,
    2: the 16-bit compute types of extraction) would take more than half the memory free on
    `device`, and the whole-model route otherwise (faster when the model fits: one forward
    per batch, no state read back). A checkpoint without safetensors files takes the
    whole-model route under `auto`."""
    if setting != "auto":
        return setting
    try:
        weights = weight_bytes(folder, itemsize)
    except StreamingUnavailableError:
        return "whole-model"
    return "layer-streamed" if weights > free_memory(device) / 2 else "whole-model"
