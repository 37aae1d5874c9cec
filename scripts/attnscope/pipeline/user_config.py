"""Which blocks of the user's configuration replace the built-in ones instead of merging.

Snakemake merges a --configfile or --config into the built-in config key by key. For blocks
keyed by the user's own names that is wrong: the built-in corpora would run beside the
user's, and `analyses.views.sequences: {}` would get the built-in wiki sequences back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnscope.analyses.family import Family

REPLACED_BLOCKS = (("models",), ("corpora",), ("analyses", "views", "sequences"))


def replace_user_blocks(config: dict, user_config: dict) -> None:
    """Set every REPLACED_BLOCKS block that `user_config` gives to its value, in place."""
    for keys in REPLACED_BLOCKS:
        given, target = user_config, config
        for key in keys[:-1]:
            given = given.get(key) if isinstance(given, dict) else None
            target = target.setdefault(key, {})
        if isinstance(given, dict) and keys[-1] in given:
            target[keys[-1]] = given[keys[-1]]


def skip_unnamed_families(
    config: dict, user_config: dict, families: dict[str, Family]
) -> list[str]:
    """Switch off, in place, each enabled family that `user_config` (the user's --configfile
    and --config) never names under `analyses:` and whose built-in corpora are not defined
    under `corpora:` (a config written before the family existed, replacing `corpora:`);
    returns one line per family switched off, saying how to enable it. A family the user
    names keeps its corpora, which check_config then requires to exist."""
    named = user_config.get("analyses") or {}
    defined = config["corpora"]
    skipped = []
    for name, family in families.items():
        settings = config["analyses"][name]
        if name in named or not settings.get("enabled", True):
            continue
        missing = [corpus for corpus in family.corpora(settings) if corpus not in defined]
        if missing:
            settings["enabled"] = False
            keys = " / ".join(f"analyses.{name}.{key}" for key in family.corpus_keys(settings))
            skipped.append(
                f"analyses.{name} is skipped: it reads corpus {', '.join(map(repr, missing))} by "
                f"default, which your corpora: does not define; to run it, set {keys} to "
                f"corpora you define (or define {missing[0]!r} under corpora:)"
            )
    return skipped
