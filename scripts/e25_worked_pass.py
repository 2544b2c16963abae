"""E25 — a worked pass: measure, localize, intervene, remeasure (foreach -> fused AdamW).

One job, so every number of the pass shares a process, a device state and a
contract: (1) the baseline step with AdamW foreach (median, IQR, examples/s);
(2) localization by per-phase synchronization (each phase's share, the largest
named in the log and derivable from the rows); (3) the one-change intervention
AdamW(fused=True), checked for correctness on one step from identical state;
(4) the remeasurement as an interleaved foreach/fused pair (latency and
throughput change, judged against the block-to-block noise); (5) peak memory
of each variant alone (CUDA: each in isolation, allocator peaks reset; on CPU
an in-process RSS peak cannot separate two variants, so those rows say so).
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import copy
import gc

import torch

from perflab.core.names import SYNCED_CALL
from perflab.experiments.e25_worked_pass import (
    BASELINE,
    DIFFERENCE,
    FOREACH,
    FUSED,
    FUSED_VS_FOREACH,
    MAX_ABS_DIFF,
    PARAMETER_SCALE,
    PEAK_ALLOCATED,
    PEAK_RESERVED,
    PHASE_SHARE,
    STEP_LATENCY,
    THROUGHPUT,
    THROUGHPUT_REL,
    localize_variant,
)
from perflab.instruments import memory, optim, phases, stats, steps, timing
from perflab.pipeline.runner import run


def isolated_peak(ctx, fresh, w, opt_name, lr, calls):
    """Peak allocated/reserved MiB of one variant alone on the device."""
    model = copy.deepcopy(fresh).to(ctx.device)
    step = steps.build(w, ctx.device, model=model,
                       optimizer=optim.factory(opt_name, lr)(optim.trainable(model)))
    gc.collect()
    torch.cuda.empty_cache()
    memory.reset_cuda_peaks(ctx.device)
    for _ in range(calls):
        step()
    ctx.sync()
    c = memory.cuda_counters(ctx.device)
    del model, step
    gc.collect()
    torch.cuda.empty_cache()
    return c.max_allocated_mib, c.max_reserved_mib


def _repeats(ctx) -> int:
    """Calls of the baseline and of the localization: ``repeats``, else timing.repeats."""
    return ctx.timing["repeats"] if ctx.params.get("repeats") is None else ctx.params["repeats"]


def _measure(ctx, w, base_step, window: str) -> dict[str, float]:
    """1. measure: the baseline under the contract."""
    t, repeats = ctx.timing, _repeats(ctx)
    base = ctx.summary(timing.time_calls(base_step, warmup=t["warmup"], repeats=repeats,
                                         sync=ctx.sync),
                       variant=BASELINE, metric=STEP_LATENCY, window=window,
                       sync_boundary=SYNCED_CALL)
    ctx.row(variant=BASELINE, metric=THROUGHPUT, statistic="median",
            value=w.batch_size / base["median"] * 1e3, unit="examples/s", n=repeats,
            window=window, sync_boundary=timing.DRAINED_THROUGHPUT)
    return base


def _localize(ctx, w, base_step, window: str, base_median: float):
    """2. localize: per-phase synchronization (the phase hooks) on the same model and
    optimizer, its batch from the host (or the workload's loader), as E05."""
    repeats = _repeats(ctx)
    host_step = steps.build(w, ctx.device, model=base_step.model, optimizer=base_step.optimizer,
                            resident=False,
                            batches=base_step.batches if w.loader is not None else None)
    phased = phases.timed(host_step, ctx.sync)
    per_phase, _ = phases.samples(phased, repeats)
    medians = {ph: stats.summarize(v)["median"] for ph, v in per_phase.items()}
    total = sum(medians.values())
    for ph, med in medians.items():
        ctx.row(variant=localize_variant(ph), metric=PHASE_SHARE, value=100 * med / total,
                unit="%", n=repeats, window=window,
                sync_boundary=f"sync ({ctx.sync_name}) at every phase boundary")
    largest = max(medians, key=medians.get)
    ctx.log(f"baseline {base_median:.3f} ms; largest phase {largest} "
            f"({100 * medians[largest] / total:.0f}%)")
    return phased


def _intervene(ctx, w, fresh, batches, lr) -> bool:
    """3. intervene on one mechanism, and check it computes the same update.

    False (and an unsupported row) when fused AdamW is unavailable here.
    """
    try:
        start = copy.deepcopy(fresh).to(ctx.device)
        # the gradients of the step itself (the workload's own where it gives one)
        grads = optim.step_gradients(steps.build(w, ctx.device, model=start, batches=batches))
        agree = optim.one_step_agreement(start, grads, optim.factory(FOREACH, lr),
                                         optim.factory(FUSED, lr))
    except (RuntimeError, TypeError, ValueError) as exc:
        ctx.unsupported(variant=FUSED_VS_FOREACH, metric=MAX_ABS_DIFF, unit="abs",
                        reason=f"fused AdamW unavailable, no intervention: {exc}")
        return False
    one = dict(variant=FUSED_VS_FOREACH, n=1,
               window="one step from identical state and gradients",
               sync_boundary="values compared after both steps")
    ctx.row(metric=MAX_ABS_DIFF, value=agree["max_abs_diff"], unit="abs", **one)
    ctx.row(metric=PARAMETER_SCALE, value=agree["parameter_scale"], unit="mean |p|", **one)
    return True


def _remeasure(ctx, w, fresh, batches, lr) -> None:
    """4. remeasure under the same contract: the pair, back to back, on one batch stream."""
    p, t = ctx.params, ctx.timing
    model_a, model_b = copy.deepcopy(fresh).to(ctx.device), copy.deepcopy(fresh).to(ctx.device)
    step_a, step_b = (steps.build(w, ctx.device, model=m, batches=batches,
                                  optimizer=optim.factory(name, lr)(optim.trainable(m)))
                      for m, name in ((model_a, FOREACH), (model_b, FUSED)))
    res = ctx.interleaved(step_a, step_b, blocks=p["blocks"], inner=p["inner"],
                          warmup=t["warmup"], variant=f"{FUSED}_minus_{FOREACH}")
    d = ctx.ab(res, a=FOREACH, b=FUSED, batch_size=w.batch_size,
               window=timing.ab_window(res, t["warmup"]))
    thr = 100 * (d["a"] / d["b"] - 1)
    ctx.row(variant=DIFFERENCE, metric=THROUGHPUT_REL, value=thr,
            unit="%", n=len(res.a_blocks), window="from the pair's medians",
            sync_boundary=timing.DRAINED_THROUGHPUT + "; blocks interleaved AB/BA")
    ctx.log(f"remeasured: foreach {d['a']:.3f} ms, fused {d['b']:.3f} ms: latency "
            f"{100 * d['diff'] / d['a']:+.1f}%, throughput {thr:+.1f}% (Wilcoxon p {d['p']:.3g})")
    del step_a, step_b, model_a, model_b


def _peak_rows(ctx, w, fresh, lr) -> None:
    """5. the other dimensions: peak memory of each variant alone."""
    warmup = ctx.timing["warmup"]
    for name in (FOREACH, FUSED):
        if not ctx.is_cuda:
            ctx.unsupported(variant=name, metric=PEAK_ALLOCATED, unit="MiB",
                            reason="CPU: an in-process RSS peak cannot separate two variants "
                                   "(freed memory stays resident); E08 measures peak RSS per process")
            continue
        alloc, resv = isolated_peak(ctx, fresh, w, name, lr, calls=warmup)
        kw = dict(variant=name, n=warmup, statistic="max",
                  window=f"{warmup} steps of this variant alone, peaks reset before",
                  sync_boundary="allocator peak counters after a final sync")
        ctx.row(metric=PEAK_ALLOCATED, value=alloc, unit="MiB", **kw)
        ctx.row(metric=PEAK_RESERVED, value=resv, unit="MiB", **kw)
        ctx.log(f"{name}: peak allocated {alloc:.1f} MiB, reserved {resv:.1f} MiB")


def measure(ctx):
    w = ctx.workload()
    lr = w.params.get("lr", 1e-3)
    fresh = copy.deepcopy(w.model).cpu()  # the initial state, off the device
    window = f"steady state after warmup {ctx.timing['warmup']}"
    # the step every experiment times (the workload's own where it gives one), AdamW foreach
    base_step = steps.build(w, ctx.device,
                            optimizer=optim.factory(FOREACH, lr)(optim.trainable(w.model)))
    base = _measure(ctx, w, base_step, window)
    phased = _localize(ctx, w, base_step, window, base["median"])
    batches = base_step.batches
    if not _intervene(ctx, w, fresh, batches, lr):
        return
    del base_step, phased
    _remeasure(ctx, w, fresh, batches, lr)
    _peak_rows(ctx, w, fresh, lr)


if __name__ == "__main__":
    run("E25", measure, globals().get("snakemake"))
