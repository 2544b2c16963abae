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
from pathlib import Path
from typing import Any

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
    return state


def environment_report(device: torch.device | str, *, cfg_hash: str | None = None) -> dict[str, Any]:
    """Everything about the machine and software a result depends on."""
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
            }
        )
    else:
        rep["device_name"] = cpu_model()
    return rep


def device_name(device: torch.device | str) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        idx = device.index if device.index is not None else torch.cuda.current_device()
        return torch.cuda.get_device_name(idx)
    return cpu_model()


def device_tag(device: torch.device | str) -> str:
    """Machine class for result directories: e.g. ``cuda-nvidia-h200``, ``cpu-2c``."""
    device = torch.device(device)
    if device.type == "cuda":
        slug = re.sub(r"[^a-z0-9]+", "-", device_name(device).lower()).strip("-")
        return f"cuda-{slug}"
    return f"cpu-{os.cpu_count()}c"
