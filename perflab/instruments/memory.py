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
from typing import Any

import torch

from perflab.core.names import OOM_BRANCHES, OOM_INCONCLUSIVE, OOM_VERDICTS  # noqa: F401 (re-exported)

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


def is_oom(exc: BaseException) -> bool:
    """Whether ``exc`` is an allocation that ran out of memory: CUDA's ``OutOfMemoryError``,
    or the CPU allocator's failure, a plain ``RuntimeError`` ("can't allocate memory")."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    text = str(exc).lower()
    return isinstance(exc, (RuntimeError, MemoryError)) and (
        "out of memory" in text or "can't allocate memory" in text)


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


# ------------------------------------------------------------ tensor accounting
#
# Device-independent byte counts of named tensors (each distinct storage once).
# Unlike the allocator counters they say *whose* bytes these are, and they work
# on a CPU, where no allocator counter exists; they do not see temporaries.


def _storage_bytes(tensors) -> int:
    seen: dict[tuple[str, int], int] = {}
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            continue
        s = t.untyped_storage()
        seen[(str(t.device), s.data_ptr())] = s.nbytes()
    return sum(seen.values())


def bytes_of_gradients(model: torch.nn.Module) -> int:
    """Bytes of the ``.grad`` tensors the parameters hold now (0 after zero_grad(set_to_none))."""
    return _storage_bytes(p.grad for p in model.parameters() if p.grad is not None)


def bytes_of_optimizer_state(opt: torch.optim.Optimizer) -> int:
    """Bytes of every tensor in the optimizer's per-parameter state (AdamW: moments, step)."""
    return _storage_bytes(v for state in opt.state.values() for v in state.values())


def bytes_saved_by_graph(roots, exclude=()) -> int:
    """Bytes of the tensors autograd saved for backward, reachable from ``roots``' graphs.

    Walks each root's ``grad_fn`` graph and reads the documented
    ``grad_fn._saved_<name>`` attributes; each distinct storage counts once,
    and storages of ``exclude`` (e.g. the parameters, persistent anyway) are
    left out. This is what a retained graph keeps alive, counted tensor by
    tensor, on any device.
    """
    skip = {(str(t.device), t.untyped_storage().data_ptr()) for t in exclude}
    seen_nodes: set[int] = set()
    # the Python wrappers of autograd nodes are made on access: keep every one visited
    # alive, or a freed wrapper's id() is reused by the next and a node is skipped
    visited: list = []
    saved: dict[tuple[str, int], int] = {}
    stack = [r.grad_fn for r in roots if isinstance(r, torch.Tensor) and r.grad_fn is not None]
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        visited.append(node)
        for name in dir(node):
            if not name.startswith("_saved_"):
                continue
            try:
                value = getattr(node, name)
            except RuntimeError:  # freed by a backward already
                continue
            for t in value if isinstance(value, (tuple, list)) else (value,):
                if isinstance(t, torch.Tensor):
                    key = (str(t.device), t.untyped_storage().data_ptr())
                    if key not in skip:
                        saved[key] = t.untyped_storage().nbytes()
        stack.extend(fn for fn, _ in node.next_functions if fn is not None)
    return sum(saved.values())


def bytes_saved_during(fn, exclude=()) -> tuple[int, Any]:
    """(bytes of the tensors autograd saved for backward while ``fn`` ran, what it returned).

    Counted as autograd packs them (``torch.autograd.graph.saved_tensors_hooks``), so it
    sees inside an opaque function (a user's whole training step, its backward included):
    each distinct storage once, those of ``exclude`` (e.g. the parameters) left out. The
    activations a step holds between its forward and its backward, on any device.
    """
    skip = {(str(t.device), t.untyped_storage().data_ptr()) for t in exclude}
    saved: dict[tuple[str, int], int] = {}

    def pack(t):
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            key = (str(t.device), t.untyped_storage().data_ptr())
            if key not in skip:
                saved[key] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return sum(saved.values()), out


# ------------------------------------------------------------ the OOM decomposition


def diagnose_oom(
    *, peak_small_mib: float, peak_large_mib: float, persistent_mib: float,
    growth_mib_per_step: float, reserved_at_oom_mib: float | None = None,
    allocated_at_oom_mib: float | None = None,
) -> tuple[str, dict[str, str]]:
    """The branch the evidence supports, and the evidence line of every branch.

    The chapter's order: allocated climbing across identical steps means
    *accumulating* (a smaller batch only delays it); else persistent state
    (parameters, gradients, optimizer state) holding at least half the peak
    means *persistent* (the batch was never the pressure); else the peak
    moving with the batch by at least half of what is above persistent state
    means *shape-dependent*; else reserved-but-unallocated taking at least a
    quarter of the reservation when it failed points at the *allocator*.
    Otherwise ``inconclusive``.
    """
    climbing = growth_mib_per_step > max(1.0, 0.01 * peak_large_mib)
    share = persistent_mib / peak_large_mib if peak_large_mib > 0 else 0.0
    above = max(peak_large_mib - persistent_mib, 0.0)
    moved = peak_large_mib - peak_small_mib
    shape = above > 0 and moved >= 0.5 * above
    slack = None
    if reserved_at_oom_mib is not None and allocated_at_oom_mib is not None:
        slack = reserved_at_oom_mib - allocated_at_oom_mib
    alloc = slack is not None and reserved_at_oom_mib > 0 and slack >= 0.25 * reserved_at_oom_mib
    lines = {
        "accumulating": f"allocated grows {growth_mib_per_step:+.2f} MiB/step across identical "
                        f"steps ({'climbing' if climbing else 'flat'}; climbing means > "
                        f"max(1 MiB, 1% of the peak) per step)",
        "persistent": f"parameters + gradients + optimizer state = {persistent_mib:.1f} MiB, "
                      f"{100 * share:.0f}% of the larger batch's peak (dominant at >= 50%)",
        "shape_dependent": f"the peak moved {moved:+.1f} MiB between the two batch sizes, of "
                           f"{above:.1f} MiB above persistent state (dominant at >= 50%)",
        "allocator": ("reserved minus allocated when it failed: "
                      + (f"{slack:.1f} of {reserved_at_oom_mib:.1f} MiB reserved (dominant at "
                         ">= 25%)" if slack is not None else "not read (no OOM caught)")),
    }
    for branch, verdict in (("accumulating", climbing), ("persistent", share >= 0.5),
                            ("shape_dependent", shape), ("allocator", alloc)):
        if verdict:
            return branch, lines
    return OOM_INCONCLUSIVE, lines


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
