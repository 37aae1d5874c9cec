"""One rule job as its script sees it: `job = Job(snakemake)` sets up the process and holds
the job's files, params, settings and log; `job.model()` opens the job's model the way the
configuration says (device, loading route), checked against the hidden states the job reads.
Every rule script starts with it, the figure rules' too: importing it needs no torch (their
environment, envs/plots.yaml, has none).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property

from attnscope.core.settings import CHECK_BOUNDS, CONFIGURED
from attnscope.model.loaded import LoadedModel, open_model
from attnscope.model.sources import check_model_unchanged, read_manifest
from attnscope.pipeline import runlog


class SettingsError(ValueError):
    """A rule's params and its settings class disagree (a setting missing or misspelt)."""


def build_settings(kind, params: dict, config: dict, device: str, rule: str, unread=(), besides=()):
    """Rule `rule`'s settings as `kind`: each field from the param of its name in `params`,
    but the check bounds (`max_rel_residual`, `depth_rel_residual`) from the config block of
    the class attribute `bound_family`, else `family`, and `memory_budget_mb` from the
    configuration, so that changing them reruns nothing, and `device` the job's (resolved
    once: `Job.device`); the fields in `unread` (settings the job does not read) are None.
    Refused (SettingsError) when a field is given neither way, or a param other than
    `besides` is no field: no setting falls back to the class default."""
    names = [field.name for field in dataclasses.fields(kind)]
    where = f"rule {rule}, settings class {kind.__name__}"
    stray = sorted(set(params) - set(names) - set(besides))
    read = sorted(set(params) & set(CONFIGURED))
    if stray or read:
        said = stray or read
        why = "takes no such setting" if stray else "reads it from the configuration"
        raise SettingsError(f"{where}: the rule passes the param(s) {said}, but {why}")
    if set(params) & set(unread):
        said = sorted(set(params) & set(unread))
        raise SettingsError(f"{where}: the rule passes {said}, which the job does not read")
    given = {}
    for name in names:
        if name in CHECK_BOUNDS:
            family = getattr(kind, "bound_family", kind.family)
            given[name] = config["analyses"][family][name]
        elif name == "memory_budget_mb":
            given[name] = config["memory_budget_mb"]
        elif name == "device":
            given[name] = device
        elif name in unread:
            given[name] = None
        elif name in params:
            given[name] = params[name]
        else:
            needed = f"{kind.__name__}.{name}"
            raise SettingsError(f"{where}: the rule gives no param {name!r} ({needed} has none)")
    return kind(**given)


class Job:
    """`input`, `output`, `params`, `wildcards` and `config` are Snakemake's; `log` is the
    job's logger (its log file)."""

    def __init__(self, snakemake):
        self.log = runlog.start(snakemake)
        self.input, self.output = snakemake.input, snakemake.output
        self.params, self.wildcards = snakemake.params, snakemake.wildcards
        self.config, self.rule = snakemake.config, snakemake.rule

    def model(
        self, *, with_head: bool = False, on_cpu: bool = False, dtype: str = "float32"
    ) -> LoadedModel:
        """The model of the job's `manifest` input with its head when `with_head`, on the
        configured device (the CPU when `on_cpu`: the job reads weights only) and loading
        route, in `dtype` (extraction's compute type); refused when its files or the job's
        `hidden_states` input came from other weights."""
        return open_model(
            self.input.manifest,
            "cpu" if on_cpu else self.device,
            self.log,
            hidden_states=self.input.get("hidden_states"),
            with_head=with_head,
            loading=self.config["loading"],
            dtype=dtype,
        )

    @cached_property
    def device(self) -> str:
        """The configured `device` resolved, once per job (`devices.pick_device`): the device
        of the job's model and of its settings."""
        from attnscope.model.devices import pick_device

        return pick_device(self.config["device"])

    @cached_property
    def manifest(self) -> dict:
        """The manifest of the job's model (`sources.build_manifest`), read without loading
        it; refused (ModelChangedError) when the model's files changed since it was written."""
        manifest = read_manifest(self.input.manifest)
        check_model_unchanged(manifest, self.input.manifest)
        return manifest

    def tokenizer(self):
        """The tokenizer of the job's model (`manifest`)."""
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(self.manifest["path"])

    def bound(self, family: str, name: str = "max_rel_residual") -> float:
        """The family's bound `name` (`max_rel_residual`, `depth_rel_residual`), read from the
        configuration and not from params, so that changing a bound reruns nothing."""
        return self.config["analyses"][family][name]

    def settings(self, kind, *, unread: tuple = (), besides: tuple = ()):
        """The job's settings as `kind`, a family's settings class (e.g. `NormsSettings`):
        `build_settings` over the rule's params, the configuration and the job's `device`;
        `unread`: fields this job does not read (None); `besides`: the rule's params that are
        no setting (e.g. `shards`)."""
        params = dict(self.params.items())
        return build_settings(kind, params, self.config, self.device, self.rule, unread, besides)

    def write_table(self, table, path) -> None:
        """Write `table` (`files.write_table`); a per-layer table (a `layer` column) gains
        its layers' `attention window rope_theta` from the job's input `layer_kinds`, the
        model's layer_kinds.tsv (`core.layer_kinds`), where the rule gives one."""
        from attnscope.core.files import write_table
        from attnscope.core.layer_kinds import read_layer_kinds, with_layer_kinds

        path_kinds = self.input.get("layer_kinds")
        if path_kinds is not None:
            table = with_layer_kinds(table, read_layer_kinds(path_kinds))
        write_table(table, path)

    @contextmanager
    def optional_h5(self, name: str) -> Iterator:
        """The job's input `name` opened read-only as HDF5, or None where the rule gives none;
        closed on leaving."""
        import h5py

        path = self.input.get(name)
        if path is None:
            yield None
            return
        with h5py.File(path, "r") as f:
            yield f
