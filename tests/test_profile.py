"""profiles/slurm with device=cuda: every model rule asks for a GPU on the GPU partition,
every other job runs on the CPU partition. Dry runs of the built-in workflow; no cluster."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parents[1]
SNAKEMAKE = Path(sys.executable).parent / "snakemake"

# Rules whose script runs the model on the configured device (params.device); the others
# (position_embeddings, position_svd) read weights on the CPU.
MODEL_RULES = {
    path.stem for path in (ROOT / "scripts").glob("*.py") if "params.device" in path.read_text()
}


def planned_jobs(tmp_path: Path, device: str) -> list[tuple[str, dict]]:
    """(rule, resources) of every job the built-in workflow plans with profiles/slurm."""
    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    profile.pop("software-deployment-method")  # no conda on the test machine; dry run only
    profile["config"] = [f"device={device}", "mirror=/nonexistent"]
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
    assert {"extract_hidden_states", "norms_compute"} <= MODEL_RULES


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
