"""A setting's one home: a field of its family's settings class (`analyses/<family>/
settings.py`) made by `setting`, which holds its default, bounds and description.
config/schema.yaml's entry of the setting (`analyses.<family>.<key>`) is held equal to it by
tests/test_config_settings.py, and docs/configuration.md is generated from the schema.

A settings field made without `setting` is no key of the family's block: the rule passes
it from elsewhere (the top-level `batch_size`, a per-corpus choice) or the job reads it from
the configuration (`Job.settings`: the check bounds, `memory_budget_mb`, `device`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING

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
