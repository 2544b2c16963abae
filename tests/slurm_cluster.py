"""A real single-node SLURM on localhost, for tests: install, start, stop.

Debian's slurmctld, slurmd and munge, run as root without systemd or cgroups:
one node, ``localhost``, with every core, all memory but 1 GiB, and one fake
GPU (a GRES backed by /dev/null: the scheduler counts it, torch sees no CUDA,
so a job scheduled on it takes its CPU path). No accounting database, so
``sacct`` knows nothing: Snakemake must poll ``squeue`` instead
(``--slurm-status-command squeue``), and finished jobs stay visible to
``squeue``/``scontrol`` for MinJobAge seconds.

The configuration lives at /etc/slurm/slurm.conf because the Snakemake job-step
plugin strips every ``SLURM_*`` variable (``SLURM_CONF`` with them) before the
``srun`` inside each job; that srun then finds only the compiled-in path.

Every daemon started here is stopped by its own pid (never by name) and its
exit awaited; a daemon that was already running is left alone.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
CONF_DIR = Path("/etc/slurm")
NODE = "localhost"
PARTITION = "debug"
GPU_PARTITION = "gpu"


class Unavailable(RuntimeError):
    """SLURM cannot be set up on this machine; the message says why."""


def _run(cmd, timeout=60, check=True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=check, **kw)


def missing_packages() -> list[str]:
    return [p for p in PACKAGES if _run(["dpkg", "-s", p], check=False).returncode != 0]


def why_unavailable() -> str | None:
    """None where a cluster can be set up here, else the reason it cannot."""
    if os.name != "posix" or not Path("/proc").is_dir():
        return "needs Linux"
    if os.geteuid() != 0:
        return "needs root (installs Debian packages and runs slurmctld/slurmd as root)"
    if shutil.which("dpkg") is None or shutil.which("apt-get") is None:
        return "needs a Debian-like system with apt-get (Debian's slurm-wlm packages)"
    if (CONF_DIR / "slurm.conf").exists() and not (CONF_DIR / ".perflab-test").exists():
        return "/etc/slurm/slurm.conf exists: a real SLURM is configured here; not touching it"
    return None


def install() -> None:
    missing = missing_packages()
    if not missing:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        _run(["apt-get", "update", "-qq"], timeout=300, env=env)
        _run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
             timeout=600, env=env)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        out = getattr(exc, "stderr", "") or ""
        raise Unavailable(f"apt-get could not install {' '.join(missing)}: {out[-500:]}") from None


def _pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie is dead for our purposes
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait(predicate, timeout: float, interval: float = 0.1) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def _munge_works() -> bool:
    p = subprocess.run("munge -n | unmunge", shell=True, capture_output=True, timeout=10)
    return p.returncode == 0


@dataclass
class Cluster:
    root: Path
    cpus: int = 0
    mem_mb: int = 0
    pids: dict[str, int] = field(default_factory=dict)
    munge_started: bool = False

    @property
    def log_dir(self) -> Path:
        return self.root / "log"

    def start(self) -> None:
        for d in ("state", "spool", "log"):
            (self.root / d).mkdir(parents=True, exist_ok=True)
        self._munge()
        self._write_config()
        pidfiles = {"slurmctld": self.root / "slurmctld.pid", "slurmd": self.root / "slurmd.pid"}
        _run(["/usr/sbin/slurmctld"], timeout=30)
        if not _wait(lambda: _pid(pidfiles["slurmctld"]) is not None, 10):
            raise RuntimeError("slurmctld wrote no pid file:\n" + self.logs())
        self.pids["slurmctld"] = _pid(pidfiles["slurmctld"])
        _run(["/usr/sbin/slurmd", "-N", NODE], timeout=30)
        if not _wait(lambda: _pid(pidfiles["slurmd"]) is not None, 10):
            raise RuntimeError("slurmd wrote no pid file:\n" + self.logs())
        self.pids["slurmd"] = _pid(pidfiles["slurmd"])
        if not _wait(self._idle, 30, 0.2):
            raise RuntimeError("the node never became idle:\n" + self.logs())

    def _idle(self) -> bool:
        p = _run(["sinfo", "-h", "-N", "-o", "%T"], check=False, timeout=10)
        return p.returncode == 0 and p.stdout.strip().startswith("idle")

    def _munge(self) -> None:
        key = Path("/etc/munge/munge.key")
        if not key.exists() or key.stat().st_size == 0:
            key.write_bytes(os.urandom(1024))
            shutil.chown(key, "munge", "munge")
            key.chmod(0o400)
        for d in ("/run/munge", "/var/log/munge", "/var/lib/munge"):
            Path(d).mkdir(parents=True, exist_ok=True)
            shutil.chown(d, "munge", "munge")
        if _munge_works():
            return  # a munged already runs (not ours: left alone)
        _run(["runuser", "-u", "munge", "--", "/usr/sbin/munged"], timeout=30)
        if not _wait(_munge_works, 10):
            raise RuntimeError("munged did not start")
        pid = _pid(Path("/run/munge/munged.pid"))
        if pid is not None:
            self.pids["munged"] = pid
            self.munge_started = True

    def _write_config(self) -> None:
        self.cpus = os.cpu_count() or 1
        with open("/proc/meminfo") as fh:
            total_kb = next(int(line.split()[1]) for line in fh if line.startswith("MemTotal"))
        self.mem_mb = total_kb // 1024 - 1024
        CONF_DIR.mkdir(parents=True, exist_ok=True)
        (CONF_DIR / ".perflab-test").write_text("written by perflab's tests; removed at teardown\n")
        (CONF_DIR / "gres.conf").write_text(
            f"AutoDetect=off\nNodeName={NODE} Name=gpu Count=1 File=/dev/null\n"
        )
        r = self.root
        (CONF_DIR / "slurm.conf").write_text(
            "\n".join(
                [
                    "ClusterName=perflab-test",
                    f"SlurmctldHost={NODE}",
                    "SlurmUser=root",
                    "SlurmdUser=root",
                    "AuthType=auth/munge",
                    "CredType=cred/munge",
                    "MpiDefault=none",
                    "ProctrackType=proctrack/linuxproc",
                    "TaskPlugin=task/none",
                    "SelectType=select/cons_tres",
                    "SelectTypeParameters=CR_Core_Memory",
                    "SchedulerType=sched/backfill",
                    "ReturnToService=2",
                    f"StateSaveLocation={r}/state",
                    f"SlurmdSpoolDir={r}/spool",
                    f"SlurmctldPidFile={r}/slurmctld.pid",
                    f"SlurmdPidFile={r}/slurmd.pid",
                    f"SlurmctldLogFile={r}/log/slurmctld.log",
                    f"SlurmdLogFile={r}/log/slurmd.log",
                    "AccountingStorageType=accounting_storage/none",
                    "JobAcctGatherType=jobacct_gather/none",
                    "JobCompType=jobcomp/none",
                    # finished jobs stay visible to squeue/scontrol (no sacct here)
                    "MinJobAge=600",
                    "GresTypes=gpu",
                    f"NodeName={NODE} NodeAddr=127.0.0.1 CPUs={self.cpus} "
                    f"RealMemory={self.mem_mb} Gres=gpu:1 State=UNKNOWN",
                    f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP",
                    # a second, non-default partition: a job lands there only if asked
                    f"PartitionName={GPU_PARTITION} Nodes={NODE} Default=NO MaxTime=INFINITE "
                    "State=UP",
                    "",
                ]
            )
        )

    def logs(self) -> str:
        out = []
        for f in sorted(self.log_dir.glob("*.log")):
            out.append(f"--- {f.name}\n{f.read_text()[-3000:]}")
        return "\n".join(out)

    def job(self, jobid: str) -> str:
        """``scontrol -d show job`` of a job (finished jobs too, for MinJobAge)."""
        return _run(["scontrol", "-d", "show", "job", jobid], check=False, timeout=30).stdout

    def stop(self) -> list[str]:
        """Stop what start() started, by pid; return the names of any that would not die."""
        stuck = []
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self.pids.pop(name, None)
            if pid is None or not _alive(pid):
                continue
            os.kill(pid, signal.SIGTERM)
            if not _wait(lambda pid=pid: not _alive(pid), 15):
                os.kill(pid, signal.SIGKILL)
                if not _wait(lambda pid=pid: not _alive(pid), 5):
                    stuck.append(f"{name} ({pid})")
        for f in ("slurm.conf", "gres.conf", ".perflab-test"):
            (CONF_DIR / f).unlink(missing_ok=True)
        return stuck
