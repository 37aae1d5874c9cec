"""A setting's one home: a field of its family's settings class (`analyses/<family>/
settings.py`) made by `setting`, which holds its default, bounds and description.
config/schema.yaml's entry of the setting (`analyses.<family>.<key>`) is held equal to it by
tests/test_config_settings.py, and docs/configuration.md is generated from the schema.

A settings field made without `setting` is no key of the family's block: `top_level` names
the top-level key it is read from (`batch_size`), the job reads it from the configuration
(CONFIGURED: `Job.settings`), or the rule passes it itself (a per-corpus choice). A rule
passes a class's settings as `rule_params` says: the settings a job's outputs depend on are
declared once, by its settings class.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING

# the fields a job reads from the configuration, never from a rule's param: the check bounds
# (the check tables hold the residuals: changing one reruns nothing), the working memory and
# the device (the same results with any value)
CHECK_BOUNDS = ("max_rel_residual", "depth_rel_residual")
CONFIGURED = (*CHECK_BOUNDS, "memory_budget_mb", "device")
MEMORY_BUDGET_MB = 1024  # memory_budget_mb's default (the decompositions' working memory)

# the bounds a setting may declare, as the schema spells them
BOUNDS = {
    "minimum": "minimum",
    "maximum": "maximum",
    "exclusive_minimum": "exclusiveMinimum",
    "exclusive_maximum": "exclusiveMaximum",
    "choices": "enum",
}


def setting(description: str, default=MISSING, *, key: str | None = None, **bounds):
    """A settings field for the family's config key `key` (default: the field's name) with
    its `default`, `description` and `bounds` (`minimum`, `maximum`, `exclusive_minimum`,
    `exclusive_maximum`: numbers; `choices`: the allowed values). A list or dict default is
    given as a tuple or dict and copied per instance."""
    unknown = set(bounds) - set(BOUNDS)
    if unknown:
        raise TypeError(f"setting(): unknown bounds {sorted(unknown)}; known: {list(BOUNDS)}")
    metadata = {"description": description, "key": key, "bounds": bounds}
    if isinstance(default, dict):
        return dataclasses.field(default_factory=lambda: dict(default), metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def config_fields(kind) -> dict[str, dataclasses.Field]:
    """{config key: field} of the settings class `kind`'s fields made by `setting`."""
    return {
        field.metadata["key"] or field.name: field
        for field in dataclasses.fields(kind)
        if "description" in field.metadata
    }


def default_of(field: dataclasses.Field):
    """The field's default (a fresh one for a default factory); MISSING where it has none."""
    if field.default_factory is not MISSING:
        return field.default_factory()
    return field.default


def schema_entry(field: dataclasses.Field) -> dict:
    """The setting's default, description and bounds as config/schema.yaml spells them (a
    tuple default as a list)."""
    entry = {BOUNDS[name]: value for name, value in field.metadata["bounds"].items()}
    if "enum" in entry:
        entry["enum"] = list(entry["enum"])
    default = default_of(field)
    entry["default"] = list(default) if isinstance(default, tuple) else default
    entry["description"] = field.metadata["description"]
    return entry


def top_level(key: str, default=MISSING, *, kw_only: bool = False):
    """A settings field read from the configuration's top-level `key` (e.g. `batch_size`)."""
    metadata = {"top_level": key}
    return dataclasses.field(default=default, kw_only=kw_only, metadata=metadata)


def rule_params(kind, config: dict, unread: tuple = ()) -> dict:
    """{param: value} that a rule passes for the settings class `kind` (whose `family` names
    its block of `config["analyses"]`): each `setting` field's value in the block, each
    `top_level` field's in the configuration, a dict with its keys sorted (a param that
    compares equal however the config file orders them); not the CONFIGURED fields, nor
    `unread` (settings the job does not read), nor the fields the rule passes itself."""
    block = config["analyses"].get(getattr(kind, "family", ""), {})
    params = {}
    for field in dataclasses.fields(kind):
        if field.name in CONFIGURED or field.name in unread:
            continue
        if "description" in field.metadata:
            params[field.name] = _sorted(block[field.metadata["key"] or field.name])
        elif "top_level" in field.metadata:
            params[field.name] = _sorted(config[field.metadata["top_level"]])
    return params


def _sorted(value):
    if isinstance(value, dict):
        return {key: _sorted(value[key]) for key in sorted(value)}
    return value
