"""Each setting has one home: its family's settings class (`core.settings.setting`).

- config/schema.yaml's `analyses.<family>` entries and the classes' setting fields name the
  same keys, both ways, with the same default, bounds and description (and a type that fits);
- config/config.yaml gives each setting its schema default (the default run is the schema's);
- `Job.settings` builds a job's settings from exactly the rule's params: a field the rule
  does not give, or a param no field takes, is refused, naming the rule, the name and the
  class (issue 49, item 2).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from pathlib import Path

import pytest
import yaml
from snakemake.iocontainers import Params

from attnscope.analyses.family import families
from attnscope.core.settings import (
    CONFIGURED,
    config_fields,
    default_of,
    rule_params,
    schema_entry,
    setting,
)
from attnscope.pipeline.job import Job, SettingsError, build_settings

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((ROOT / "config" / "schema.yaml").read_text())
CONFIG = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
BLOCKS = SCHEMA["properties"]["analyses"]["properties"]
# keys that choose what a family reads, not how: the corpora (checked by config_checks and
# the family declarations), and views' {corpus: sequences}, which the rule turns into each
# corpus's pages (ViewsSettings.sequences)
CHOICES = {"enabled", "corpora", "corpus", "tables_corpus", "syntax_corpus", "coref_corpus"}
PER_CORPUS = {("views", "sequences")}
# how a schema type is spelt as an annotation of the settings class
TYPES = {
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "string": "str",
    "array": "tuple",
    "object": "dict",
}
COMPARED = ("description", "default", "minimum", "maximum", "exclusiveMinimum")
COMPARED += ("exclusiveMaximum", "enum")


def settings_classes(family: str) -> list[type]:
    """The settings classes of the family's settings module (those with a `family`)."""
    module = importlib.import_module(f"attnscope.analyses.{family}.settings")
    return [
        kind
        for _, kind in inspect.getmembers(module, dataclasses.is_dataclass)
        if kind.__module__ == module.__name__ and getattr(kind, "family", None) == family
    ]


def class_settings(family: str) -> dict[str, list[tuple[type, dataclasses.Field]]]:
    """{config key: [(class, field), ...]} of every setting field of the family's classes."""
    found = {}
    for kind in settings_classes(family):
        for key, field in config_fields(kind).items():
            found.setdefault(key, []).append((kind, field))
    return found


def schema_settings(family: str) -> dict[str, dict]:
    """{key: schema entry} of the family's block, less the keys that choose corpora."""
    return {
        key: entry
        for key, entry in BLOCKS[family]["properties"].items()
        if key not in CHOICES and (family, key) not in PER_CORPUS
    }


def test_every_family_has_a_settings_module():
    assert set(BLOCKS) == set(families())
    for family in BLOCKS:
        assert settings_classes(family), family


@pytest.mark.parametrize("family", sorted(BLOCKS))
def test_the_schema_and_the_settings_classes_name_the_same_keys(family):
    in_schema, in_classes = set(schema_settings(family)), set(class_settings(family))
    assert not in_schema - in_classes, f"{family}: no settings field for {in_schema - in_classes}"
    assert not in_classes - in_schema, f"{family}: no schema entry for {in_classes - in_schema}"


@pytest.mark.parametrize("family", sorted(BLOCKS))
def test_each_setting_has_the_schemas_default_bounds_and_description(family):
    schema = schema_settings(family)
    for key, homes in class_settings(family).items():
        entry = {name: value for name, value in schema[key].items() if name in COMPARED}
        for kind, field in homes:
            where = f"analyses.{family}.{key} ({kind.__name__}.{field.name})"
            assert schema_entry(field) == entry, where
            if "type" in schema[key]:
                annotation = field.type.split("[")[0].split(" ")[0]
                assert annotation == TYPES[schema[key]["type"]], where


@pytest.mark.parametrize("family", sorted(BLOCKS))
def test_the_default_configuration_gives_every_setting_its_default(family):
    given = CONFIG["analyses"].get(family, {})
    for key, homes in class_settings(family).items():
        if key in given:
            default = schema_entry(homes[0][1])["default"]
            assert given[key] == default, f"config.yaml analyses.{family}.{key}"


def test_the_top_level_settings_of_the_default_configuration_are_the_schemas():
    for key in ("device", "dtype", "compute_dtype", "loading", "batch_size", "shards"):
        assert CONFIG[key] == SCHEMA["properties"][key]["default"], key
    assert CONFIG["memory_budget_mb"] == SCHEMA["properties"]["memory_budget_mb"]["default"]


def test_the_top_level_fields_have_the_schemas_defaults():
    """A field read from a top-level key (`top_level`) defaults, where it has a default, to
    that key's schema default (ExtractSettings: the stored and computed types, `layers`)."""
    from attnscope.model.extract import ExtractSettings

    kinds = [ExtractSettings, *(k for family in BLOCKS for k in settings_classes(family))]
    for kind in kinds:
        for field in dataclasses.fields(kind):
            key = field.metadata.get("top_level")
            if key is not None and default_of(field) is not dataclasses.MISSING:
                assert default_of(field) == SCHEMA["properties"][key]["default"], kind


def test_a_setting_keeps_its_default_and_a_dict_default_is_fresh_per_instance():
    @dataclasses.dataclass(frozen=True)
    class Made:
        family = "made"
        table: dict = setting("a table", {"a": 1})
        k: int = setting("k", 3, key="made_k", minimum=1)

    first, second = Made(), Made()
    assert first.table == {"a": 1} and first.table is not second.table
    (field_k,) = [f for f in dataclasses.fields(Made) if f.name == "k"]
    assert set(config_fields(Made)) == {"table", "made_k"}
    assert default_of(field_k) == 3
    assert schema_entry(field_k) == {"minimum": 1, "default": 3, "description": "k"}
    with pytest.raises(TypeError, match="least"):
        setting("k", 3, least=1)


# --- Job.settings: exactly the rule's params ------------------------------------------


@dataclasses.dataclass(frozen=True)
class Toy:
    """A family `toy` with a block setting, a bound and the configuration-read fields."""

    family = "toy"
    batch_size: int
    top_k: int = setting("kept", 10, minimum=1)
    max_rel_residual: float = setting("bound", 1e-4, exclusive_minimum=0)
    memory_budget_mb: float = 64
    device: str = "cpu"


TOY_CONFIG = {
    "analyses": {"toy": {"max_rel_residual": 1e-3}},
    "memory_budget_mb": 512,
    "device": "cpu",
}


def toy_job(**params) -> Job:
    """A Job over a fake snakemake object of plain attributes (Job reads only attributes),
    made without its log file."""
    job = Job.__new__(Job)
    job.params, job.config, job.rule = Params(fromdict=params), TOY_CONFIG, "toy_compute"
    return job


def test_job_settings_reads_the_rules_params_and_the_configuration():
    made = toy_job(batch_size=2, top_k=3, shards=2).settings(Toy, besides=("shards",))
    assert made == Toy(batch_size=2, top_k=3, max_rel_residual=1e-3, memory_budget_mb=512)


@pytest.mark.parametrize(
    "params, named",
    [
        ({"batch_size": 2}, "'top_k'"),  # missing: no fallback to the default 10
        ({"batch_size": 2, "top_k": 3, "top_kk": 4}, "'top_kk'"),  # misspelt
        ({"batch_size": 2, "top_k": 3, "device": "cpu"}, "'device'"),  # the configuration's
    ],
)
def test_job_settings_refuses_a_missing_or_unknown_param_naming_rule_field_and_class(params, named):
    with pytest.raises(SettingsError) as refused:
        toy_job(**params).settings(Toy)
    assert all(word in str(refused.value) for word in ("toy_compute", named, "Toy"))


def test_a_field_the_job_does_not_read_is_none_and_not_its_default():
    made = build_settings(
        Toy, {"batch_size": 2}, TOY_CONFIG, "cpu", "toy_compute", unread=("top_k",)
    )
    assert made.top_k is None
    with pytest.raises(SettingsError, match="does not read"):  # passed, yet not read
        build_settings(
            Toy, {"batch_size": 2, "top_k": 3}, TOY_CONFIG, "cpu", "r", unread=("top_k",)
        )


def default_config() -> dict:
    """config.yaml with the schema's defaults filled in (what the Snakefile sees)."""
    from snakemake.utils import validate

    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    validate(config, str(ROOT / "config" / "schema.yaml"))
    return config


# the fields a rule passes itself, from a per-corpus choice or another family's block
RULE_GIVEN = {"ViewsSettings": {"contrast": (), "sequences": None}}


@pytest.mark.parametrize("family", sorted(BLOCKS))
def test_a_rules_params_from_its_settings_class_build_its_settings(family):
    """`rule_params`: a job's settings are the block's values, the top-level `batch_size`
    where the class says so, and the configuration-read fields; nothing else is needed, and
    what the job does not read (mixing_compute: the propagation's) is not passed."""
    config = default_config()
    config["analyses"][family] = {**config["analyses"][family], "enabled": True}
    for kind in settings_classes(family):
        unread = getattr(kind, "propagation", ())
        params = {**rule_params(kind, config, unread), **RULE_GIVEN.get(kind.__name__, {})}
        made = build_settings(kind, params, config, "cpu", f"{family}_rule", unread=unread)
        block = config["analyses"][family]
        for key, field in config_fields(kind).items():
            if field.name not in CONFIGURED and field.name not in unread:
                assert getattr(made, field.name) == block[key], (kind.__name__, key)
        assert not set(params) & (set(CONFIGURED) | set(unread)), kind.__name__
        named = {field.name for field in config_fields(kind).values()}
        if "batch_size" in params and "batch_size" not in named:
            assert made.batch_size == config["batch_size"]
