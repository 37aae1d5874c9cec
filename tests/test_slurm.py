"""The workflow through profiles/slurm on a real (throwaway, single-node) SLURM cluster.

`make test-slurm` runs this. It starts slurmctld, slurmd (and munged if none runs) from
Debian's slurm-wlm/munge in a temp folder, runs one family's tables for a tiny random model
in two layer shards with the SLURM executor (CPU overrides: device=cpu, the test cluster's
partitions, no conda, status from squeue since there is no accounting database, rule threads
capped at the node's 2 CPUs), checks that every job but the local rules went through sbatch
with as many CPUs as its threads, one job per shard and one gathering them, that the tables
and maps agree with a local one-job run's within the README's promise, and stops the daemons
it started, by pid.
Takes about 2 to 5 minutes on 2 shared cores (1 min 47 s and 5 min 11 s measured before the
shards), most of it the executor's status polling.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from slurm_cluster import INSTALL, Cluster, missing_tools
from test_workflow import ROOT, SNAKEMAKE, small_config, tiny_model_dir  # noqa: F401

from attnscope.analyses.family import families

pytestmark = [
    pytest.mark.slurm,
    pytest.mark.skipif(bool(missing_tools()), reason=f"no SLURM here: {INSTALL}"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the throwaway SLURM cluster needs root"),
]

# The README's reproducibility promise: across thread counts, devices and machines every float
# of a table or map agrees within this share of its column's or dataset's largest magnitude.
PROMISED_RTOL = 1e-5
TARGETS = [
    "results/tiny/wiki/norms/sep_heads.tsv",
    "results/tiny/wiki/norms/x_summary.tsv",
    "results/tiny/wiki/norms/attn_n_maps.h5",
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("slurm")).start()
    yield cluster
    cluster.stop()


def test_profile_runs_every_job_through_sbatch_with_local_results(
    cluster,
    tmp_path,
    tiny_model_dir,  # noqa: F811
):
    config = small_config({"tiny": {"source": "path", "path": str(tiny_model_dir)}})
    config["corpora"] = {"wiki": config["corpora"]["wiki"]}
    # Norms alone: every other family is switched off.
    config["analyses"] = {name: {"enabled": False} for name in families()}
    config["analyses"]["norms"] = {"corpora": ["wiki"], "sink_positions": 32}
    config["cluster"] = {"cpu_partition": "cpu", "gpu_partition": "gpu"}
    config["shards"] = 2  # on SLURM: one job per layer of the tiny model, then the gather
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))

    # profiles/slurm with CPU overrides for the test node.
    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    profile.pop("software-deployment-method")
    profile["config"] = ["device=cpu"]
    profile["latency-wait"] = 5
    profile["slurm-status-command"] = "squeue"
    profile["slurm-init-seconds-before-status-checks"] = 5
    profile["max-threads"] = 2  # the test node has 2 CPUs; sbatch asks for the capped threads
    profile["default-resources"]["mem_mb"] = 1000
    for resources in profile["set-resources"].values():
        resources["mem_mb"] = 1000
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile" / "config.yaml").write_text(yaml.safe_dump(profile))

    def run(workdir: Path, *args: str) -> subprocess.CompletedProcess:
        command = [
            str(SNAKEMAKE), "--snakefile", str(ROOT / "Snakefile"), "--directory", str(workdir),
            "--configfile", str(configfile), "--replace-workflow-config", *TARGETS, *args,
        ]  # fmt: skip
        return subprocess.run(
            command, capture_output=True, text=True, timeout=1200, env=cluster.env
        )

    on_slurm = run(tmp_path / "slurm", "--profile", str(tmp_path / "profile"))
    log = on_slurm.stdout + on_slurm.stderr
    assert on_slurm.returncode == 0, log[-6000:]
    assert "workflow specific profile" not in log, log[:2000]
    job_ids = re.findall(r"SLURM jobid (\d+)", log)
    total = int(re.search(r"^total\s+(\d+)", log, re.M).group(1))
    local = set(re.findall(r"^localrule (\w+):", log, re.M))
    # acquisition and bookkeeping stay on the submit host (compute nodes may have no internet),
    # and so does collect_shards (a rename of the shards' files)
    assert "acquire_model" in local, log[-6000:]
    host = {"acquire_model", "acquire_data", "config_snapshot", "software_versions"}
    assert local <= host | {"collect_shards"}
    n_local = len(re.findall(r"^localrule \w+:", log, re.M))
    assert len(set(job_ids)) == total - n_local, log[-6000:]
    threads = {
        rule: int(n)
        for rule, n in re.findall(r"^rule (\w+):\n(?:\s+\w+: .*\n)*?\s+threads: (\d+)", log, re.M)
    }
    squeue = subprocess.run(
        ["squeue", "-h", "-t", "all", "-o", "%i|%P|%T|%C|%k"], capture_output=True, text=True,
        env=cluster.env,
    ).stdout  # fmt: skip
    finished = {line.split("|")[0]: line.split("|")[1:] for line in squeue.splitlines()}
    rules = [re.match(r"rule_(\w+?)(_wildcards_|$)", finished[j][3]).group(1) for j in job_ids]
    assert rules.count("norms_shard") == 2 and rules.count("norms_compute") == 1, rules
    for job_id in job_ids:
        partition, state, cpus, comment = finished[job_id]
        assert (partition, state) == ("cpu", "COMPLETED"), squeue
        rule = re.match(r"rule_(\w+?)(_wildcards_|$)", comment).group(1)
        assert int(cpus) == threads.get(rule, 1), (rule, cpus, threads)

    # one job over every layer here: the gathered shards must give its tables and maps
    local_run = run(tmp_path / "local", "--cores", "2", "--config", "device=cpu", "shards=1")
    assert local_run.returncode == 0, (local_run.stdout + local_run.stderr)[-6000:]
    compare = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "compare_results.py"),
         str(tmp_path / "local" / "results"), str(tmp_path / "slurm" / "results"),
         "--rtol", str(PROMISED_RTOL)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert compare.returncode == 0, compare.stdout
