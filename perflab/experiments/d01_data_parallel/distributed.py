"""Data-parallel runs (D01): N ranks started by torch.distributed's standard launcher.

The job (``scripts/d01_data_parallel.py``, one Snakemake job) writes a job file and runs::

    python -m torch.distributed.run --standalone --nnodes 1 --nproc-per-node N \\
        --module perflab.experiments.d01_data_parallel.ranks <job.json>

N fresh processes, one per rank: rank r builds the controlled workload on its device
(``cuda:<first + local rank>`` over NCCL, the CPU over gloo), wraps it in
``DistributedDataParallel`` once per configuration (:func:`configurations`: DDP's defaults,
other bucket sizes, the all-reduce forced to wait, ``no_sync()`` accumulation, a planted
straggler, fp16 compression, and DDP's own C++ all-reduce with no instrument), steps the
configurations in interleaved blocks (a balanced order, the same on every rank) and writes
its per-step record, ``rank<r>.json``. The job merges the records into D01's rows
(:mod:`perflab.experiments.d01_data_parallel.overlap`).

What a rank runs, and the instrument (a DDP communication hook timing each bucket's
all-reduce), are in :mod:`perflab.experiments.d01_data_parallel.ranks`.

The environment passes to the ranks unchanged but for ``OMP_NUM_THREADS`` (each rank's
share of the job's cores) and ``PYTHONPATH`` (this checkout first): NCCL's and the
machine's own variables are never set or cleared here.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

#: the phases of a data-parallel step, in order; a planted straggler sleeps in one of them
PHASES = ("input", "forward", "backward", "optimizer")
#: DDP's bucket size (MiB) when ``bucket_cap_mb`` is not given (its first bucket: 1 MiB)
DDP_DEFAULT_BUCKET_MB = 25
#: the configuration every other one is set against: DDP's defaults, the timed hook
BASELINE = "baseline"
#: a second, independent copy of the baseline: the A/A every comparison is held to
AA = "baseline_aa"
#: DDP's own C++ all-reduce, no hook: the step the instrument's cost is measured against
BUILTIN = "builtin"
#: the standard launcher, run as a module of this interpreter (no console script needed)
LAUNCHER = ("-m", "torch.distributed.run")
#: what each rank runs
#: the entry of one rank, a process of its own like every experiment job's script
RANK_SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "data_parallel_rank.py"


# ------------------------------------------------------------------ what runs


@dataclass(frozen=True)
class Config:
    """One way of running the data-parallel step."""

    name: str
    bucket_cap_mb: float | None = None  # None: DDP's default
    hook: str = "allreduce"  # allreduce | fp16 (both timed) | builtin (DDP's own, untimed)
    blocking: bool = False  # the hook waits for its all-reduce: no overlap with backward
    accumulate: int = 1  # micro-batches per optimizer step, no_sync() on all but the last
    plant: tuple[int, str, float] | None = None  # (rank, phase, ms) of a planted sleep

    @property
    def timed(self) -> bool:
        return self.hook != "builtin"

    def bucket_label(self) -> str:
        if self.bucket_cap_mb is None:
            return f"bucket_cap_mb {DDP_DEFAULT_BUCKET_MB} (DDP default; first bucket 1 MiB)"
        return f"bucket_cap_mb {self.bucket_cap_mb:g}"


def bucket_variant(mb: float) -> str:
    return f"bucket_{mb:g}mb"


def accumulation_variant(k: int) -> str:
    return f"accum_k{k}"


def configurations(params: Mapping[str, Any]) -> list[Config]:
    """D01's configurations from its contract's params, the baseline and its copy first."""
    out = [Config(BASELINE), Config(AA), Config(BUILTIN, hook="builtin")]
    out += [Config(bucket_variant(mb), bucket_cap_mb=float(mb))
            for mb in params["bucket_cap_mb"]]
    out.append(Config("overlap_off", blocking=True))
    out += [Config(accumulation_variant(k), accumulate=int(k))
            for k in params["accumulation"] if int(k) > 1]
    s = params["straggler"]
    out.append(Config("straggler", plant=(int(s["rank"]), s["phase"], float(s["sleep_ms"]))))
    if params.get("compress_fp16", True):
        out.append(Config("fp16_compress", hook="fp16"))
    return out


@dataclass(frozen=True)
class Plan:
    """How many ranks, over which backend, on which devices, with how many threads each."""

    ranks: int
    backend: str
    rank_threads: int
    device_type: str  # cpu or cuda
    first_index: int = 0  # rank with local rank l runs on cuda:<first_index + l>

    def device(self, local_rank: int) -> str:
        return "cpu" if self.device_type == "cpu" else f"cuda:{self.first_index + local_rank}"

    def devices(self) -> list[str]:
        """Every device the job uses: what it must hold alone while it measures."""
        return sorted({self.device(r) for r in range(self.ranks)})

    def execution(self, cfg: Config) -> str:
        """The ``execution`` contract column of ``cfg``'s rows: backend, ranks, bucket size."""
        return f"ddp {self.backend} x{self.ranks}, {cfg.bucket_label()}"


class PlanError(ValueError):
    """A D01 contract that cannot run here; ``key`` names the config key to blame."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


def plan(contract: Mapping[str, Any], *, visible_cuda: int | None, cores: int,
         cores_per_rank: bool = False) -> Plan:
    """The launch of D01's contract: ranks, backend, devices and threads per rank.

    ``ranks: auto`` is every visible GPU from the contract's device on (at least 2), or 2
    on a CPU; ``backend: auto`` is NCCL on CUDA, gloo on a CPU. ``visible_cuda`` None: a
    cluster's submit host, which cannot look (the ranks must then be named on CUDA). The
    ranks share ``cores`` equally (at least one each), or each gets ``cores`` with
    ``cores_per_rank`` (a SLURM job asks for that many per task); the contract's
    ``threads``, when a number, wins. A :class:`PlanError` names what cannot run.
    """
    p = contract["params"]
    device = str(contract["device"])
    kind = "cuda" if device.startswith("cuda") else "cpu"
    first = int(device.split(":")[1]) if ":" in device else 0
    ranks = p["ranks"]
    if ranks == "auto" and kind == "cuda" and visible_cuda is None:
        raise PlanError("experiments.D01.ranks", "a submit host sees no GPU: name the number "
                        "of ranks (e.g. --config 'experiments={D01: {ranks: 2}}')")
    if ranks == "auto":
        ranks = max(2, visible_cuda - first) if kind == "cuda" else 2
    backend = p["backend"] if p["backend"] != "auto" else ("nccl" if kind == "cuda" else "gloo")
    if backend == "nccl" and kind != "cuda":
        raise PlanError("experiments.D01.backend", "nccl needs CUDA devices (gloo runs on a CPU)")
    if kind == "cuda" and visible_cuda is not None and first + ranks > visible_cuda:
        raise PlanError("experiments.D01.ranks", f"{ranks} ranks from {device} need "
                        f"{first + ranks} CUDA devices; {visible_cuda} visible")
    if int(p["straggler"]["rank"]) >= ranks:
        raise PlanError("experiments.D01.straggler.rank",
                        f"{p['straggler']['rank']} is not a rank of {ranks}")
    threads = contract.get("threads", "auto")
    if threads != "auto":
        per_rank = int(threads)
    else:
        per_rank = max(1, cores if cores_per_rank else cores // ranks)
    return Plan(int(ranks), backend, per_rank, kind, first)


def with_plan(contract: Mapping[str, Any], p: Plan) -> dict:
    """D01's contract with its launch (``launch``): what the job measures under."""
    return {**dict(contract), "launch": asdict(p)}


def plan_of(contract: Mapping[str, Any]) -> Plan | None:
    """The launch a contract carries (:func:`with_plan`), or None."""
    got = contract.get("launch")
    return Plan(**got) if got else None


def job_resources(p: Plan | None, *, gpus: bool) -> dict[str, Any]:
    """The D01 job's scheduler resources: one task per rank on one node, a GPU per rank.

    ``mpi`` is the SLURM executor's word for a job that starts its own ranks: it submits
    ``--ntasks=N`` and runs the job's command in the allocation as it is (not under
    ``srun -n1``), and the command's torchrun starts the N ranks. ``gpus``: ask for GPUs
    (the device is CUDA, or ``gpu_jobs: true``). ``p`` None (D01 not selected): nothing
    beyond no GPU.
    """
    if p is None:
        return {"gpu": 0}
    out: dict[str, Any] = {"tasks": p.ranks, "nodes": 1, "mpi": "torchrun",
                           "gpu": p.ranks if gpus else 0}
    if gpus:  # else the executor takes `tasks` as tasks per GPU
        out["tasks_per_gpu"] = 1
    return out


# ------------------------------------------------------------------ the launcher


def torchrun_command(p: Plan, job: Path) -> list[str]:
    """The standard launcher, one node, one process per rank, each running ``scripts/data_parallel_rank.py``."""
    return [sys.executable, *LAUNCHER, "--standalone", "--nnodes", "1",
            "--nproc-per-node", str(p.ranks), str(RANK_SCRIPT), str(job)]


def rank_environment(p: Plan) -> dict[str, str]:
    """This process's environment for the ranks: their thread count and this checkout first."""
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(p.rank_threads)
    root = str(Path(__file__).resolve().parents[3])
    rest = [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if x and x != root]
    env["PYTHONPATH"] = os.pathsep.join([root, *rest])
    return env


def launch(p: Plan, contract: Mapping[str, Any], workdir: Path, log: Callable[[str], None],
           timeout_s: float) -> list[dict[str, Any]]:
    """Run the ranks under torchrun; their records, by rank. Raises if any rank failed, or
    past ``timeout_s`` seconds (the launcher and its ranks are then ended)."""
    workdir = Path(workdir)
    job = workdir / "job.json"
    job.write_text(json.dumps({"contract": dict(contract), "plan": asdict(p),
                               "out": str(workdir), "timeout_s": timeout_s}, default=str))
    cmd = torchrun_command(p, job)
    log(f"launching {p.ranks} ranks ({p.backend}, {p.rank_threads} thread(s) each): "
        + " ".join(cmd[1:4]) + " ...")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=rank_environment(p), start_new_session=True)
    # past the deadline the launcher and its ranks (one process group) are ended
    timer = threading.Timer(timeout_s, lambda: os.killpg(proc.pid, signal.SIGKILL))
    timer.start()
    tail: deque[str] = deque(maxlen=40)
    try:
        for line in proc.stdout:
            tail.append(line.rstrip())
            print(line.rstrip(), file=sys.stderr, flush=True)
        rc = proc.wait()
    finally:
        timer.cancel()
    if rc != 0:
        why = "killed at the deadline" if rc == -signal.SIGKILL else f"exit {rc}"
        raise RuntimeError(f"D01: the ranks failed ({why}); last lines:\n" + "\n".join(tail))
    return [json.loads((workdir / f"rank{r}.json").read_text()) for r in range(p.ranks)]
