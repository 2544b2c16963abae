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
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import gc

import torch

from perflab.experiments.e12_alloc_reserved_smi import (
    AFTER_ALLOC,
    AFTER_DEL,
    AFTER_EMPTY_CACHE,
    ALLOCATED,
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


def _read_states(ctx, step, big_mib: int):
    """The counters at each state; returns ({state: {counter: MiB}}, {state: why no NVML})."""
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
    # torch.ones writes every byte, so the pages are resident (RSS) as well as allocated
    big = torch.ones(big_mib * memory.MiB, dtype=torch.uint8, device=ctx.device)
    read(AFTER_ALLOC)
    del big
    read(AFTER_DEL)
    if ctx.is_cuda:
        torch.cuda.empty_cache()
        read(AFTER_EMPTY_CACHE)
    return readings, notes


def _state_rows(ctx, readings, notes, what_state, sync_b: str) -> None:
    """Every counter at every state: a reading, or why this device has none."""
    cuda = ctx.is_cuda
    for state in STATES:
        win = what_state[state]
        r = readings.get(state)
        for metric, _, what in CUDA_COUNTERS:
            if cuda:
                ctx.row(variant=state, metric=metric, value=r[metric], unit="MiB",
                        window=f"{win}; {what}", sync_boundary=sync_b)
            else:
                ctx.unsupported(variant=state, metric=metric, unit="MiB", reason=(
                    "a CUDA caching-allocator counter; a CPU process has no caching allocator"))
        if cuda and NVML_PROCESS in r:
            ctx.row(variant=state, metric=NVML_PROCESS, value=r[NVML_PROCESS], unit="MiB",
                    window=f"{win}; NVML used GPU memory of this PID (nvidia-smi's per-process "
                    "number: CUDA context + reserved blocks)", sync_boundary=sync_b)
        else:
            ctx.unsupported(variant=state, metric=NVML_PROCESS, unit="MiB", reason=(
                notes.get(state, "") if cuda else "NVML reports GPU memory; no CUDA device"))
        if r is not None:
            ctx.row(variant=state, metric=RSS, value=r[RSS], unit="MiB",
                    window=f"{win}; VmRSS of this process (host memory)", sync_boundary=sync_b)
        else:
            ctx.unsupported(variant=state, metric=RSS, unit="MiB", reason=(
                "torch.cuda.empty_cache acts on the CUDA caching allocator; no CPU state"))


def _delta_rows(ctx, readings, notes, what_state, sync_b: str) -> None:
    """What each call moved, counter by counter."""
    metrics = ([m for m, _, _ in CUDA_COUNTERS] + [NVML_PROCESS]) if ctx.is_cuda else []
    metrics.append(RSS)
    for variant, before, after in DELTAS:
        for metric in metrics:
            a, b = readings.get(before, {}), readings.get(after, {})
            if metric in a and metric in b:
                ctx.row(variant=variant, metric=metric, value=b[metric] - a[metric],
                        unit="MiB", window=f"{what_state[after]} minus {what_state[before]}",
                        sync_boundary=sync_b)
            else:
                why = (notes.get(after) or notes.get(before) if metric == NVML_PROCESS
                       else "empty_cache is CUDA only")
                ctx.unsupported(variant=variant, metric=metric, unit="MiB",
                                reason=f"{metric} not read at both states: {why}")


def measure(ctx):
    big_mib = int(ctx.params["big_mib"])
    step = ctx.training_step()
    if step is None:
        return
    readings, notes = _read_states(ctx, step, big_mib)
    what_state = {
        STEADY: f"after {STEADY_STEPS} training steps",
        AFTER_ALLOC: f"after allocating (and writing) a {big_mib} MiB tensor",
        AFTER_DEL: "after `del big` (its only Python reference)",
        AFTER_EMPTY_CACHE: "after torch.cuda.empty_cache()",
    }
    sync_b = ("read after torch.cuda.synchronize()" if ctx.is_cuda
              else "read after the call returned (the CPU runs synchronously)")
    _state_rows(ctx, readings, notes, what_state, sync_b)
    _delta_rows(ctx, readings, notes, what_state, sync_b)
    for state in STATES:
        if state in readings:
            ctx.log(f"{state}: " + ", ".join(f"{k} {v:.1f}" for k, v in readings[state].items()))


if __name__ == "__main__":
    run("E12", measure, globals().get("snakemake"))
