"""Environment report: what a number was measured on.

The chapter opens its results with the machine (Python, PyTorch, CUDA/cuDNN,
GPU, CPU threads); every provenance JSON and the report carry this block.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: the report and figures read provenance without torch
    import torch

THREAD_ENV_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit(path: str | Path | None = None) -> str:
    """The commit the code ran at, with '+dirty' when the tree has changes.

    ``PERFLAB_GIT_COMMIT`` wins when set: a copy of the tree without its .git
    (a cluster node, a lent GPU machine) can still say which commit it ran.
    """
    if os.environ.get("PERFLAB_GIT_COMMIT"):
        return os.environ["PERFLAB_GIT_COMMIT"]
    cwd = Path(path) if path else Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
        if sha.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return sha.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def config_hash(obj: Any) -> str:
    """Short stable hash of a JSON-able config slice."""
    blob = json.dumps(obj, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def nvml_driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else v
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def host_memory_mib(field: str = "MemTotal") -> float | None:
    """A line of Linux's /proc/meminfo (``MemTotal``, ``MemAvailable``) in MiB, or None."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return float(line.split()[1]) / 1024  # the file says kB (KiB)
    except (OSError, ValueError, IndexError):
        pass
    return None


def nvml_largest_device_mib() -> float | None:
    """The total memory of this host's largest GPU as NVML reports it, MiB, or None.

    NVML answers without initialising CUDA (a configuration process must not: its forks
    measure). The largest of all devices, since NVML's order need not be CUDA's."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # not installed, no driver: NVMLError subclasses vary
        return None
    try:
        sizes = [pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).total
                 for i in range(pynvml.nvmlDeviceGetCount())]
        return max(sizes) / 2**20 if sizes else None
    except Exception:
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def gpu_state(index: int = 0) -> dict[str, Any]:
    """NVML clocks, temperature, power, throttle reasons and processes, or why not."""
    try:
        import pynvml
    except ImportError:
        return {"available": False, "reason": "nvidia-ml-py is not installed"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return {"available": False, "reason": f"NVML unavailable: {exc}"}
    state: dict[str, Any] = {"available": True}
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
        probes = {
            "sm_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            "mem_clock_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
            "temperature_c": lambda: pynvml.nvmlDeviceGetTemperature(
                h, pynvml.NVML_TEMPERATURE_GPU
            ),
            "power_w": lambda: pynvml.nvmlDeviceGetPowerUsage(h) / 1000,
            "utilization_gpu_pct": lambda: pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
            "memory_used_mib": lambda: pynvml.nvmlDeviceGetMemoryInfo(h).used / 2**20,
            "throttle_reasons": lambda: int(
                pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
                if hasattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons")
                else pynvml.nvmlDeviceGetCurrentClocksThrottleReasons(h)
            ),
            "compute_processes": lambda: len(pynvml.nvmlDeviceGetComputeRunningProcesses(h)),
            # added for the validity gate (judge_gpu_state)
            "sm_clock_max_mhz": lambda: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM),
            "power_limit_w": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000,
            "process_pids": lambda: sorted(
                {int(p.pid) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)}
                | {int(p.pid) for p in pynvml.nvmlDeviceGetGraphicsRunningProcesses(h)}),
        }
        for key, probe in probes.items():
            try:
                state[key] = probe()
            except Exception as exc:
                state[key] = None
                state.setdefault("errors", {})[key] = str(exc)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    if isinstance(state.get("throttle_reasons"), int):
        state["throttle_reason_names"] = throttle_reason_names(state["throttle_reasons"])
    state["own_pid"] = os.getpid()
    # whether this process may hold a CUDA context yet (and so be one of the listed processes)
    import torch

    state["cuda_initialized"] = bool(torch.cuda.is_initialized())
    return state


#: NVML clock-event ("throttle") reason bits, from nvml.h
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
#: the reasons that mean the clocks were held down while work ran (idle and settings do not)
THROTTLING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80


def throttle_reason_names(mask: int) -> list[str]:
    """The names of the reason bits set in an NVML clock-event mask."""
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


def judge_gpu_state(provenance: dict[str, Any], *, max_temperature_c: float = 85.0
                    ) -> dict[str, Any]:
    """Was a job's GPU valid to measure on? Judged from its provenance's NVML snapshots.

    Reads ``gpu_state_before`` and ``gpu_state_after`` (see :func:`gpu_state`).
    Flags the job when either snapshot shows a throttling reason
    (:data:`THROTTLING`: power cap, thermal or hardware slowdown), a temperature
    at or above ``max_temperature_c``, or another process on the device. NVML
    lists host PIDs; in a container this process's own PID may not appear, so
    when it is absent one listed process is taken to be this job.

    Returns ``{"status": "valid" | "flagged" | "unknown", "reasons": [...]}``;
    ``unknown`` when the job ran on a CPU or NVML gave nothing to judge.
    """
    snaps = {k: provenance.get(f"gpu_state_{k}") for k in ("before", "after")}
    usable = {k: v for k, v in snaps.items() if isinstance(v, dict) and v.get("available")}
    if not usable:
        why = next((v.get("reason") for v in snaps.values() if isinstance(v, dict)
                    and v.get("reason")), None)
        return {"status": "unknown",
                "reasons": [why or "no GPU state recorded (a CPU job, or NVML absent)"]}
    reasons = []
    for when, st in usable.items():
        mask = st.get("throttle_reasons")
        if isinstance(mask, int) and mask & THROTTLING:
            names = ", ".join(throttle_reason_names(mask & THROTTLING))
            reasons.append(f"throttled {when} the job ({names})")
        temp = st.get("temperature_c")
        if isinstance(temp, (int, float)) and temp >= max_temperature_c:
            reasons.append(f"{temp:.0f} C {when} the job (limit {max_temperature_c:.0f} C)")
        pids = st.get("process_pids")
        if isinstance(pids, list):
            own = st.get("own_pid")
            others = [p for p in pids if p != own]
            if own not in pids and others and st.get("cuda_initialized", True):
                others = others[1:]  # a PID namespace hides ours: one of them is this job
            if others:
                reasons.append(f"{len(others)} other process(es) on the device {when} the job")
        elif isinstance(st.get("compute_processes"), int) and st["compute_processes"] > 1:
            reasons.append(f"{st['compute_processes']} compute processes on the device {when} "
                           "the job")
    return {"status": "flagged" if reasons else "valid", "reasons": reasons}


# ---------------------------------------------------------------- the host's CPUs during a job

#: a job's host is flagged when the hypervisor took this share of the machine's CPU time
#: (steal: a virtual machine's vCPUs waiting for a physical one) ...
MAX_STEAL_PCT = 2.0
#: ... or when work other than the job kept this many cores busy on average
MAX_OTHER_BUSY_CORES = 0.5


def host_cpu_times() -> dict[str, float] | None:
    """The machine's CPU seconds so far, summed over its CPUs (Linux ``/proc/stat``): busy
    (user, nice, system, irq, softirq), idle (idle, iowait) and steal (time a virtual
    machine's vCPUs wanted a physical CPU and did not get one); the CPU seconds of this
    process and every process below it (:func:`_process_tree_cpu_s`: Inductor's compile
    workers, DataLoader workers); this process's page faults; and a monotonic clock. None
    where ``/proc/stat`` is absent (not Linux)."""
    import resource
    import time

    try:
        with open("/proc/stat") as fh:
            head = fh.readline().split()
    except OSError:
        return None
    if not head or head[0] != "cpu":
        return None
    tick = os.sysconf("SC_CLK_TCK")
    user, nice, system, idle, iowait, irq, softirq, steal = \
        ([int(x) / tick for x in head[1:9]] + [0.0] * 8)[:8]
    own = resource.getrusage(resource.RUSAGE_SELF)
    return {"busy_s": user + nice + system + irq + softirq, "idle_s": idle + iowait,
            "steal_s": steal, **_process_tree_cpu_s(os.getpid(), tick),
            "own_page_faults": float(own.ru_minflt + own.ru_majflt),
            "clock_s": time.monotonic()}


def _process_tree_cpu_s(root: int, tick: int) -> dict[str, dict[int, float]]:
    """``own_tree_s``: CPU seconds of ``root`` and of each of its descendants, by pid
    (``/proc/<pid>/stat``: user and system time, and that of the children each has reaped), so
    a job's own worker processes are not counted as other work on the machine;
    ``own_tree_ppid``: each one's parent, to tell a child its parent reaped (its time moves
    into the parent's) from one that left the tree."""
    procs: dict[int, tuple[int, float]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as fh:
                line = fh.read()
        except OSError:  # exited while we looked
            continue
        rest = line[line.rindex(")") + 2:].split()  # the name may hold spaces and parens
        procs[int(entry.name)] = (int(rest[1]), sum(int(x) for x in rest[11:15]) / tick)
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    tree, parent, todo = {}, {}, [root]
    while todo:
        pid = todo.pop()
        parent[pid], tree[pid] = procs.get(pid, (0, 0.0))
        todo.extend(children.get(pid, []))
    return {"own_tree_s": tree, "own_tree_ppid": parent}


def _own_cpu_s(before: dict[str, Any], after: dict[str, Any]) -> float:
    """The CPU seconds the job's process tree spent between two snapshots: each process of
    the tree at the end, less what it had at the start. A child that its parent in the tree
    reaped meanwhile adds its whole life to the parent's reaped time, so what it had at the
    start is taken off once more (else it is counted twice: a job's second read 3.5 busy
    cores on a 2-core machine); one that left the tree otherwise takes its time with it."""
    was, now = before["own_tree_s"], after["own_tree_s"]
    grown = sum(max(0.0, cpu - was.get(pid, 0.0)) for pid, cpu in now.items())
    ppid = before.get("own_tree_ppid", {})
    reaped = sum(cpu for pid, cpu in was.items() if pid not in now and ppid.get(pid) in now)
    return max(0.0, grown - reaped)


def host_contention(before: dict[str, float] | None,
                    after: dict[str, float] | None) -> dict[str, Any] | None:
    """What else the host did while a job ran, from :func:`host_cpu_times` at its two ends.

    ``steal_pct``: the hypervisor's share of all CPU time (a vCPU held off its physical
    CPU runs a host-bound step slower, whatever the job does); ``other_busy_cores``: the
    cores kept busy on average by work other than this process and its descendants (other
    jobs, a test run); ``own_busy_cores``: theirs;
    ``own_page_faults_per_s``: its page faults (memory touched for the first time, which a
    virtual machine that grows its memory on demand serves slowly), reported, not judged. A host
    flagged here is named in the ledger's validity section, as a throttled GPU is.
    """
    if not before or not after:
        return None
    d = {k: after[k] - before[k] for k in before if not k.startswith("own_tree")}
    d["own_cpu_s"] = _own_cpu_s(before, after)
    total = d["busy_s"] + d["idle_s"] + d["steal_s"]
    if d["clock_s"] <= 0 or total <= 0:
        return None
    out = {"seconds": round(d["clock_s"], 3), "cores": os.cpu_count(),
           "steal_pct": round(100 * d["steal_s"] / total, 3),
           "other_busy_cores": round(max(0.0, d["busy_s"] - d["own_cpu_s"]) / d["clock_s"], 3),
           "own_busy_cores": round(d["own_cpu_s"] / d["clock_s"], 3)}
    if "own_page_faults" in d:  # memory first touched: costly on a VM whose memory grows
        out["own_page_faults_per_s"] = round(d["own_page_faults"] / d["clock_s"], 1)
    reasons = []
    if out["steal_pct"] > MAX_STEAL_PCT:
        reasons.append(f"the hypervisor took {out['steal_pct']:.1f}% of the CPU time")
    if out["other_busy_cores"] > MAX_OTHER_BUSY_CORES:
        reasons.append(f"other work kept {out['other_busy_cores']:.2f} cores busy")
    out["status"], out["reasons"] = ("flagged" if reasons else "valid"), reasons
    return out


def environment_report(device: torch.device | str, *, cfg_hash: str | None = None) -> dict[str, Any]:
    """Everything about the machine and software a result depends on."""
    import torch

    device = torch.device(device)
    rep: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cuda_available": torch.cuda.is_available(),
        "device": str(device),
        "cpu_model": cpu_model(),
        "cpu_logical_cores": os.cpu_count(),
        "torch_num_threads": torch.get_num_threads(),
        "thread_env": {k: os.environ.get(k) for k in THREAD_ENV_VARS},
        "git_commit": git_commit(),
        "config_hash": cfg_hash,
    }
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        props = torch.cuda.get_device_properties(idx)
        rep.update(
            {
                "device_name": props.name,
                "capability": f"{props.major}.{props.minor}",
                "sm_count": props.multi_processor_count,
                "total_memory_mib": props.total_memory / 2**20,
                "driver": nvml_driver_version(),
                "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
                # cuDNN convolutions run TF32 by default, whatever the matmuls do
                "tf32_cudnn": torch.backends.cudnn.allow_tf32,
            }
        )
    else:
        rep["device_name"] = cpu_model()
    return rep


def device_name(device: torch.device | str) -> str:
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        return torch.cuda.get_device_name(idx)
    return cpu_model()


def device_tag(device: torch.device | str) -> str:
    """Machine class for result directories: e.g. ``cuda-nvidia-h200``, ``cpu-2c``."""
    if str(device).startswith("cuda"):  # torch only for a GPU's name (the workflow's parse)
        import torch

        device = torch.device(device)
        slug = re.sub(r"[^a-z0-9]+", "-", device_name(device).lower()).strip("-")
        return f"cuda-{slug}"
    return f"cpu-{os.cpu_count()}c"


def process_age_s() -> float | None:
    """Seconds since this process was created (Linux /proc; None elsewhere): what starting
    the interpreter and importing cost before a job's first line of work."""
    try:
        stat = Path("/proc/self/stat").read_text()
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: starttime, clock ticks
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def portable_path(value: Any) -> Any:
    """A path as provenance may ship it: relative to the working directory when under it,
    else only its name under ``<tmp>``/``<abs>``; anything not an absolute path unchanged.

    Provenance is committed with reference runs, so it names no machine's directories.
    """
    if not isinstance(value, str) or not os.path.isabs(value):
        return value
    cwd = os.getcwd()
    if value == cwd or value.startswith(cwd.rstrip(os.sep) + os.sep):
        return os.path.relpath(value, cwd)
    tmp = tempfile.gettempdir()
    if value.startswith(tmp.rstrip(os.sep) + os.sep):
        return "<tmp>/" + os.path.relpath(value, tmp)
    return "<abs>/" + os.path.basename(value)


def scrub_paths(obj: Any, root: str | None = None) -> Any:
    """``obj`` (parsed JSON) with every absolute path made portable (:func:`portable_path`),
    relative to ``root`` (the run's working directory) where given."""
    if isinstance(obj, dict):
        return {k: scrub_paths(v, root) for k, v in obj.items()}
    if isinstance(obj, list):
        return [scrub_paths(v, root) for v in obj]
    if isinstance(obj, str) and os.path.isabs(obj) and "\n" not in obj:
        if root and obj.startswith(root.rstrip(os.sep) + os.sep):
            return os.path.relpath(obj, root)
        if "/.snakemake/" in obj:  # Snakemake's copy of a job script, under the run's root
            return obj[obj.index("/.snakemake/") + 1:]
        return portable_path(obj)
    return obj


# ---------------------------------------------------------------- instrument code

PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: the measuring code, by floor: the core, the instruments, the job harness, and each
#: multi-file experiment's own library (its sub-package less the read-side ``__init__``).
#: The kit, the views, the configuration and the experiments' read side only read results:
#: a change to them changes no measurement, so they are not part of a result's code
MEASURING = ("core/*.py", "instruments/*.py", "pipeline/runner.py", "experiments/*/*.py")
#: files the globs above match that only read results
READ_SIDE = ("__init__", "sanitize", "floors")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def instrument_code(script: str | Path | None = None) -> dict[str, Any]:
    """The code a measurement runs: a hash per file of the perflab package's measuring
    modules (all but :data:`READ_SIDE` and the per-experiment read side) and of the job's
    script, and one hash over them all."""
    files = {f"perflab/{p.relative_to(PACKAGE_DIR).as_posix()}": _sha(p)
             for pattern in MEASURING for p in sorted(PACKAGE_DIR.glob(pattern))
             if p.stem not in READ_SIDE}
    if script is not None and Path(script).is_file():
        files[f"scripts/{Path(script).name}"] = _sha(Path(script))
    blob = json.dumps(files, sort_keys=True).encode()
    return {"hash": hashlib.sha256(blob).hexdigest()[:12], "files": files}


def code_changes(provenance: dict[str, dict[str, Any]],
                 scripts_dir: str | Path | None = None) -> dict[str, list[str]]:
    """{experiment: files whose code differs from this checkout's} for each result whose
    provenance records its instrument code (:func:`instrument_code`); a file this checkout
    lacks counts as changed."""
    scripts_dir = Path(scripts_dir) if scripts_dir else PACKAGE_DIR.parent / "scripts"
    out = {}
    for eid, prov in provenance.items():
        recorded = (prov.get("instrument_code") or {}).get("files")
        if not recorded:
            continue
        script = next((scripts_dir / Path(f).name for f in recorded if f.startswith("scripts/")),
                      None)
        now = instrument_code(script)["files"]
        changed = sorted(f for f in set(recorded) | set(now) if recorded.get(f) != now.get(f))
        if changed:
            out[eid] = changed
    return out
