"""A throwaway single-node SLURM cluster (Debian's slurm-wlm 22.05 + munge) in a temp folder.

Started and stopped by pid: only the daemons started here are ended. Needs root (munged runs
as user munge with the key in /etc/munge, slurmd as root). Partitions `cpu` (default) and
`gpu` on the one node; the gpu partition has no GPU, so only CPU jobs run there.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("sbatch", "squeue", "slurmctld", "slurmd", "munged", "mungekey")
INSTALL = "apt-get install -y slurm-wlm munge (as root), then rerun `make test-slurm`"

SLURM_CONF = """\
ClusterName=attnscope-test
SlurmctldHost={host}
SlurmUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MinJobAge=3600
ReturnToService=2
SchedulerType=sched/builtin
SlurmctldParameters=enable_configless
NodeName={host} CPUs={cpus} RealMemory={memory} State=UNKNOWN
PartitionName=cpu Nodes={host} Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes={host} MaxTime=INFINITE State=UP
"""


def missing_tools() -> list[str]:
    return [tool for tool in DAEMONS if shutil.which(tool) is None]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _machine_memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise RuntimeError("no MemTotal in /proc/meminfo")


class Cluster:
    """start() writes the config and starts munged (if none runs), slurmctld and slurmd;
    stop() ends exactly those by pid. `env` carries SLURM_CONF for sbatch/squeue."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.conf = self.root / "slurm.conf"
        self.env = dict(os.environ, SLURM_CONF=str(self.conf))
        self.pids: list[int] = []

    def _start_munge(self) -> None:
        key = Path("/etc/munge/munge.key")
        if not key.exists():
            subprocess.run(["mungekey", "--create"], check=True)
            shutil.chown(key, "munge", "munge")
            key.chmod(0o400)
        if subprocess.run(["munge", "-n"], capture_output=True).returncode == 0:
            return  # a munged already answers
        for folder in ("/run/munge", "/var/log/munge", "/var/lib/munge"):
            Path(folder).mkdir(parents=True, exist_ok=True)
            shutil.chown(folder, "munge", "munge")
        pidfile = Path("/run/munge/munged.pid")  # a folder user munge may write to
        pidfile.unlink(missing_ok=True)
        subprocess.run(
            ["runuser", "-u", "munge", "--", "munged", f"--pid-file={pidfile}"], check=True
        )
        self.pids.append(int(_wait_for(pidfile).read_text()))

    def start(self, cpus: int = 2) -> Cluster:
        for folder in ("state", "spool"):
            (self.root / folder).mkdir(parents=True, exist_ok=True)
        memory = max(1000, _machine_memory_mb() // 2)
        self.ctld_port = _free_port()
        self.conf.write_text(
            SLURM_CONF.format(
                host=socket.gethostname(),
                root=self.root,
                cpus=cpus,
                memory=memory,
                ctld_port=self.ctld_port,
                d_port=_free_port(),
            )
        )
        (self.root / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
        self._start_munge()
        subprocess.run(["slurmctld", "-f", str(self.conf)], check=True, env=self.env)
        self.pids.append(int(_wait_for(self.root / "slurmctld.pid").read_text()))
        # Configless slurmd: job steps (srun inside a job) find the config through it, without
        # SLURM_CONF in the job's environment or a file in /etc/slurm.
        server = f"{socket.gethostname()}:{self.ctld_port}"
        subprocess.run(["slurmd", "--conf-server", server], check=True, env=self.env)
        self.pids.append(int(_wait_for(self.root / "slurmd.pid").read_text()))
        deadline = time.time() + 60
        while time.time() < deadline:
            state = subprocess.run(
                ["sinfo", "-h", "-o", "%t", "-p", "cpu"],
                capture_output=True,
                text=True,
                env=self.env,
            ).stdout.strip()
            if state.startswith("idle"):
                return self
            time.sleep(1)
        raise RuntimeError(f"test cluster not idle after 60 s (sinfo: {state!r}); see {self.root}")

    def stop(self) -> None:
        for pid in reversed(self.pids):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        self.pids.clear()


def _wait_for(path: Path, seconds: float = 30) -> Path:
    deadline = time.time() + seconds
    while not (path.exists() and path.read_text().strip()):
        if time.time() > deadline:
            raise RuntimeError(f"{path} did not appear in {seconds} s")
        time.sleep(0.2)
    return path
