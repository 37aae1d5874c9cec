"""Cross-field checks of the configuration that the schema cannot express.

They run when the workflow is parsed, before any job: a bad value stops the run with a
message naming the key, and nothing is computed or overwritten.
"""

from __future__ import annotations

from attnscope.architectures import StreamingUnavailableError, architecture, checkpoint_files
from attnscope.core.layer_selection import LayerSelectionError, selected_layers
from attnscope.data.corpora import KINDS as CORPUS_KINDS
from attnscope.pipeline.models import local_model_folder, read_model_config, require_tokenizer
from attnscope.pipeline.outputs import Family


class ConfigError(ValueError):
    """A configuration value contradicts another one."""


def check_config(config: dict, families: dict[str, Family]) -> None:
    """Raise ConfigError for the first inconsistency found (after schema validation)."""
    corpora = config["corpora"]
    for name, settings in corpora.items():
        check_own_settings(name, settings)
    for name, family in families.items():
        settings = config["analyses"][name]
        if not settings.get("enabled", True):
            continue
        key = "corpora" if "corpora" in settings else "corpus"
        for corpus in family.corpora(settings):
            if corpus not in corpora:
                raise ConfigError(
                    f"config: analyses.{name}.{key} names corpus {corpus!r}, which is not "
                    f"defined under corpora: (defined: {', '.join(corpora)})"
                )
        for key, kinds in family.corpus_kinds.items():
            corpus = settings.get(key)
            if corpus in corpora and corpora[corpus]["kind"] not in kinds:
                raise ConfigError(
                    f"config: analyses.{name}.{key} names corpus {corpus!r} of kind "
                    f"{corpora[corpus]['kind']!r}; it must be of kind {' or '.join(kinds)}"
                )
        for problem in family.problems(settings):
            raise ConfigError(f"config: analyses.{name}: {problem}")
    used = {
        corpus
        for name, family in families.items()
        if config["analyses"][name].get("enabled", True)
        for corpus in family.corpora(config["analyses"][name])
    }
    check_models(config, sorted(c for c in used if corpora[c].get("mask_rate", 0) > 0))
    check_every_layer(config, families)


def check_every_layer(config: dict, families: dict[str, Family]) -> None:
    """With a subset of `layers`, no enabled family needs every layer for all its outputs."""
    if config.get("layers", "all") == "all":
        return
    for name, family in families.items():
        if config["analyses"][name].get("enabled", True) and family.needs_every_layer():
            raise ConfigError(
                f"config: layers selects layers {config['layers']}, but analyses.{name} needs "
                f"every layer; set analyses.{name}.enabled: false, or layers: all"
            )


def check_own_settings(name: str, settings: dict) -> None:
    """Corpus `name` gives its kind's own setting (clark: path, texts: texts), and no other
    kind's: a setting its kind never reads would be silently ignored."""
    for kind in CORPUS_KINDS.values():
        setting = kind.own_setting
        if setting is None:
            continue
        given = bool(settings.get(setting))
        if kind.name == settings["kind"] and not given:
            raise ConfigError(
                f"config: corpora.{name}.{setting} must be given (non-empty): it is required "
                f"for kind {kind.name}"
            )
        if kind.name != settings["kind"] and given:
            raise ConfigError(
                f"config: corpora.{name}.{setting} is read only by kind {kind.name}, not by "
                f"kind {settings['kind']}"
            )


def check_models(config: dict, masked_corpora: list[str] = ()) -> None:
    """Every model that is on this machine exists, has a supported architecture and a
    tokenizer, has safetensors weights if `loading` is layer-streamed, has every layer that
    `layers` names and at least `shards` of them, takes inputs as long
    as every corpus's max_length, has a mask token if an analysis reads a corpus with
    [MASK] (`masked_corpora`), and has `contrast`'s pieces (`check_contrast`) (hub models
    still to fetch: at acquisition, and the contrast at the job's start)."""
    for name, spec in config["models"].items():
        folder = local_model_folder(name, spec, config["mirror"])
        if folder is None:
            continue
        model_config = read_model_config(name, folder)
        family = architecture(model_config.get("model_type"), f"model {name!r}")
        require_tokenizer(name, folder)
        check_contrast(name, folder, config.get("analyses", {}).get("mixing", {}))
        if masked_corpora and not family.has_mask_token:
            raise ConfigError(
                f"config: model {name!r} ({model_config['model_type']}) has no mask token, but "
                f"corpora {', '.join(masked_corpora)} replace pieces by [MASK] (mask_rate > 0); "
                "give it corpora without mask_rate (e.g. analyses: {mixing: {corpora: [wiki]}})"
            )
        if config.get("loading") == "layer-streamed":
            try:
                checkpoint_files(folder)
            except StreamingUnavailableError as error:
                raise ConfigError(f"config: loading: model {name!r}: {error}") from None
        n_layers, _ = family.dimensions(model_config)
        try:
            layers = selected_layers(config.get("layers", "all"), n_layers, f"model {name!r}")
        except LayerSelectionError as error:
            raise ConfigError(str(error)) from None
        if config.get("shards", 1) > len(layers):
            analysed = "has" if len(layers) == n_layers else "is analysed at"
            raise ConfigError(
                f"config: shards is {config['shards']}, but model {name!r} {analysed} "
                f"{len(layers)} layers; use at most {len(layers)} shards"
            )
        check_position_heads(config, layers)
        limit = family.max_positions(model_config)
        for corpus, settings in config["corpora"].items():
            if settings["max_length"] > limit:
                raise ConfigError(
                    f"config: corpora.{corpus}.max_length is {settings['max_length']}, but "
                    f"model {name!r} takes at most {limit} positions; lower max_length"
                )


def check_contrast(name: str, folder, mixing: dict) -> None:
    """`analyses.mixing.contrast` is two different pieces of the vocabulary of model `name`
    (in `folder`) if it has an LM head (`core.tokens.contrast_ids`; a model without one
    predicts nothing). Reads the tokenizer only when a contrast is set."""
    if not mixing.get("contrast"):
        return
    from transformers import AutoTokenizer

    from attnscope.architectures import lm_head_kind
    from attnscope.core.tokens import contrast_ids

    if lm_head_kind(str(folder)) is None:
        return
    try:
        contrast_ids(AutoTokenizer.from_pretrained(folder), mixing["contrast"])
    except ValueError as error:
        raise ConfigError(f"config: model {name!r}: {error}") from None


def check_position_heads(config: dict, layers: list[int]) -> None:
    """The heads `analyses.position.heads` names lie in the analysed layers (0-based)."""
    position = config.get("analyses", {}).get("position", {})
    if not position.get("enabled", True):
        return
    for layer, head in position.get("heads", []):
        if 1 <= layer and layer - 1 not in layers:
            raise ConfigError(
                f"config: analyses.position.heads names layer {layer} (head {head}), which "
                f"layers: {config['layers']} leaves out"
            )
