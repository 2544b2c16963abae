"""E22 — a small benchmark matrix: eager/compiled x fp32/AMP on one training step.

Four cells of the controlled training step (zero_grad, forward, loss,
backward, AdamW step), each from the same initial state with a fresh
optimizer: eager fp32, eager AMP, compiled fp32, compiled AMP. A workload
with its own train_step runs it in the fp32 cells (compiled: on the compiled
model); it decides its own precision, so its AMP cells say so. AMP is
``torch.autocast`` at the configured dtype (bfloat16 by default; float16 adds
a GradScaler); "compiled" is ``torch.compile(model)`` with the optimizer left
eager. Each cell: the first step (for compiled cells, the compilation), ms/step
and examples/s of the steady state, peak allocated and peak reserved (CUDA
allocator counters, reset before the cell; the CPU cannot separate cells in
one process, so those rows say so), and the correctness column: the first
step's loss against eager fp32's.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import contextlib
import copy
import gc

import torch

from perflab.core.names import STEP_LATENCY
from perflab.core.names import SYNCED_CALL as SYNCED
from perflab.experiments import e22_matrix as e22
from perflab.instruments import compiling, memory, steps, timing
from perflab.pipeline.runner import run


def make_step(ctx, model, w, opt, x, y, amp_dtype):
    """The chapter's training step under autocast at ``amp_dtype`` (fp16: with a GradScaler)."""
    scaler = None
    if amp_dtype is torch.float16 and ctx.is_cuda:
        scaler = torch.amp.GradScaler("cuda")

    def autocast():
        if amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=ctx.device.type, dtype=amp_dtype)

    def step():
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = w.loss_fn(model(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss

    return step


def first_step(ctx, cell, compiled, step, kw):
    """The cell's first step, timed with the device synchronized at both ends (for a compiled
    cell, the compilation); (its loss, ms), or None when it failed (an error row)."""
    try:
        ctx.sync()
        t0 = timing._clock()
        loss = steps.read_loss(step())
        ctx.sync()
        first = (timing._clock() - t0) * 1e3
    except Exception as exc:
        msg = ("torch.compile failed: " if compiled else "step failed: ") \
            + compiling.failure(exc)
        ctx.log(f"{cell}: {msg}")
        ctx.unsupported(variant=cell, metric=STEP_LATENCY, unit="ms", status="error",
                        reason=msg, **kw)
        return None
    ctx.row(variant=cell, metric=e22.FIRST_STEP, value=first, unit="ms", sync_boundary=SYNCED,
            window="first step of this cell" + (" (includes compilation; Inductor cache "
                                               "private to this job)" if compiled else ""),
            **kw)
    return loss, first


def steady_state(ctx, cell, step, batch_size, kw):
    """The cell's steady state after warmup: step latency and throughput; the median ms."""
    p, t = ctx.params, ctx.timing
    window = f"steady state after warmup {t['warmup']}, {p['repeats']} repeats"
    s = ctx.summary(timing.time_calls(step, warmup=t["warmup"], repeats=p["repeats"],
                                      sync=ctx.sync),
                    variant=cell, metric=STEP_LATENCY, window=window, sync_boundary=SYNCED,
                    statistics=("median", "iqr", "p25", "p75", "min", "max"), **kw)
    ctx.row(variant=cell, metric="throughput", value=batch_size / s["median"] * 1e3,
            unit="examples/s", statistic="median", n=p["repeats"],
            sync_boundary=timing.DRAINED_THROUGHPUT, window=f"B / median step ({window})", **kw)
    return s["median"]


def peaks(ctx, cell, kw):
    """The cell's allocator peaks since they were reset before it (CUDA; else why not)."""
    if not ctx.is_cuda:
        for metric in ("peak_allocated", "peak_reserved"):
            ctx.unsupported(variant=cell, metric=metric, unit="MiB",
                            reason=compiling.CPU_PEAK_REASON, **kw)
        return
    c = memory.cuda_counters(ctx.device)
    common = dict(variant=cell, unit="MiB", statistic="max",
                  n=ctx.params["repeats"] + ctx.timing["warmup"] + 1,
                  window="this cell's first, warmup and timed steps; peaks reset before",
                  sync_boundary="allocator peak counters after a final sync", **kw)
    ctx.row(metric="peak_allocated", value=c.max_allocated_mib, **common)
    ctx.row(metric="peak_reserved", value=c.max_reserved_mib, **common)


def measure(ctx):
    p = ctx.params
    base = ctx.step(variants=list(e22.CELL_NAMES))
    if base is None:
        return
    w = base.workload
    fresh = copy.deepcopy(w.model)
    amp = getattr(torch, p["amp_dtype"])
    reference = None
    for cell, compiled, use_amp in e22.CELLS:
        kw = dict(execution="compiled" if compiled else "eager",
                  dtype=f"autocast {p['amp_dtype']}" if use_amp else ctx.contract["dtype"])
        if use_amp and w.train_step is not None:
            ctx.unsupported(variant=cell, metric=STEP_LATENCY, unit="ms", reason=(
                "the workload's own train_step decides its precision: perflab does not wrap "
                "it in autocast"), **kw)
            continue
        torch._dynamo.reset()
        model = copy.deepcopy(fresh)
        opt = w.make_optimizer(model.parameters()) if w.make_optimizer else None
        runner_model = torch.compile(model) if compiled else model
        if use_amp:
            x, y = w.batch_on(ctx.device)
            step = make_step(ctx, runner_model, w, opt, x, y, amp)
        else:  # the step every experiment times (its loader from the start in each cell)
            step = steps.build(w, ctx.device, model=runner_model, optimizer=opt)
        gc.collect()
        if ctx.is_cuda:
            torch.cuda.empty_cache()
            memory.reset_cuda_peaks(ctx.device)
        got = first_step(ctx, cell, compiled, step, kw)
        if got is None:
            continue
        loss, first = got
        if reference is None and cell == e22.REFERENCE_CELL:
            reference = loss
        if reference is not None:
            ctx.row(variant=cell, metric=e22.LOSS_ABS_DIFF_VS_REFERENCE,
                    value=abs(loss - reference), unit="abs", n=1, sync_boundary="loss read "
                    "on the host", window="first step's loss, same initial state and batch", **kw)
        median = steady_state(ctx, cell, step, w.batch_size, kw)
        peaks(ctx, cell, kw)
        ctx.log(f"{cell}: first step {first / 1e3:.2f} s, steady {median:.3f} ms, "
                f"{w.batch_size / median * 1e3:.0f} examples/s")
        del step, opt, runner_model, model


if __name__ == "__main__":
    run("E22", measure, globals().get("snakemake"))
