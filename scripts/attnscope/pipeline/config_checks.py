"""Cross-field checks of the configuration that the schema cannot express.

They run when the workflow is parsed, before any job: a bad value stops the run with a
message naming the key, and nothing is computed or overwritten.
"""

from __future__ import annotations

from attnscope.pipeline.outputs import Family


class ConfigError(ValueError):
    """A configuration value contradicts another one."""


def check_config(config: dict, families: dict[str, Family]) -> None:
    """Raise ConfigError for the first inconsistency found (after schema validation)."""
    corpora = config["corpora"]
    for name, settings in corpora.items():
        if settings["kind"] == "clark" and not settings.get("path"):
            raise ConfigError(f"config: corpora.{name}.path is required for kind clark")
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
        for problem in family.problems(settings):
            raise ConfigError(f"config: analyses.{name}: {problem}")
