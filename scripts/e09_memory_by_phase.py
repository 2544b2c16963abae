"""E09 — where memory goes: allocated after each phase, cold and steady, and the hidden peak.

The controlled training step runs ``steady_step`` times in this fresh process.
On the first (cold) step and on the steady step, ``torch.cuda.memory_allocated``
is read at each phase boundary (start, zero_grad, forward, loss, backward,
optimizer), and ``max_memory_allocated`` over the step (peaks reset at its
start). The hidden peak is the step's peak minus the largest boundary reading:
bytes that were live only inside a phase.

The persistent breakdown after the steady step counts the tensors themselves
(each distinct storage once): parameters, gradients, optimizer state; "other"
is the allocator's allocated minus those three (CUDA only). The optimizer
state appearing on the first ``.step()`` is read both ways: the state's bytes
before and after step 1, and the allocator's jump across step 1's optimizer
phase.

On a CPU there is no allocator counter: the phase rows are ``unsupported``,
each step's peak is the process's peak resident set (VmHWM, reset before the
step), and the breakdown has no "other" (its percentages are of the counted
tensors).
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import gc
from dataclasses import dataclass, field

from perflab.experiments.e09_memory_by_phase import (
    ACTIVATIONS,
    ALLOCATED,
    BOUNDARIES,
    BYTES,
    COLD,
    FIRST_STEP_ALLOCATED_JUMP,
    HIDDEN_PEAK,
    MAX_BOUNDARY_ALLOCATED,
    OPTIMIZER_STATE,
    PEAK_ALLOCATED,
    PEAK_RESERVED,
    PEAK_RSS,
    PERSISTENT,
    SHARE,
    STATE_AFTER_FIRST_STEP,
    STATE_BEFORE_FIRST_STEP,
    STEADY,
    STEPS_READ,
    boundary_variant,
    part_variant,
)
from perflab.instruments import memory
from perflab.pipeline.runner import run

MiB = memory.MiB
HOST = "n/a (host bookkeeping)"  # the sync boundary of a tensor-accounting row


@dataclass
class StepReadings:
    """What the steps read: allocated at each boundary and the peaks, per step read."""

    steady: int  # the steady step's number
    sync_boundary: str
    #: {step: {boundary: allocated MiB}} (CUDA only)
    allocated: dict[str, dict[str, float]] = field(default_factory=dict)
    #: {step: {peak_allocated, peak_reserved}} on CUDA, {peak_rss, reset} on a CPU
    peaks: dict[str, dict] = field(default_factory=dict)
    state_before_mib: float = 0.0  # the optimizer state's bytes before step 1
    state_after_first_mib: float = 0.0  # ... and after it

    def step_name(self, step: str) -> str:
        i = 1 if step == COLD else self.steady
        return f"step {i} of {self.steady}" + (" (the first of this process)" if i == 1 else "")


def _phased_step(ctx, w, opt, x, y, read):
    """One training step with ``read()`` at each boundary; returns {boundary: MiB}."""
    r = {"start": read()}
    opt.zero_grad(set_to_none=True)
    r["zero_grad"] = read()
    out = w.model(x)
    r["forward"] = read()
    loss = w.loss_fn(out, y)
    r["loss"] = read()
    loss.backward()
    r["backward"] = read()
    opt.step()
    r["optimizer"] = read()
    del out, loss  # the step's locals end here, as in a training loop
    return r


def _run_steps(ctx, w, opt, steady: int) -> StepReadings:
    """``steady`` training steps, the first and the last read at every boundary."""
    x, y = w.batch_on(ctx.device)
    cuda = ctx.is_cuda

    def read() -> float:
        ctx.sync()
        return memory.cuda_counters(ctx.device).allocated_mib if cuda else float("nan")

    got = StepReadings(steady, "read after torch.cuda.synchronize()" if cuda
                       else "read after the step returned (the CPU runs synchronously)")
    got.state_before_mib = memory.bytes_of_optimizer_state(opt) / MiB
    gc.collect()
    for i in range(1, steady + 1):
        step = COLD if i == 1 else (STEADY if i == steady else None)
        ctx.sync()
        if cuda:
            memory.reset_cuda_peaks(ctx.device)
            reset = True
        else:
            reset = memory.reset_vmhwm()
        r = _phased_step(ctx, w, opt, x, y, read)
        ctx.sync()
        if step is None:
            continue
        got.allocated[step] = r
        if cuda:
            c = memory.cuda_counters(ctx.device)
            got.peaks[step] = {PEAK_ALLOCATED: c.max_allocated_mib,
                               PEAK_RESERVED: c.max_reserved_mib}
        else:
            got.peaks[step] = {PEAK_RSS: memory.vmhwm_mib(), "reset": reset}
        if i == 1:
            got.state_after_first_mib = memory.bytes_of_optimizer_state(opt) / MiB
    return got


def _boundary_rows(ctx, got: StepReadings, step: str) -> None:
    """Allocated at each boundary of ``step``; on a CPU, why there is no such counter."""
    name = got.step_name(step)
    for b in BOUNDARIES:
        window = f"{name}: after {b}" if b != "start" else f"{name}: before zero_grad"
        if ctx.is_cuda:
            ctx.row(variant=boundary_variant(step, b), metric=ALLOCATED,
                    value=got.allocated[step][b], unit="MiB",
                    window=f"{window}; torch.cuda.memory_allocated",
                    sync_boundary=got.sync_boundary)
        else:
            ctx.unsupported(variant=boundary_variant(step, b), metric=ALLOCATED, unit="MiB",
                            reason="torch.cuda.memory_allocated needs a CUDA device; a CPU "
                            "process has no live-tensor counter, and RSS at a boundary would "
                            "include freed-but-kept heap pages")


def _peak_rows(ctx, got: StepReadings, step: str) -> None:
    """The step's peaks (CUDA: allocator peaks and the hidden peak; CPU: VmHWM)."""
    name, sync_b, pk = got.step_name(step), got.sync_boundary, got.peaks[step]
    if not ctx.is_cuda:
        span = ("VmHWM reset to the current RSS before the step" if pk["reset"]
                else "VmHWM since the process started (the kernel refused the reset)")
        ctx.row(variant=step, metric=PEAK_RSS, value=pk[PEAK_RSS], unit="MiB",
                window=f"{name}: peak resident set of this whole process; {span}",
                sync_boundary=sync_b)
        for metric in (PEAK_ALLOCATED, PEAK_RESERVED, HIDDEN_PEAK):
            ctx.unsupported(variant=step, metric=metric, unit="MiB", reason=(
                "allocator peak counters need a CUDA device; the CPU row is peak_rss "
                "(whole process, not a tensor ledger)"))
        return
    top = max(got.allocated[step].values())
    win = f"{name}: over the whole step (peak counters reset at its start)"
    ctx.row(variant=step, metric=PEAK_ALLOCATED, value=pk[PEAK_ALLOCATED], unit="MiB",
            window=f"{win}; torch.cuda.max_memory_allocated", sync_boundary=sync_b)
    ctx.row(variant=step, metric=PEAK_RESERVED, value=pk[PEAK_RESERVED], unit="MiB",
            window=f"{win}; torch.cuda.max_memory_reserved", sync_boundary=sync_b)
    ctx.row(variant=step, metric=MAX_BOUNDARY_ALLOCATED, value=top, unit="MiB",
            window=f"{name}: the largest of the six boundary readings", sync_boundary=sync_b)
    ctx.row(variant=step, metric=HIDDEN_PEAK, value=pk[PEAK_ALLOCATED] - top, unit="MiB",
            window=(f"{name}: peak allocated minus the largest boundary reading: live only "
                    "inside a phase"), sync_boundary=sync_b)


def _optimizer_state_rows(ctx, got: StepReadings) -> None:
    """The optimizer state appearing on the first .step(): its bytes, and allocated's jump."""
    acct = "tensor accounting: bytes of the optimizer's per-parameter state tensors"
    ctx.row(variant=OPTIMIZER_STATE, metric=STATE_BEFORE_FIRST_STEP,
            value=got.state_before_mib, unit="MiB", window=f"before step 1; {acct}",
            sync_boundary=HOST)
    ctx.row(variant=OPTIMIZER_STATE, metric=STATE_AFTER_FIRST_STEP,
            value=got.state_after_first_mib, unit="MiB",
            window=f"after step 1's optimizer phase; {acct}", sync_boundary=HOST)
    if ctx.is_cuda:
        jump = got.allocated[COLD]["optimizer"] - got.allocated[COLD]["backward"]
        ctx.row(variant=OPTIMIZER_STATE, metric=FIRST_STEP_ALLOCATED_JUMP, value=jump,
                unit="MiB", window="step 1: allocated after optimizer minus after backward",
                sync_boundary=got.sync_boundary)
    else:
        ctx.unsupported(variant=OPTIMIZER_STATE, metric=FIRST_STEP_ALLOCATED_JUMP,
                        unit="MiB", reason="needs torch.cuda.memory_allocated (CUDA only)")


def _persistent_rows(ctx, w, opt, got: StepReadings) -> float:
    """The persistent breakdown after the steady step (its gradients are still present until
    the next zero_grad); returns the persistent MiB."""
    parts_mib = {
        "parameters": memory.bytes_of_parameters(w.model) / MiB,
        "gradients": memory.bytes_of_gradients(w.model) / MiB,
        "optimizer_state": memory.bytes_of_optimizer_state(opt) / MiB,
    }
    persistent = sum(parts_mib.values())
    when = f"after step {got.steady}'s optimizer phase"
    if ctx.is_cuda:
        total = got.allocated[STEADY]["optimizer"]
        parts_mib["other"] = total - persistent
        denom = f"of allocated {when} (torch.cuda.memory_allocated)"
    else:
        total = persistent
        denom = "of the counted tensors (parameters + gradients + optimizer state)"
    for name, mib in parts_mib.items():
        how = ("allocated minus the three counted parts" if name == "other"
               else "tensor accounting: distinct storages' bytes")
        ctx.row(variant=part_variant(name), metric=BYTES, value=mib, unit="MiB",
                window=f"{when}; {how}", sync_boundary=HOST)
        ctx.row(variant=part_variant(name), metric=SHARE, value=100 * mib / total, unit="%",
                window=f"{when}; share {denom}", sync_boundary=HOST)
    if not ctx.is_cuda:
        ctx.unsupported(variant=part_variant("other"), metric=BYTES, unit="MiB", reason=(
            "'other' is allocated minus the counted tensors; allocated is CUDA only"))
    ctx.row(variant=PERSISTENT, metric=BYTES, value=persistent, unit="MiB",
            window=f"{when}; parameters + gradients + optimizer state (tensor accounting)",
            sync_boundary=HOST)
    if ctx.is_cuda:
        ctx.row(variant=PERSISTENT, metric=SHARE, value=100 * persistent / total, unit="%",
                window=f"{when}; share {denom}", sync_boundary=HOST)
    return persistent


def _activations_row(ctx, got: StepReadings) -> None:
    """Live forward state at the boundary: allocated after forward minus after zero_grad."""
    if ctx.is_cuda:
        act = got.allocated[STEADY]["forward"] - got.allocated[STEADY]["zero_grad"]
        ctx.row(variant=ACTIVATIONS, metric=BYTES, value=act, unit="MiB",
                window=f"step {got.steady}: allocated after forward minus after zero_grad "
                "(live forward state at the boundary)", sync_boundary=got.sync_boundary)
    else:
        ctx.unsupported(variant=ACTIVATIONS, metric=BYTES, unit="MiB",
                        reason="live forward state is read from torch.cuda.memory_allocated "
                        "(CUDA only)")


def _log(ctx, got: StepReadings, persistent: float) -> None:
    if ctx.is_cuda:
        for step in STEPS_READ:
            ctx.log(f"{step}: " + " ".join(f"{b}={got.allocated[step][b]:.1f}"
                                           for b in BOUNDARIES)
                    + f" peak={got.peaks[step][PEAK_ALLOCATED]:.1f}")
    ctx.log(f"persistent {persistent:.1f} MiB; optimizer state {got.state_before_mib:.1f} -> "
            f"{got.state_after_first_mib:.1f} MiB on the first step")


def measure(ctx):
    steady = int(ctx.params["steady_step"])
    parts = ctx.trainable(variants=STEPS_READ, metric=PEAK_ALLOCATED, unit="MiB")
    if parts is None:
        return
    w, opt = parts
    got = _run_steps(ctx, w, opt, steady)
    for step in STEPS_READ:
        _boundary_rows(ctx, got, step)
        _peak_rows(ctx, got, step)
    _optimizer_state_rows(ctx, got)
    persistent = _persistent_rows(ctx, w, opt, got)
    _activations_row(ctx, got)
    _log(ctx, got, persistent)


if __name__ == "__main__":
    run("E09", measure, globals().get("snakemake"))
