"""One loaded model, for the rules (`Job.model`) and the notebooks (`attnscope.load`) alike:
`open_model` loads the model a manifest describes, on the device it resolves once."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from attnscope.architectures import (
    ModelLayer,
    architecture,
    canonical_weights,
    load_model,
    prediction_head,
)
from attnscope.core.canonical import CanonicalModel, PredictionHead
from attnscope.model.devices import check_compute_dtype, pick_device
from attnscope.model.sources import (
    check_model_unchanged,
    check_store_weights,
    read_manifest,
    read_model_config,
    require_tokenizer,
)


@dataclass
class LoadedModel:
    """A loaded model, as the rules and the notebooks read it: its manifest (`sources.
    build_manifest`; the notebooks' holds name, path, lm_head, model_type and config), the
    device it runs on (resolved once, by `open_model` or `attnscope.load`), the `transformers`
    module (eager attention, eval mode), its canonical weights, its language-model head when
    asked for and the model has one, and its tokenizer (read when first used).

    The loading route (`route`) is this class's business. It offers the route's primitives:
    a forward per batch (`module`, whole-model) or per layer (`extract_states`), layer handles
    (`layer`: the canonical layer and the module's attention output), every layer's blocks
    (`layer_blocks`), the reference logits; it holds no analysis family's logic."""

    manifest: dict
    device: str
    module: object
    route: str = "whole-model"  # or layer-streamed (`layer_stream.loading_route`)
    head: PredictionHead | None = None
    canonical: CanonicalModel | None = None  # `weights`: given when streamed, else made on use

    @property
    def weights(self) -> CanonicalModel:
        """The canonical weights: on the layer-streamed route each layer read when first used;
        on the whole-model route copied from the module when first asked for (a job that runs
        the module alone, the gradients' backward, holds no second copy)."""
        if self.canonical is None:
            self.canonical = canonical_weights(self.module)
        return self.canonical

    @property
    def outline(self) -> list:
        """Every layer's shapes and settings (`CanonicalModel.outline`), no matrix read on the
        layer-streamed route."""
        return self.weights.outline

    @property
    def path(self) -> Path:
        """The model's folder."""
        return Path(self.manifest["path"])

    @property
    def lm_head(self) -> str | None:
        """The kind of the loaded language-model head ("masked", "causal"), None without one."""
        return self.manifest.get("lm_head") if self.head is not None else None

    @property
    def max_positions(self) -> int:
        """The longest input the model takes, in pieces (`Architecture.max_positions`)."""
        config = self.manifest["config"]
        return architecture(config.get("model_type")).max_positions(config)

    @cached_property
    def tokenizer(self):
        """The model's tokenizer (`transformers.AutoTokenizer`), read when first used."""
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.path)

    def tokens(self, ids) -> list[str]:
        """Readable pieces of token ids (as the pages show them)."""
        from attnscope.core.tokens import piece_labels

        return piece_labels(self.tokenizer, ids)

    def layer(self, index: int) -> ModelLayer:
        """The handle of layer `index` (0-based): its canonical weights and the module's own
        attention output, the layer's module made resident before it runs (`ModelLayer`)."""
        return ModelLayer(self.module, self.weights, index)

    @property
    def reference_logits(self):
        """The logits of a batch that the prediction attribution is checked against
        (`maps.prediction.ReferenceLogits`): the module's own forward on the whole-model
        route, the head on the stored last state on the layer-streamed route (no module in
        memory)."""
        from functools import partial

        from attnscope.maps.prediction import model_logits, stored_logits

        if self.route == "layer-streamed":
            return partial(stored_logits, self.head, self.weights)
        return partial(model_logits, self.module)

    def extract_states(self, encoded_path, out_path, settings, attrs=None, log=None) -> dict:
        """Store the hidden states of an encoded corpus at `out_path`, the same file on either
        route: a whole-model forward per batch, or one layer over every batch at a time
        (`extract.extract`, `extract.extract_streamed`; `settings`: an `ExtractSettings`, its
        device replaced by the model's)."""
        from dataclasses import replace

        from attnscope.model import extract

        settings = replace(settings, device=self.device)
        if self.route == "layer-streamed":
            return extract.extract_streamed(
                self.manifest["path"], encoded_path, out_path, settings, attrs, log
            )
        return extract.extract(self.module, encoded_path, out_path, settings, attrs, log)

    def layer_blocks(
        self, store, batch_size: int, block, columns, scratch_folder, limit=None, log=None
    ):
        """Each batch's `block(batch, layer)` [r, w_k] of every layer, stacked: [L * r, w_k]
        float32 on the device, batch after batch (`layer_walks`; `columns`: where each batch's
        w_k columns start, [batches + 1]). On the whole-model route the layers of one batch are
        walked together (`layer_walks.by_batch`); on the layer-streamed route each layer over
        every batch (one layer's weights in memory), the blocks spooled to a float32 scratch
        file under `scratch_folder` and read back batch by batch (`layer_walks.by_layer`).
        The spool is the streamed route's alone: on the whole model it would cost disk (4.7
        GB for MiniLM's 992 x 128 corpus in the JS distances) and time, and change nothing."""
        from attnscope.model import layer_walks

        layers, batches = self.weights.layers, layer_walks.Batches(batch_size, self.device, limit)
        if self.route == "layer-streamed":
            return layer_walks.by_layer(store, layers, batches, block, columns, scratch_folder, log)
        return layer_walks.by_batch(store, layers, batches, block)

    def prediction(self, tokenizer, contrast: list[str], setting: str = "analyses.mixing.contrast"):
        """What the prediction attribution needs (`maps.prediction.Prediction.of`): the head,
        the mask token, the `contrast` pair and the `reference_logits`."""
        from attnscope.maps.prediction import Prediction

        return Prediction.of(
            self.head, self.manifest, tokenizer, contrast, self.reference_logits, setting
        )


def open_model(
    manifest_path: str | Path,
    device_setting: str = "cpu",
    log=None,
    hidden_states: str | Path | None = None,
    with_head: bool = False,
    loading: str = "whole-model",
    dtype: str = "float32",
) -> LoadedModel:
    """Load the model a manifest describes (eager attention, eval mode) on the resolved device,
    with its language-model head when `with_head` and the manifest's `lm_head` names one.

    `dtype`: the weights' type on the whole-model route (extraction's `compute_dtype`,
    checked against the device), also the size of a weight in the `auto` route's choice.
    `loading` (the setting: auto, whole-model, layer-streamed; `layer_stream.loading_route`): on the
    layer-streamed route the module is on the meta device but for the layers in use, and the
    canonical weights read each layer when it is first used (`streamed_weights`); the head
    (`LoadedModel.head`) is then read alone (`streamed_head`).

    Refuses (ModelChangedError) model files that differ from the manifest, and, given the
    `hidden_states` store the job reads, states made with other weights than the manifest's.
    """
    from attnscope.model.layer_stream import loading_route

    manifest = read_manifest(manifest_path)
    check_model_unchanged(manifest, manifest_path)
    if hidden_states is not None:
        check_store_weights(hidden_states, manifest)
    device = pick_device(device_setting)
    check_compute_dtype(dtype, device)
    route = loading_route(loading, manifest["path"], device, 4 if dtype == "float32" else 2)
    if log is not None:
        log.info("model %s on %s, loading route: %s", manifest["name"], device, route)
    head_kind = manifest.get("lm_head") if with_head else None
    if route == "layer-streamed":
        from attnscope.model.allocator import release_freed_memory
        from attnscope.model.streamed_weights import streamed_head, streamed_model

        release_freed_memory()
        model, weights = streamed_model(manifest["path"], device)
        head = streamed_head(manifest["path"], head_kind, device) if head_kind else None
        return LoadedModel(manifest, device, model, route, head, weights)
    model = load_model(manifest["path"], device, head=head_kind, dtype=dtype)
    head = prediction_head(model) if head_kind else None
    return LoadedModel(manifest, device, model, head=head)


def open_folder(name: str, folder: Path, device: str = "cpu", head: bool = True) -> LoadedModel:
    """Load the model in a local `folder` (config.json, weights, tokenizer) on `device` (a
    resolved one: `pick_device`), whole, with its language-model head where `head` and the
    checkpoint has one: the notebooks' route (`attnscope.load`), without a manifest file."""
    from attnscope.architectures import lm_head_kind

    require_tokenizer(name, folder)
    kind = lm_head_kind(str(folder)) if head else None
    config = read_model_config(name, folder)
    architecture(config.get("model_type"), f"model {name!r}")  # refused before loading
    module = load_model(str(folder), device, head=kind)
    manifest = {"name": name, "path": str(folder), "lm_head": kind, "config": config,
                "model_type": config.get("model_type")}  # fmt: skip
    return LoadedModel(manifest, device, module, head=prediction_head(module) if kind else None)


def as_loaded(module, weights: CanonicalModel | None = None, device: str = "cpu") -> LoadedModel:
    """A `transformers` module already in memory as a loaded model (tests, benchmarks, tools):
    its canonical `weights` given (e.g. layer-streamed ones: `streamed_weights.streamed_model`)
    or made on use; no head, no manifest file (its name and path are empty)."""
    config = module.config
    manifest = {"name": config.model_type, "path": "", "lm_head": None,
                "config": config.to_dict(), "model_type": config.model_type}  # fmt: skip
    return LoadedModel(manifest, device, module, canonical=weights)
