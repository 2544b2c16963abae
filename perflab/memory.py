"""Memory instruments: CUDA allocator counters, NVML, and the process's RSS.

No single counter is "the memory my model uses" (the chapter's three-counter
lesson), so each reading names what it is: allocated (live tensors),
reserved (held by the caching allocator), the peaks of both, NVML's
per-process number (what nvidia-smi shows, context included), and on CPU the
process's resident set and its high-water mark (VmHWM).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import torch

MiB = 1024**2


@dataclass
class CudaCounters:
    allocated_mib: float
    reserved_mib: float
    max_allocated_mib: float
    max_reserved_mib: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def cuda_counters(device: torch.device | str | None = None) -> CudaCounters:
    """The caching allocator's four numbers for ``device``, in MiB."""
    return CudaCounters(
        allocated_mib=torch.cuda.memory_allocated(device) / MiB,
        reserved_mib=torch.cuda.memory_reserved(device) / MiB,
        max_allocated_mib=torch.cuda.max_memory_allocated(device) / MiB,
        max_reserved_mib=torch.cuda.max_memory_reserved(device) / MiB,
    )


def reset_cuda_peaks(device: torch.device | str | None = None) -> None:
    torch.cuda.reset_peak_memory_stats(device)


def nvml_process_used_mib(device: torch.device | str | None = None) -> tuple[float | None, str]:
    """NVML's used memory for this process on the device, or (None, why not).

    Drivers that cannot attribute memory per process (WDDM, some containers
    whose PID namespace hides the host PID) return nothing usable; the reason
    is returned so the row can say so instead of inventing a number.
    """
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError subclasses vary by driver
        return None, f"NVML unavailable: {exc}"
    try:
        index = torch.device(device).index if device is not None else None
        handle = pynvml.nvmlDeviceGetHandleByIndex(index or 0)
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        pid = os.getpid()
        for p in procs:
            if p.pid == pid:
                used = getattr(p, "usedGpuMemory", None)
                if used is None:
                    return None, "NVML lists this process but reports no per-process memory"
                return used / MiB, ""
        return None, (
            f"NVML lists {len(procs)} process(es) on the device, none with this PID "
            "(PID namespace or driver cannot attribute per-process memory)"
        )
    except Exception as exc:
        return None, f"NVML query failed: {exc}"
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _proc_status_kib(field: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return float(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def rss_mib() -> float:
    """Current resident set size of this process (Linux VmRSS), MiB."""
    return _proc_status_kib("VmRSS") / 1024


def vmhwm_mib() -> float:
    """Peak resident set size of this process so far (Linux VmHWM), MiB.

    A process-level high-water mark, not a tensor ledger: it includes the
    interpreter, torch's libraries and anything freed since. Compare values
    only between fresh processes running the same code up to the measured
    region, which is why each configuration is its own job.
    """
    return _proc_status_kib("VmHWM") / 1024


def reset_vmhwm() -> bool:
    """Reset VmHWM to the current RSS (Linux ``clear_refs`` 5); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def bytes_of_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


@contextmanager
def capped_cuda_budget(gib: float, device: torch.device | str | None = None):
    """Cap this process's CUDA caching allocator at ``gib`` GiB of ``device``; restore on exit.

    Emulates a smaller card on a large one (the chapter's 12 GiB desktop GPU on
    an H200): ``torch.cuda.set_per_process_memory_fraction`` makes an
    allocation that would push reserved memory past the cap raise
    ``torch.cuda.OutOfMemoryError`` as the small card would. Only the
    allocator is capped: the CUDA context and other processes are not counted.
    Cached blocks are released first, so memory reserved before the cap does
    not count against it. Yields the fraction of total memory that was set.
    On exit the fraction goes back to 1.0 (the whole device).
    """
    dev = torch.device(device) if device is not None else torch.device("cuda")
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    total = torch.cuda.get_device_properties(index).total_memory
    fraction = min(1.0, gib * 1024**3 / total)
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(fraction, index)
    try:
        yield fraction
    finally:
        torch.cuda.empty_cache()
        torch.cuda.set_per_process_memory_fraction(1.0, index)
