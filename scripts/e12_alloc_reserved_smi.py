"""E12 — allocated, reserved, max reserved and NVML: four counters, four stories.

After a few steps of the controlled training step (the steady state), a
``big_mib`` tensor is allocated (and written, so its pages exist), its only
Python reference is deleted, then ``torch.cuda.empty_cache()`` is called. At
each of the four states the job reads ``memory_allocated`` (live tensors),
``memory_reserved`` (held by the caching allocator), ``max_memory_reserved``
(a high-water mark) and NVML's used memory of this process (what nvidia-smi
shows per process: the CUDA context and every reserved block). Where NVML
cannot attribute memory to this process the row says so, with NVML's answer.

The two deltas the chapter reads are rows of their own: what ``del`` moved
and what ``empty_cache()`` moved, in each counter.

On a CPU the allocator and NVML counters are ``unsupported``; the process
RSS is read at the same states instead (``empty_cache`` has no CPU state).

A ``big_mib`` the device cannot hold (on a CPU: more than the host has available, which
is not even attempted, since the OOM killer would answer instead of the allocator) leaves
the steady state's rows and makes every later reading an ``oom`` row naming the size.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import gc

import torch

from perflab.core import env
from perflab.experiments.e12_alloc_reserved_smi import (
    AFTER_ALLOC,
    AFTER_DEL,
    AFTER_EMPTY_CACHE,
    ALLOCATED,
    COUNTERS,
    DELTAS,
    MAX_RESERVED,
    NVML_PROCESS,
    RESERVED,
    RSS,
    STATES,
    STEADY,
)
from perflab.instruments import memory
from perflab.pipeline.runner import run

#: training steps before the "steady state" reading (optimizer state exists after the first)
STEADY_STEPS = 3
CUDA_COUNTERS = ((ALLOCATED, "allocated_mib", "torch.cuda.memory_allocated: live tensors"),
                 (RESERVED, "reserved_mib", "torch.cuda.memory_reserved: held by the caching "
                  "allocator"),
                 (MAX_RESERVED, "max_reserved_mib", "torch.cuda.max_memory_reserved: "
                  "high-water mark since the process started"))


def _allocate(ctx, big_mib: int):
    """The large tensor, or (None, why not) when the device cannot hold it."""
    if not ctx.is_cuda:
        available = env.host_memory_mib("MemAvailable")
        if available is not None and big_mib > available:
            return None, (f"not allocated: {big_mib} MiB is more than this host has available "
                          f"(MemAvailable {available:.0f} MiB); writing it would end in the "
                          "OOM killer, not an allocator error")
    try:
        # torch.ones writes every byte, so the pages are resident (RSS) as well as allocated
        return torch.ones(big_mib * memory.MiB, dtype=torch.uint8, device=ctx.device), ""
    except (RuntimeError, MemoryError) as exc:
        if not memory.is_oom(exc):
            raise
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return None, f"allocating the {big_mib} MiB tensor ran out of memory: {first}"


def _read_states(ctx, step, big_mib: int):
    """The counters at each state; returns ({state: {counter: MiB}}, {state: why no NVML},
    why the large tensor could not be allocated or "")."""
    for _ in range(STEADY_STEPS):
        step()
    ctx.sync()
    gc.collect()
    readings: dict[str, dict[str, float]] = {}
    notes: dict[str, str] = {}

    def read(state: str) -> None:
        ctx.sync()
        r: dict[str, float] = {}
        if ctx.is_cuda:
            c = memory.cuda_counters(ctx.device)
            r.update({metric: getattr(c, attr) for metric, attr, _ in CUDA_COUNTERS})
            used, why = memory.nvml_process_used_mib(ctx.device)
            if used is not None:
                r[NVML_PROCESS] = used
            else:
                notes[state] = why
        r[RSS] = memory.rss_mib()
        readings[state] = r

    read(STEADY)
    big, oom = _allocate(ctx, big_mib)
    if big is None:  # no later state exists: each of its readings becomes an oom row
        ctx.log(f"OOM: {oom}")
        gc.collect()
        if ctx.is_cuda:
            torch.cuda.empty_cache()
        return readings, notes, oom
    read(AFTER_ALLOC)
    del big
    read(AFTER_DEL)
    if ctx.is_cuda:
        torch.cuda.empty_cache()
        read(AFTER_EMPTY_CACHE)
    return readings, notes, ""


#: what each counter reads, for its rows' window
WHAT = {**{metric: what for metric, _, what in CUDA_COUNTERS},
        NVML_PROCESS: "NVML used GPU memory of this PID (nvidia-smi's per-process number: "
                      "CUDA context + reserved blocks)",
        RSS: "VmRSS of this process (host memory)"}


def _why_not(cuda: bool, state: str, metric: str, notes, oom: str) -> tuple[str, str]:
    """(status, reason) of a counter with no reading at ``state``."""
    if not cuda and metric != RSS:
        return "unsupported", ("NVML reports GPU memory; no CUDA device" if metric == NVML_PROCESS
                               else "a CUDA caching-allocator counter; a CPU process has no "
                                    "caching allocator")
    if not cuda and state == AFTER_EMPTY_CACHE:
        return "unsupported", ("torch.cuda.empty_cache acts on the CUDA caching allocator; "
                               "no CPU state")
    if oom and state != STEADY:  # a state the failed allocation never reached
        return "oom", f"not measured: {oom}"
    return "unsupported", notes.get(state, "")  # NVML could not attribute this process


def _state_rows(ctx, readings, notes, what_state, sync_b: str, oom: str) -> None:
    """Every counter at every state: a reading, or why this device has none."""
    for state in STATES:
        r = readings.get(state, {})
        for metric in COUNTERS:
            if metric in r:
                ctx.row(variant=state, metric=metric, value=r[metric], unit="MiB",
                        window=f"{what_state[state]}; {WHAT[metric]}", sync_boundary=sync_b)
            else:
                status, why = _why_not(ctx.is_cuda, state, metric, notes, oom)
                ctx.unsupported(variant=state, metric=metric, unit="MiB", status=status,
                                reason=why)


def _delta_rows(ctx, readings, notes, what_state, sync_b: str, oom: str) -> None:
    """What each call moved, counter by counter."""
    for variant, before, after in DELTAS:
        for metric in COUNTERS:
            a, b = readings.get(before, {}), readings.get(after, {})
            if metric in a and metric in b:
                ctx.row(variant=variant, metric=metric, value=b[metric] - a[metric],
                        unit="MiB", window=f"{what_state[after]} minus {what_state[before]}",
                        sync_boundary=sync_b)
                continue
            # the state this device cannot read at all says more than one never reached
            whys = sorted((_why_not(ctx.is_cuda, state, metric, notes, oom)
                           for state, r in ((before, a), (after, b)) if metric not in r),
                          key=lambda w: w[0] != "unsupported")
            status, why = whys[0]
            ctx.unsupported(variant=variant, metric=metric, unit="MiB", status=status,
                            reason=f"{metric} not read at both states: {why}")


def measure(ctx):
    big_mib = int(ctx.params["big_mib"])
    step = ctx.training_step()
    if step is None:
        return
    readings, notes, oom = _read_states(ctx, step, big_mib)
    what_state = {
        STEADY: f"after {STEADY_STEPS} training steps",
        AFTER_ALLOC: f"after allocating (and writing) a {big_mib} MiB tensor",
        AFTER_DEL: "after `del big` (its only Python reference)",
        AFTER_EMPTY_CACHE: "after torch.cuda.empty_cache()",
    }
    sync_b = ("read after torch.cuda.synchronize()" if ctx.is_cuda
              else "read after the call returned (the CPU runs synchronously)")
    _state_rows(ctx, readings, notes, what_state, sync_b, oom)
    _delta_rows(ctx, readings, notes, what_state, sync_b, oom)
    for state in STATES:
        if state in readings:
            ctx.log(f"{state}: " + ", ".join(f"{k} {v:.1f}" for k, v in readings[state].items()))


if __name__ == "__main__":
    run("E12", measure, globals().get("snakemake"))
