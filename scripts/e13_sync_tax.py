"""E13 — the synchronization tax of a per-step host read.

Does reading the loss on the host every step (``loss.item()``) slow the
training loop? On the controlled step and on a small fast step
(``small_mlp``), an interleaved A/B compares A = the training step with no
host read and B = the same step followed by ``loss.item()``. Throughput is
the question, so each timed sample is a free-running stretch of up to 10
steps synchronized only at its two ends (inside it, A may run ahead of the
device; B cannot), reported as ms per step; blocks of A and B alternate
(AB, BA, ...) so drift hits both alike. Rows: each side's median and block
spread, the difference B - A in ms and %, examples/s, and whether the
difference exceeds the block-to-block spread.

Then the logged value itself: from the same initial state, the running-mean
loss over ``running_mean_steps`` steps read three ways — ``.item()`` every
step averaged on the host; a device-side running sum read every
``log_every`` steps; a device-side sum read once at the end — and the
largest difference between the three.

On a CPU there is no device queue to run ahead of, so the tax is expected to
be ~0: the same code runs and the windows say so.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import copy
import math

import torch

from perflab.experiments.e13_sync_tax import (
    AGREE,
    CONTROLLED,
    ITEM_EVERY,
    MAX_ABS_DIFF,
    MEAN_LOSS,
    NONE,
    PAIRS,
    READ_EVERY_STEP,
    READ_ONCE,
    RUNNING_MEAN,
    SMALL,
    STEP_LATENCY,
    STOP_AT,
    TAX,
    THROUGHPUT,
    THROUGHPUT_PCT_OF_NONE,
    read_every,
    running_mean_variant,
    side_variant,
    tax_variant,
)
from perflab.instruments import profiling, steps
from perflab.pipeline.runner import run

#: steps in one timed free-running stretch (fewer when a block has fewer)
STRETCH = 10
#: the workload of each pair (None: the configured controlled one)
WORKLOADS = {CONTROLLED: None, SMALL: "small_mlp"}


def _stretch(inner: int) -> tuple[int, int]:
    """(steps per timed stretch, stretches per block) for blocks of ``inner`` steps."""
    k = min(STRETCH, inner)
    return k, max(1, inner // k)


def sync_tax(ctx, prefix, name, label):
    """One interleaved A/B: the step with no host read against the step and loss.item()."""
    p, t = ctx.params, ctx.timing
    step = ctx.step(name, variants=(side_variant(prefix, NONE),), metric=STEP_LATENCY)
    if step is None:
        return
    w = step.workload
    step_and_read = step.and_read()

    k, calls = _stretch(p["inner"])
    warm_calls = max(1, math.ceil(t["warmup"] / k))
    res = ctx.interleaved(profiling.free_running(step, k),
                          profiling.free_running(step_and_read, k), blocks=p["blocks"],
                          inner=calls, warmup=warm_calls, variant=tax_variant(prefix),
                          stop_at=STOP_AT[prefix])
    n_blocks, calls = len(res.a_blocks), len(res.a_samples) // max(1, len(res.a_blocks))
    per_step = [[v / k for v in res.a_samples], [v / k for v in res.b_samples]]
    blocks = [[v / k for v in res.a_blocks], [v / k for v in res.b_blocks]]
    block_of = [i for i in range(n_blocks) for _ in range(calls)]
    cpu = ("" if ctx.is_cuda else
           "; CPU: no device queue to run ahead of, so the tax is expected to be ~0")
    window = (f"{label}: {n_blocks} blocks per side, alternating "
              f"{'/'.join(dict.fromkeys(res.order))}, each {calls} stretch(es) of {k} "
              f"free-running steps (ms per step = stretch time / {k}); after "
              f"{warm_calls * k} warmup steps per side{cpu}")
    stretch_sync = f"{ctx.sync_name} at both ends of each {k}-step stretch only"
    pc = profiling.record_pair(
        ctx, metric=STEP_LATENCY, window=window,
        sides=[(side_variant(prefix, NONE), per_step[0], block_of, blocks[0],
                stretch_sync + "; no host read of any device value"),
               (side_variant(prefix, ITEM_EVERY), per_step[1], block_of, blocks[1],
                stretch_sync + "; loss.item() after every step (a host read: waits for "
                "the step's work)")],
        diff_variant=tax_variant(prefix), diff_metric=TAX,
    )
    thr = {}
    for side, med in ((NONE, pc.a_median), (ITEM_EVERY, pc.b_median)):
        thr[side] = w.batch_size * 1e3 / med
        ctx.row(variant=side_variant(prefix, side), metric=THROUGHPUT, value=thr[side],
                unit="ex/s", window=window + f"; batch {w.batch_size} / median ms per step",
                sync_boundary=stretch_sync, n=len(per_step[0]))
        ctx.row(variant=side_variant(prefix, side), metric=THROUGHPUT_PCT_OF_NONE,
                value=100 * thr[side] / thr[NONE], unit="%", window=window,
                sync_boundary="relative to no host read", n=len(per_step[0]))
    ctx.log(f"{label} ({w.description}, batch {w.batch_size}): none {pc.a_median:.3f} ms, "
            f"item_every {pc.b_median:.3f} ms, tax {pc.diff:+.3f} ms ({100 * pc.rel:+.1f}%), "
            f"block spread {pc.noise:.3f} ms -> {'resolved' if pc.resolved else 'unresolved'}")


def running_mean_check(ctx):
    """The logged running-mean loss read every step, every ``log_every`` steps and once."""
    p = ctx.params
    n, every = p["running_mean_steps"], p["log_every"]
    first = ctx.step(variants=(RUNNING_MEAN,), metric=MAX_ABS_DIFF, unit="loss")
    if first is None:  # the controlled workload; row defaults follow it
        return
    w = first.workload
    initial = copy.deepcopy(w.model)

    def fresh_step():
        """The training step from the same initial weights with a fresh optimizer, its
        loader from its start (the same seed: the same batches in the same order)."""
        torch.manual_seed(ctx.contract["seed"])
        model = copy.deepcopy(initial)
        return steps.build(w, ctx.device, model=model)

    def zero():
        return torch.zeros((), device=ctx.device, dtype=torch.float32)

    # (a) .item() every step, averaged on the host
    step, total = fresh_step(), 0.0
    for _ in range(n):
        total += steps.read_loss(step())
    host = total / n
    # (b) a device-side running sum, read every `every` steps (and once for any remainder)
    step, running, total = fresh_step(), zero(), 0.0
    for i in range(n):
        running += steps.device_loss(step(), ctx.device)
        if (i + 1) % every == 0 or i + 1 == n:
            total += running.item()
            running.zero_()
    every_k = total / n
    # (c) accumulated on the device, read once
    step, running = fresh_step(), zero()
    for _ in range(n):
        running += steps.device_loss(step(), ctx.device)
    once = running.item() / n

    window = (f"mean training loss over {n} steps from the same initial weights (a deep copy) "
              "with a fresh optimizer, the same batches")
    for read, value, how in (
        (READ_EVERY_STEP, host, "loss.item() every step, summed on the host"),
        (read_every(every), every_k,
         f"device-side running sum read with .item() every {every} steps"),
        (READ_ONCE, once, "device-side sum read with .item() once, at the end"),
    ):
        ctx.row(variant=running_mean_variant(read), metric=MEAN_LOSS, value=value, unit="loss",
                window=window, sync_boundary=how, n=n)
    values = (host, every_k, once)
    diff = max(values) - min(values)
    ctx.row(variant=RUNNING_MEAN, metric=MAX_ABS_DIFF, value=diff, unit="loss",
            window=window, sync_boundary="largest difference between the three readings", n=3)
    # half a unit of the 5th decimal: the readings agree to AGREE_DECIMALS decimals
    ctx.row(variant=RUNNING_MEAN, metric=AGREE, value=float(diff < 5e-6),
            unit="bool", window=window,
            sync_boundary="1 when the three readings differ by less than 5e-6", n=3)
    ctx.log(f"running mean over {n} steps: every step {host:.6f}, every {every} "
            f"{every_k:.6f}, once {once:.6f}; max abs diff {diff:.2e}")


def measure(ctx):
    for prefix, label in PAIRS:
        sync_tax(ctx, prefix, WORKLOADS[prefix], label)
    running_mean_check(ctx)


if __name__ == "__main__":
    run("E13", measure, globals().get("snakemake"))
