"""Cross-field checks of the configuration that the schema cannot express.

They run when the workflow is parsed, before any job: a bad value stops the run with a
message naming the key, and nothing is computed or overwritten.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import yaml

from attnscope.analyses.family import Family, ModelFacts
from attnscope.analyses.family import families as all_families
from attnscope.architectures import StreamingUnavailableError, architecture, checkpoint_files
from attnscope.core.layer_selection import LayerSelectionError, selected_layers, whole_model
from attnscope.data.corpora import KINDS as CORPUS_KINDS
from attnscope.data.corpora.characters import visible
from attnscope.data.corpus_settings import corpus_for_model, cut_to_context
from attnscope.model import gguf
from attnscope.model.sources import (
    local_gguf,
    local_model_config,
    local_model_folder,
    require_tokenizer,
    require_weights,
)


class ConfigError(ValueError):
    """A configuration value contradicts another one."""


def refuse(messages: Iterable[str]) -> None:
    """Raise ConfigError for the first of a family check's messages (after "config: ")."""
    for message in messages:
        raise ConfigError(f"config: {message}")


class _UniqueKeyLoader(yaml.SafeLoader):
    """A YAML loader that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    lines = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in lines:
            raise ConfigError(
                f"config file {loader.name}: key {key!r} is given twice in one block (lines "
                f"{lines[key]} and {line}); YAML would keep the last silently: remove one"
            )
        lines[key] = line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def check_config_files(paths) -> None:
    """Read each config file (YAML or JSON) again, refusing a key given twice in one mapping:
    Snakemake's loader keeps the last one without a word."""
    for path in paths:
        with open(path, encoding="utf-8") as stream:
            loader = _UniqueKeyLoader(stream)
            loader.name = str(path)
            try:
                loader.get_single_data()
            finally:
                loader.dispose()


def float_integers(value, schema: dict, key: str = "", root: dict | None = None) -> list[str]:
    """The keys (dotted, list items as `key[i]`) of `value` whose `schema` type is integer but
    whose value is a float such as 2.0, which JSON Schema's integer accepts."""
    root = schema if root is None else root
    found = []
    if "$ref" in schema:
        target = root
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        found += float_integers(value, target, key, root)
    types = schema.get("type", [])
    types = [types] if isinstance(types, str) else types
    if isinstance(value, float) and "integer" in types and "number" not in types:
        found.append(key)
    for branch in schema.get("oneOf", []) + schema.get("anyOf", []) + schema.get("allOf", []):
        found += float_integers(value, branch, key, root)
    if isinstance(value, dict):
        for name, item in value.items():
            below = schema.get("properties", {}).get(name, schema.get("additionalProperties"))
            if isinstance(below, dict):
                found += float_integers(item, below, f"{key}.{name}" if key else name, root)
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            found += float_integers(item, schema["items"], f"{key}[{index}]", root)
    return list(dict.fromkeys(found))


def check_integer_settings(config: dict, schema_path: str | Path) -> None:
    """Refuse an integer setting written as a float (`shards: 2.0`), naming its key."""
    schema = yaml.safe_load(Path(schema_path).read_text())
    floats = float_integers(config, schema)
    if floats:
        raise ConfigError(
            f"config: {', '.join(floats)} must be a whole number written without a decimal point "
            f"(e.g. 2, not 2.0); it is a float"
        )


def check_config(config: dict, families: dict[str, Family]) -> None:
    """Raise ConfigError for the first inconsistency found (after schema validation)."""
    corpora = config["corpora"]
    for name, settings in corpora.items():
        check_own_settings(name, settings)
        check_texts(name, settings)
        check_repeated(name, settings)
    check_model_corpora(config)
    for name, family in families.items():
        settings = config["analyses"][name]
        if not settings.get("enabled", True):
            continue
        for key in family.corpus_keys(settings):
            named = settings.get(key) or []
            for corpus in [named] if isinstance(named, str) else named:
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
    for family in families.values():
        refuse(family.checks(config))
    check_models(config, sorted(used), families)
    check_every_layer(config, families, model_depths(config))


def check_last(config: dict, families: dict[str, Family]) -> None:
    """The families' `last_checks`: run once every other setting has been checked."""
    for family in families.values():
        refuse(family.last_checks(config))


def model_depths(config: dict) -> dict[str, int | None]:
    """{model: number of layers} from each model's config.json (or its GGUF's metadata); None
    for a hub model still to fetch."""
    depths = {}
    for name, spec in config["models"].items():
        model_config = local_model_config(name, spec, config["mirror"])
        if model_config is None:
            depths[name] = None
            continue
        arch = architecture(model_config.get("model_type"), f"model {name!r}")
        depths[name] = arch.dimensions(model_config)[0]
    return depths


def check_every_layer(
    config: dict, families: dict[str, Family], depths: dict[str, int | None]
) -> None:
    """Where `layers` is a subset of a model's layers (a list naming them all is the whole
    model; a model of unknown depth counts as a subset), no enabled family needs every layer
    for all its outputs."""
    setting = config.get("layers", "all")
    if all(whole_model(setting, n_layers) for n_layers in depths.values()):
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


def check_texts(name: str, settings: dict) -> None:
    """A texts corpus takes every text the user typed (`n_sequences` is refused, never
    truncating them), and each text has a visible character."""
    if settings["kind"] != "texts":
        return
    if settings.get("n_sequences"):
        raise ConfigError(
            f"config: corpora.{name}.n_sequences is {settings['n_sequences']}, but a texts "
            "corpus takes every text it lists; remove n_sequences (or the texts you do not want)"
        )
    for index, text in enumerate(settings.get("texts") or []):
        segments = [text] if isinstance(text, str) else text
        if not all(visible(segment) for segment in segments):
            raise ConfigError(
                f"config: corpora.{name}.texts[{index}] has no visible character (only spaces, "
                "control or zero-width characters); give it a word or remove it"
            )


def check_repeated(name: str, settings: dict) -> None:
    """A repeated_random corpus has sequences to draw (n_sequences >= 1) that fit max_length
    (1 + 2 length pieces); `seed` is read by that kind only."""
    if settings["kind"] != "repeated_random":
        if "seed" in settings:
            raise ConfigError(
                f"config: corpora.{name}.seed is read only by kind repeated_random, not by kind "
                f"{settings['kind']}"
            )
        return
    if not settings.get("n_sequences"):
        raise ConfigError(
            f"config: corpora.{name}.n_sequences must be at least 1 for kind repeated_random "
            "(the sequences drawn; 0 would be endless)"
        )
    pieces = 1 + 2 * settings["length"]
    if pieces > settings["max_length"]:
        raise ConfigError(
            f"config: corpora.{name}.length is {settings['length']}: its sequences START r r "
            f"have {pieces} pieces, more than max_length {settings['max_length']}; lower "
            f"length to at most {(settings['max_length'] - 1) // 2} or raise max_length"
        )


def check_repeated_model(config: dict, model: str, folder, limit: int) -> None:
    """Each repeated_random corpus fits model `model`'s context (`limit` positions) and its
    tokenizer (in `folder`; None: a GGUF still to dequantise, checked when it is encoded) has
    `length` ordinary pieces to draw from."""
    for corpus in config["corpora"]:
        settings = corpus_for_model(config, model, corpus)
        if settings["kind"] != "repeated_random":
            continue
        length = settings["length"]
        if 1 + 2 * length > limit:
            raise ConfigError(
                f"config: corpora.{corpus}.length is {length}: START r r has {1 + 2 * length} "
                f"pieces, but model {model!r} takes at most {limit} positions; lower length to "
                f"at most {(limit - 1) // 2}"
            )
        if folder is None:
            continue
        from attnscope.data.corpora.repeated_random import ordinary_count

        found = ordinary_count(folder)
        if found < length:
            raise ConfigError(
                f"config: corpora.{corpus}.length is {length}, but the tokenizer of model "
                f"{model!r} has {found} ordinary pieces (no special, added or bracketed ones) "
                f"to draw {length} distinct ones from; lower length to at most {found}"
            )


def check_model_corpora(config: dict) -> None:
    """Each model's `corpora:` block names defined corpora, and the settings it gives are
    consistent with the corpus's kind (a texts corpus takes every text)."""
    for model, spec in config["models"].items():
        for corpus in spec.get("corpora", {}):
            if corpus not in config["corpora"]:
                raise ConfigError(
                    f"config: models.{model}.corpora names corpus {corpus!r}, which is not "
                    f"defined under corpora: (defined: {', '.join(config['corpora'])})"
                )
            settings = corpus_for_model(config, model, corpus)
            check_texts(f"{corpus} (as models.{model}.corpora sets it)", settings)
            check_repeated(f"{corpus} (as models.{model}.corpora sets it)", settings)


def check_models(
    config: dict, used_corpora: list[str] = (), families: dict[str, Family] | None = None
) -> None:
    """Every model that is on this machine exists, has a supported architecture, a
    tokenizer and whole weight files (`require_weights`), has safetensors weights if
    `loading` is layer-streamed, has every layer that `layers` names and at least `shards`
    of them, takes inputs as long as every corpus's max_length, has a mask token if an
    analysis reads a corpus (of `used_corpora`) with [MASK], and passes the `model_checks`
    of the `families` (every declared family where None) (hub models still to fetch: at
    acquisition)."""
    declared_families = all_families() if families is None else families
    for name, spec in config["models"].items():
        model_config = local_model_config(name, spec, config["mirror"])
        if model_config is None:
            continue
        arch = architecture(model_config.get("model_type"), f"model {name!r}")
        folder = local_model_folder(name, spec, config["mirror"])  # None: a GGUF to dequantise
        if folder is not None:
            require_tokenizer(name, folder)
            require_weights(name, folder)
        check_mask_token(config, name, model_config, arch.has_mask_token, used_corpora)
        if folder is not None and config.get("loading") == "layer-streamed":
            try:
                checkpoint_files(folder)
            except StreamingUnavailableError as error:
                raise ConfigError(f"config: loading: model {name!r}: {error}") from None
        n_layers, _ = arch.dimensions(model_config)
        layers = check_layers_and_shards(config, name, n_layers)
        gguf_file = None if folder is not None else local_gguf(name, spec, config["mirror"])
        facts = ModelFacts(name, n_layers, arch.n_heads(model_config), layers, folder, gguf_file)
        for declared in declared_families.values():
            try:
                refuse(declared.model_checks(config, facts))
            except gguf.GGUFError as error:  # its tokenizer, read from the GGUF
                raise ConfigError(f"config: model {name!r}: {error}") from None
        limit = arch.max_positions(model_config)
        check_repeated_model(config, name, folder, limit)
        check_lengths(config, name, limit)


def check_mask_token(
    config: dict, name: str, model_config: dict, has_mask_token: bool, used_corpora
) -> None:
    """A model without a mask token reads no corpus of `used_corpora` with mask_rate > 0."""
    masked = [c for c in used_corpora if corpus_for_model(config, name, c).get("mask_rate", 0) > 0]
    if masked and not has_mask_token:
        raise ConfigError(
            f"config: model {name!r} ({model_config['model_type']}) is no masked language "
            f"model (whatever its tokenizer holds, it was not trained to fill a mask "
            f"token), but corpora {', '.join(masked)} replace pieces by the mask token "
            f"(mask_rate > 0); let it read them unmasked (models: {{{name}: {{corpora: "
            f"{{{masked[0]}: {{mask_rate: 0}}}}}}}}) or give the analysis corpora without "
            "mask_rate"
        )


def check_layers_and_shards(config: dict, name: str, n_layers: int) -> list[int]:
    """The model's analysed layers (`layers:`, 1-based), refused where it lacks one or has
    fewer than `shards`."""
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
    return layers


def check_lengths(config: dict, name: str, limit: int) -> None:
    """Every corpus as the model reads it fits its `limit` positions."""
    for corpus in config["corpora"]:
        length = cut_to_context(corpus_for_model(config, name, corpus), limit)["max_length"]
        if length > limit:
            raise ConfigError(
                f"config: corpora.{corpus}.max_length is {length} for model {name!r}, "
                f"which takes at most {limit} positions; lower max_length (for this "
                f"model: models.{name}.corpora.{corpus}.max_length), or set "
                f"corpora.{corpus}.cut_to_context: true"
            )
