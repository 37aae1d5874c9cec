"""profiles/slurm with device=cuda: every model rule asks for a GPU on the GPU partition,
every other job runs on the CPU partition. Dry runs of the built-in workflow; no cluster."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[1]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"


def runs_the_model_on_the_device(script: str) -> bool:
    """Whether a rule script runs the model on the configured device: through `job.model()`
    (not `job.model(on_cpu=True)`, which reads weights only), `shards.sharded_analysis`, or
    reading config["device"] itself."""
    on_device = script.replace("job.model(on_cpu=True", "")
    return any(
        call in on_device
        for call in ("job.model(", "sharded_analysis(", 'snakemake.config["device"]')
    )


# Rules whose script runs the model on the configured device; the others (position_embeddings,
# position_svd) read weights on the CPU.
MODEL_RULES = {
    path.stem
    for path in (ROOT / "scripts").glob("*.py")
    if runs_the_model_on_the_device(path.read_text())
}


def planned_jobs(tmp_path: Path, device: str, *config: str) -> list[tuple[str, dict]]:
    """(rule, resources) of every job the built-in workflow plans with profiles/slurm (and
    the extra `key=value` settings `config`)."""
    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    profile.pop("software-deployment-method")  # no conda on the test machine; dry run only
    profile["config"] = [f"device={device}", "mirror=/nonexistent", *config]
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "config.yaml").write_text(yaml.safe_dump(profile))
    command = [
        str(SNAKEMAKE), "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
        "--profile", str(tmp_path / "profile"), "--dry-run",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:)", done.stdout):
        rule = re.match(r"(?:local)?rule (\w+):", block)
        resources = re.search(r"^\s+resources: (.*)$", block, re.M)
        if rule and resources:
            pairs = (item.split("=", 1) for item in resources.group(1).split(", "))
            jobs.append((rule.group(1), dict(pairs)))
    return jobs


def test_there_are_model_rules():
    assert {"extract_hidden_states", "norms_compute", "position_corpus"} <= MODEL_RULES


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_model_rules_and_only_they_land_on_the_gpu_partition(tmp_path, device):
    jobs = planned_jobs(tmp_path, device)
    assert {rule for rule, _ in jobs} >= MODEL_RULES
    for rule, resources in jobs:
        wants_gpu = device == "cuda" and rule in MODEL_RULES
        assert resources.get("gpu", "0") == ("1" if wants_gpu else "0"), (rule, resources)
        expected = "gpu" if wants_gpu else "cpu"
        assert resources.get("slurm_partition") == expected, (rule, resources)
        assert int(resources["runtime"]) > 0 and int(resources["mem_mb"]) > 0, (rule, resources)


def test_layer_shards_take_the_gpus_and_their_gather_takes_none(tmp_path):
    """shards: 2 with device=cuda: each norms, mixing, weights and position shard is its own
    GPU job; the jobs that merge them ask for no GPU and run on the CPU partition."""
    jobs = planned_jobs(tmp_path, "cuda", "shards=2")
    sharded = {"norms": "norms_compute", "mixing": "mixing_compute"}
    sharded |= {"weights": "weights_stats", "position": "position_corpus"}
    for family, gather in sharded.items():
        shards = [res for rule, res in jobs if rule == f"{family}_shard"]
        gathers = [res for rule, res in jobs if rule == gather]
        assert len(shards) == 2 * len(gathers) and gathers, family
        assert all(r["gpu"] == "1" and r["slurm_partition"] == "gpu" for r in shards), family
        assert all(r["gpu"] == "0" and r["slurm_partition"] == "cpu" for r in gathers), family


def resolved_settings(monkeypatch, *args: str):
    """The command-line settings Snakemake resolves from the given profile arguments, in the
    repository (where a profiles/default folder would be applied as the workflow profile)."""
    from snakemake.cli import parse_args

    monkeypatch.chdir(ROOT)
    return parse_args(["--snakefile", str(ROOT / "Snakefile"), *args])[1]


def test_slurm_profile_alone_sets_the_cluster_run(monkeypatch, capsys):
    """--profile profiles/slurm resolves to its own settings: no workflow profile is mixed in
    key by key, no GPU limit holds GPU jobs to one at a time, no local core count caps rule
    threads (issue 19, items 4 and 6)."""
    args = resolved_settings(monkeypatch, "--profile", "profiles/slurm")
    assert "workflow specific profile" not in capsys.readouterr().err
    assert args.jobs == 50 and args.executor == "slurm"
    assert not args.resources, args.resources  # no global gpu=1
    assert args.cores is None
    default = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    resources = [default["default-resources"], *default["set-resources"].values()]
    assert not any("cpus_per_task" in r for r in resources)  # SLURM CPUs = the rule's threads


def test_local_profile_holds_one_gpu_job_at_a_time(monkeypatch):
    args = resolved_settings(monkeypatch, "--profile", "profiles/local")
    assert args.resources["gpu"].value == 1 and args.cores == os.cpu_count()  # cores: all
