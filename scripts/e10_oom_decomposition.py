"""E10 — an out-of-memory error, decomposed: persistent, shape-dependent, accumulating, allocator.

The constructed case is ``oom_mlp`` under AdamW (parameters + gradients + two
moment buffers alone exceed the chapter's 12 GiB card at the chapter's
sizes). The job collects the evidence the chapter's decision procedure asks
for, then reproduces the failure:

1. Evidence, uncapped, on the same device, for each of the two batch sizes
   (a fresh optimizer each, caches emptied, peaks reset): the peak allocated
   over ``steps`` identical training steps; allocated after each step (flat
   or climbing from step 2 on); the allocation of the first ``.step()``
   (allocated after minus before it) and the optimizer state's bytes;
   parameter and gradient bytes (tensor accounting).
2. The OOM: ``torch.cuda.set_per_process_memory_fraction`` caps this process
   at ``budget_gib`` (so the 141 GiB H200 behaves like the 12 GiB card), and
   the larger batch's steps run again. The ``OutOfMemoryError`` is caught and
   becomes an ``oom`` row naming the phase and step where it struck, beside
   allocated / reserved / peak at the failure. The cap is lifted afterwards.
3. The diagnosis the evidence supports (:func:`perflab.instruments.memory.diagnose_oom`).

On a CPU no allocator cap exists (capping the process's address space would
fail anywhere, not in the allocator), so the OOM and the diagnosis are
``unsupported`` rows; the evidence is measured with the process's instruments
(peak RSS per batch size, RSS after each step) and tensor accounting.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import gc
from dataclasses import dataclass

import numpy as np
import torch

from perflab.experiments.e10_oom_decomposition import (
    AFTER_STEP,
    ALLOCATED,
    BYTES,
    CAPPED_RUN,
    FIRST_STEP_ALLOCATION,
    GRAD_BYTES,
    MEMORY_BUDGET,
    OOM,
    OPTIMIZER_STATE_BYTES,
    PARAMETERS,
    PEAK_ALLOCATED,
    PEAK_MOVED_BY_BATCH,
    PEAK_RSS,
    PERSISTENT,
    RSS,
    SUPPORTED,
    batch_variant,
    diagnosis_variant,
    growth_metric,
)
from perflab.instruments import memory
from perflab.pipeline.runner import run

MiB = memory.MiB
WORKLOAD = "oom_mlp"
ACCOUNTING = "tensor accounting (distinct storages' bytes)"


def _train_steps(w, opt, x, y, steps, where, after_step, sync, read):
    """``steps`` training steps; ``where[0]`` names the running phase (for an OOM's row).

    Returns the allocation of the first ``.step()`` (read() after minus before).
    """
    first_step_alloc = None
    for s in range(1, steps + 1):
        where[0] = f"zero_grad of step {s}"
        opt.zero_grad(set_to_none=True)
        where[0] = f"forward of step {s}"
        loss = w.loss_fn(w.model(x), y)
        where[0] = f"backward of step {s}"
        loss.backward()
        del loss
        where[0] = f"optimizer .step() of step {s}"
        before = read()
        opt.step()
        sync()
        if s == 1:
            first_step_alloc = read() - before
        after_step.append(read())
    where[0] = "after the last step"
    return first_step_alloc


@dataclass
class Evidence:
    """One batch size's uncapped run: what the decision procedure weighs."""

    batch: int
    peak: float  # MiB: peak allocated (CUDA) or VmHWM (CPU)
    peak_reset: bool  # False when the kernel refused to reset VmHWM
    after_step: list[float]  # allocated (CUDA) or RSS (CPU) after each step, MiB
    growth: float  # MiB/step, least-squares slope after steps 2..N
    first_step_alloc: float | None  # allocated after minus before step 1's .step()
    gradients: float  # MiB
    optimizer_state: float  # MiB
    persistent: float  # parameters + gradients + optimizer state, MiB


def _uncapped_run(ctx, w, batch: int, steps: int, read, param_mib: float) -> Evidence:
    """``steps`` identical training steps at ``batch``, a fresh optimizer, peaks reset."""
    x, y = w.batch_on(ctx.device, batch)
    opt = w.make_optimizer(w.model.parameters())
    gc.collect()
    ctx.sync()
    if ctx.is_cuda:
        torch.cuda.empty_cache()
        memory.reset_cuda_peaks(ctx.device)
        reset = True
    else:
        reset = memory.reset_vmhwm()
    after = []
    first = _train_steps(w, opt, x, y, steps, [""], after, ctx.sync, read)
    ctx.sync()
    peak = (memory.cuda_counters(ctx.device).max_allocated_mib if ctx.is_cuda
            else memory.vmhwm_mib())
    growth = float(np.polyfit(np.arange(2, steps + 1), after[1:], 1)[0])
    grads = memory.bytes_of_gradients(w.model) / MiB
    state = memory.bytes_of_optimizer_state(opt) / MiB
    del opt, x, y
    for prm in w.model.parameters():
        prm.grad = None
    gc.collect()
    if ctx.is_cuda:
        torch.cuda.empty_cache()
    return Evidence(batch, peak, reset, after, growth, first, grads, state,
                    param_mib + grads + state)


def _evidence_rows(ctx, ev: Evidence, steps: int, sync_b: str) -> None:
    """The rows (and the per-step samples) of one batch size's uncapped run."""
    v, cuda = batch_variant(ev.batch), ctx.is_cuda
    instrument = ALLOCATED if cuda else RSS
    runs = f"batch {ev.batch}, {steps} identical training steps, uncapped"
    if cuda:
        ctx.row(variant=v, metric=PEAK_ALLOCATED, value=ev.peak, unit="MiB",
                window=f"{runs}; torch.cuda.max_memory_allocated (reset after the "
                "optimizer was built)", sync_boundary=sync_b, n=steps)
    else:
        span = "VmHWM reset before the steps" if ev.peak_reset else "VmHWM since process start"
        ctx.row(variant=v, metric=PEAK_RSS, value=ev.peak, unit="MiB",
                window=f"{runs}; peak resident set of the whole process ({span}; the "
                "smaller batch ran first in the same process)", sync_boundary=sync_b, n=steps)
        ctx.unsupported(variant=v, metric=PEAK_ALLOCATED, unit="MiB",
                        reason="torch.cuda.max_memory_allocated needs a CUDA device")
    ctx.row(variant=v, metric=growth_metric(instrument), value=ev.growth, unit="MiB/step",
            window=f"{runs}; least-squares slope of {instrument} after steps 2..{steps} "
            "(step 1 adds the optimizer state)", sync_boundary=sync_b, n=steps - 1)
    for s, value in enumerate(ev.after_step, start=1):
        ctx.samples.append({"experiment": ctx.eid, "variant": v, "execution": "eager",
                            "metric": f"{instrument}{AFTER_STEP}", "unit": "MiB",
                            "block": 0, "index": s, "value": value})
    if cuda:
        ctx.row(variant=v, metric=FIRST_STEP_ALLOCATION, value=ev.first_step_alloc,
                unit="MiB", window=f"{runs}; allocated after minus before step 1's .step()",
                sync_boundary=sync_b)
    else:
        ctx.unsupported(variant=v, metric=FIRST_STEP_ALLOCATION, unit="MiB",
                        reason="an allocation delta needs torch.cuda.memory_allocated; "
                        "the optimizer state's bytes are the tensor-accounting row")
    ctx.row(variant=v, metric=OPTIMIZER_STATE_BYTES, value=ev.optimizer_state, unit="MiB",
            window=f"{runs}; after the steps; {ACCOUNTING}", sync_boundary="n/a")
    ctx.row(variant=v, metric=GRAD_BYTES, value=ev.gradients, unit="MiB",
            window=f"{runs}; after the last step; {ACCOUNTING}", sync_boundary="n/a")
    ctx.log(f"batch {ev.batch}: peak {ev.peak:.1f} MiB, growth {ev.growth:+.3f} MiB/step, "
            f"optimizer state {ev.optimizer_state:.1f} MiB, first .step() allocated "
            f"{ev.first_step_alloc}")


def _persistent_rows(ctx, small: Evidence, large: Evidence, sync_b: str) -> None:
    ctx.row(variant=PERSISTENT, metric=BYTES, value=large.persistent, unit="MiB",
            window=f"parameters + gradients + optimizer state at batch {large.batch}; "
            f"{ACCOUNTING}", sync_boundary="n/a")
    if ctx.is_cuda:
        ctx.row(variant=PEAK_MOVED_BY_BATCH, metric=PEAK_ALLOCATED,
                value=large.peak - small.peak, unit="MiB",
                window=f"peak at batch {large.batch} minus peak at batch {small.batch} "
                "(uncapped)", sync_boundary=sync_b)


def record_capped_run(ctx, attempt, *, batch, cap_note):
    """Run ``attempt(where)``; an out-of-memory error becomes an ``oom`` row, never a crash.

    Returns the counters read at the failure ({} when it did not fail, or on a
    device without allocator counters).
    """
    where = ["building the optimizer"]
    failure = None
    at_failure: dict[str, float] = {}
    try:
        attempt(where)
    except torch.cuda.OutOfMemoryError as exc:
        first_line = (str(exc).strip().splitlines() or ["out of memory"])[0]
        failure = (f"torch.OutOfMemoryError during the {where[0]} at batch {batch} "
                   f"({cap_note}): {first_line[:300]}")
        if ctx.is_cuda:  # read before anything is freed: the state the allocator failed in
            c = memory.cuda_counters(ctx.device)
            at_failure = {"allocated_at_oom": c.allocated_mib,
                          "reserved_at_oom": c.reserved_mib,
                          "peak_allocated_before_oom": c.max_allocated_mib}
    gc.collect()  # the exception and its frames are gone: free what they held
    if ctx.is_cuda:
        torch.cuda.empty_cache()
    if failure is None:
        ctx.row(variant=CAPPED_RUN, metric=OOM, value=0.0, unit="bool",
                window=f"batch {batch}, {cap_note}: every step ran (no OOM: the construction "
                "did not exceed the budget on this device)", sync_boundary="n/a")
        ctx.log(f"capped run at batch {batch}: no OOM")
        return at_failure
    ctx.unsupported(variant=CAPPED_RUN, metric=OOM, unit="bool", status="oom", reason=failure,
                    window=f"batch {batch}, {cap_note}")
    for metric, value in at_failure.items():
        ctx.row(variant=CAPPED_RUN, metric=metric, value=value, unit="MiB",
                window=f"read in the handler of the OOM ({where[0]}, batch {batch}, {cap_note})",
                sync_boundary="read without synchronize (host-side allocator bookkeeping)")
    ctx.log(f"capped run: {failure}")
    return at_failure


def _capped_run(ctx, w, batch: int, steps: int, budget_gib: float, read) -> dict[str, float]:
    """The OOM itself: the larger batch's steps again, the allocator capped at the budget.

    Returns the counters read at the failure ({} when none was caught).
    """
    if not ctx.is_cuda:
        ctx.unsupported(variant=CAPPED_RUN, metric=OOM, unit="bool", reason=(
            "no per-process allocator cap on a CPU: torch's CPU allocator has no memory "
            "fraction, and an address-space limit (RLIMIT_AS) would fail wherever the "
            "process next maps memory, not where the workload needs it"))
        return {}
    total = torch.cuda.get_device_properties(ctx.device).total_memory
    fraction = budget_gib * 1024**3 / total
    if fraction >= 1.0:
        ctx.unsupported(variant=CAPPED_RUN, metric=OOM, unit="bool", reason=(
            f"the device has {total / 1024**3:.1f} GiB, not more than the {budget_gib} GiB "
            "budget: a cap cannot emulate it"))
        return {}
    cap_note = (f"capped at {budget_gib:g} GiB = memory fraction {fraction:.4f} of "
                f"{total / 1024**3:.1f} GiB")
    x, y = w.batch_on(ctx.device, batch)

    def attempt(where):
        opt = w.make_optimizer(w.model.parameters())
        _train_steps(w, opt, x, y, steps, where, [], ctx.sync, read)

    gc.collect()
    memory.reset_cuda_peaks(ctx.device)
    # the same cap as E18's: released blocks first, fraction 1.0 restored on exit
    with memory.capped_cuda_budget(budget_gib, ctx.device):
        at_failure = record_capped_run(ctx, attempt, batch=batch, cap_note=cap_note)
    ctx.row(variant=CAPPED_RUN, metric=MEMORY_BUDGET, value=budget_gib * 1024, unit="MiB",
            window=cap_note, sync_boundary="n/a")
    return at_failure


def _diagnosis_rows(ctx, small: Evidence, large: Evidence, at_failure: dict[str, float]) -> None:
    """The branch the evidence supports (:func:`perflab.instruments.memory.diagnose_oom`), one row each."""
    if not ctx.is_cuda:
        for verdict in memory.OOM_VERDICTS:
            ctx.unsupported(variant=diagnosis_variant(verdict), metric=SUPPORTED, unit="bool",
                            reason="the decision weighs allocator peaks at two batch sizes and "
                            "the allocator's state at the failure; a CPU has neither (the RSS "
                            "evidence above includes the interpreter and freed heap pages)")
        return
    branch, lines = memory.diagnose_oom(
        peak_small_mib=small.peak, peak_large_mib=large.peak,
        persistent_mib=large.persistent,
        growth_mib_per_step=max(small.growth, large.growth),
        reserved_at_oom_mib=at_failure.get("reserved_at_oom"),
        allocated_at_oom_mib=at_failure.get("allocated_at_oom"),
    )
    for verdict in memory.OOM_VERDICTS:
        ctx.row(variant=diagnosis_variant(verdict), metric=SUPPORTED,
                value=float(verdict == branch), unit="bool",
                window=lines.get(verdict, "no branch's evidence is dominant"),
                sync_boundary="n/a (derived from the rows above)")
    ctx.log(f"diagnosis: {branch}")


def measure(ctx):
    p = ctx.params
    small, large = sorted(int(b) for b in p["batches"])
    steps, budget = int(p["steps"]), float(p["budget_gib"])
    parts = ctx.trainable(WORKLOAD, variants=(CAPPED_RUN,), metric=OOM, unit="bool")
    if parts is None:
        return
    w, opt = parts
    del opt  # each run below gets a fresh optimizer (its state appears on its first step)
    cuda = ctx.is_cuda
    sync_b = ("read after torch.cuda.synchronize()" if cuda
              else "read after the call returned (the CPU runs synchronously)")

    def read() -> float:
        ctx.sync()
        return memory.cuda_counters(ctx.device).allocated_mib if cuda else memory.rss_mib()

    param_mib = memory.bytes_of_parameters(w.model) / MiB
    ctx.row(variant=PARAMETERS, metric=BYTES, value=param_mib, unit="MiB",
            window=f"sum(p.numel() * p.element_size()); {ACCOUNTING}", sync_boundary="n/a")
    evidence = []
    for batch in (small, large):
        evidence.append(_uncapped_run(ctx, w, batch, steps, read, param_mib))
        _evidence_rows(ctx, evidence[-1], steps, sync_b)
    _persistent_rows(ctx, *evidence, sync_b)
    at_failure = _capped_run(ctx, w, large, steps, budget, read)
    _diagnosis_rows(ctx, *evidence, at_failure)


if __name__ == "__main__":
    run("E10", measure, globals().get("snakemake"))
