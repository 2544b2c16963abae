"""E22 — a small benchmark matrix: eager/compiled x fp32/AMP on one training step.

Four cells of the controlled training step (zero_grad, forward, loss,
backward, AdamW step), each from the same initial state with a fresh
optimizer: eager fp32, eager AMP, compiled fp32, compiled AMP. AMP is
``torch.autocast`` at the configured dtype (bfloat16 by default; float16 adds
a GradScaler); "compiled" is ``torch.compile(model)`` with the optimizer left
eager. Each cell: the first step (for compiled cells, the compilation), ms/step
and examples/s of the steady state, peak allocated and peak reserved (CUDA
allocator counters, reset before the cell; the CPU cannot separate cells in
one process, so those rows say so), and the correctness column: the first
step's loss against eager fp32's.
"""

import contextlib
import copy
import gc

import torch

from perflab import compiling, memory, timing
from perflab.runner import run

SYNCED = "synchronized at both ends of each call"
CELLS = (("eager_fp32", False, False), ("eager_amp", False, True),
         ("compiled_fp32", True, False), ("compiled_amp", True, True))


def make_step(ctx, model, w, opt, x, y, amp_dtype):
    """The training step of one cell; ``amp_dtype`` None means no autocast."""
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


def measure(ctx):
    p, t = ctx.params, ctx.timing
    parts = ctx.trainable(variants=[c for c, *_ in CELLS])
    if parts is None:
        return
    w, _ = parts
    fresh = copy.deepcopy(w.model)
    x, y = w.batch_on(ctx.device)
    amp = getattr(torch, p["amp_dtype"])
    window = f"steady state after warmup {t['warmup']}, {p['repeats']} repeats"
    reference = None
    for cell, compiled, use_amp in CELLS:
        kw = dict(execution="compiled" if compiled else "eager",
                  dtype=f"autocast {p['amp_dtype']}" if use_amp else ctx.contract["dtype"])
        torch._dynamo.reset()
        model = copy.deepcopy(fresh)
        opt = w.make_optimizer(model.parameters())
        runner_model = torch.compile(model) if compiled else model
        step = make_step(ctx, runner_model, w, opt, x, y, amp if use_amp else None)
        gc.collect()
        if ctx.is_cuda:
            torch.cuda.empty_cache()
            memory.reset_cuda_peaks(ctx.device)
        try:
            ctx.sync()
            t0 = timing._clock()
            loss = float(step().detach())
            ctx.sync()
            first = (timing._clock() - t0) * 1e3
        except Exception as exc:
            msg = ("torch.compile failed: " if compiled else "step failed: ") \
                + compiling.failure(exc)
            ctx.log(f"{cell}: {msg}")
            ctx.unsupported(variant=cell, metric="step_latency", unit="ms", status="error",
                            reason=msg, **kw)
            continue
        ctx.row(variant=cell, metric="first_step", value=first, unit="ms", sync_boundary=SYNCED,
                window="first step of this cell" + (" (includes compilation; Inductor cache "
                                                   "private to this job)" if compiled else ""),
                **kw)
        if reference is None and cell == "eager_fp32":
            reference = loss
        if reference is not None:
            ctx.row(variant=cell, metric="loss_abs_diff_vs_eager_fp32",
                    value=abs(loss - reference), unit="abs", n=1, sync_boundary="loss read "
                    "on the host", window="first step's loss, same initial state and batch", **kw)
        s = ctx.summary(timing.time_calls(step, warmup=t["warmup"], repeats=p["repeats"],
                                          sync=ctx.sync),
                        variant=cell, metric="step_latency", window=window, sync_boundary=SYNCED,
                        statistics=("median", "iqr", "p25", "p75", "min", "max"), **kw)
        ctx.row(variant=cell, metric="throughput", value=w.batch_size / s["median"] * 1e3,
                unit="examples/s", statistic="median", n=p["repeats"],
                sync_boundary=timing.DRAINED_THROUGHPUT,
                window=f"B / median step ({window})", **kw)
        if ctx.is_cuda:
            c = memory.cuda_counters(ctx.device)
            common = dict(variant=cell, unit="MiB", statistic="max",
                          n=p["repeats"] + t["warmup"] + 1,
                          window="this cell's first, warmup and timed steps; peaks reset before",
                          sync_boundary="allocator peak counters after a final sync", **kw)
            ctx.row(metric="peak_allocated", value=c.max_allocated_mib, **common)
            ctx.row(metric="peak_reserved", value=c.max_reserved_mib, **common)
        else:
            for metric in ("peak_allocated", "peak_reserved"):
                ctx.unsupported(variant=cell, metric=metric, unit="MiB",
                                reason=compiling.CPU_PEAK_REASON, **kw)
        ctx.log(f"{cell}: first step {first / 1e3:.2f} s, steady {s['median']:.3f} ms, "
                f"{w.batch_size / s['median'] * 1e3:.0f} examples/s")
        del step, opt, runner_model, model


if __name__ == "__main__":
    run("E22", measure, globals().get("snakemake"))
