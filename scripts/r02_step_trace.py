"""R02 — the step's trace: its syncs, located, and the device's idle time, attributed.

The training step as the workload defines it (its own train_step fed from its own loader
where it gives them; else the chapter's step on a host batch copied every step, as from a
loader), with a record_function range per phase opened and closed by the hooks of
perflab/instruments/phases.py, nothing added to it (no host read of the loss, no sync between steps).

1. Syncs, counted and located (CUDA): a few steps under
   torch.cuda.set_sync_debug_mode("warn"); each "synchronizing CUDA operation" warning
   is recorded with the phase and the Python frame that made the call (perflab/instruments/syncs.py).
2. One short profiled window (torch.profiler, schedule(wait=0, warmup, active,
   repeat=1); activities CPU + CUDA; the device drained before the window and after
   it, nothing in between): its chrome trace is kept and read (perflab/instruments/trace.py) for
   the blocking runtime calls (stream/device/event synchronize, device-to-host copies)
   with the operator that made each, the phase, and the host's time blocked in them;
   the device's busy time (union of kernels, copies and memsets) and its idle gaps,
   each gap's time charged to data (the host in the loader's next()), sync (the gap
   opened while the host was blocked in a sync), launch (the next work was launched
   after the device ran dry) or other, joined to the phases; all in ms per step.

On a CPU there is no device queue: the window is still profiled (the step's host time per
step), and the sync and device rows are unsupported, with the reason.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import statistics
import tempfile
from collections import defaultdict
from pathlib import Path

from perflab.core.names import PHASES
from perflab.experiments.r02_step_trace import (
    BLOCKED_TIME,
    BUSY,
    DEVICE_TIME,
    FREE_RUNNING,
    FREE_STEP_SHARE,
    FREE_STRETCHES,
    H2D_COPY,
    IDLE_TIME,
    NO_QUEUE,
    OWN_LOADER,
    STEP,
    STEP_TIME,
    STEPS,
    SYNC_COST_BOUND,
    SYNC_WARNINGS_PER_STEP,
    SYNCS,
    SYNCS_PER_STEP,
    WINDOW,
    WINDOW_SHARE,
    idle_variant,
    phase_variant,
    site_variant,
)
from perflab.instruments import phases, profiling, syncs, timing, trace
from perflab.pipeline.runner import run

STATS = ("mean", "median", "p25", "p75", "min", "max")


def _series(ctx, values, step_ms, *, variant, metric, window, how):
    """Per-step ms (mean = the window's total / steps) and the share of the window."""
    ctx.summary(values, variant=variant, metric=metric, window=window, sync_boundary=how,
                statistics=STATS)
    shares = sorted(100 * v / s for v, s in zip(values, step_ms) if s > 0)
    total = sum(step_ms)
    ctx.row(variant=variant, metric=WINDOW_SHARE, value=100 * sum(values) / total if total
            else 0.0, unit="%", n=len(values), window=window,
            sync_boundary=how + "; % of the window (totals)")
    for name, q in (("p25", 0.25), ("p75", 0.75)):
        ctx.row(variant=variant, metric=WINDOW_SHARE, statistic=name,
                value=shares[min(len(shares) - 1, int(q * len(shares)))], unit="%",
                n=len(values), window=window, sync_boundary=how + "; % of each step")


def _device_rows(ctx, w, att, window):
    how = "device timeline of the trace (Kineto, host-aligned clock)"
    _series(ctx, att.per_step[trace.BUSY], att.step_ms, variant=BUSY, metric=DEVICE_TIME,
            window=window, how=how + ": union of kernels, copies and memsets")
    for cause in trace.CAUSES:
        _series(ctx, att.per_step[cause], att.step_ms, variant=idle_variant(cause),
                metric=IDLE_TIME, window=window,
                how=how + f": idle gaps, the time charged to {cause} (perflab/instruments/trace.py)")
    for (cause, phase), ms in sorted(att.by_phase.items()):
        ctx.row(variant=phase_variant(phase, cause), statistic="mean", value=ms / att.steps,
                metric=DEVICE_TIME if cause == trace.BUSY else IDLE_TIME, unit="ms",
                n=att.steps, window=window, sync_boundary=how + f"; while the host was in "
                f"the {phase} range (ms per step)")
    copy_ms = trace.h2d_outside_kernels(w) / att.steps
    ctx.row(variant=H2D_COPY, metric=DEVICE_TIME, statistic="mean", value=copy_ms, unit="ms",
            n=att.steps, window=window, sync_boundary=how + ": host-to-device copies outside "
            "any kernel (ms per step)")
    ctx.row(variant=H2D_COPY, metric=WINDOW_SHARE, value=100 * copy_ms * att.steps
            / att.window_ms, unit="%", n=att.steps, window=window,
            sync_boundary=how + "; % of the window")
    ctx.log("device per step: busy {:.3f} ms, idle ".format(
        sum(att.per_step[trace.BUSY]) / att.steps) + ", ".join(
        f"{c} {sum(att.per_step[c]) / att.steps:.3f}" for c in trace.CAUSES) + " ms")


def _frames(hits, n_debug, sites, steps):
    """{(phase, op): the frame(s) the debug mode located for it}, joined phase by phase.

    Both instruments see the same calls of the same step, in the same order: within a
    phase, the frames (in the order the step first reaches them) are handed to the sites
    (in the same order) until each site's syncs per step are covered; where the counts do
    not add up, every site of the phase is given every frame of it."""
    per_frame = defaultdict(dict)  # phase -> {frame: syncs per step}, first-reached order
    for h in hits:
        counts = per_frame[h.phase]
        counts[h.frame] = counts.get(h.frame, 0.0) + 1.0 / n_debug
    out = {}
    for phase in dict.fromkeys(s.phase for s in sites):
        here = [s for s in sites if s.phase == phase]
        frames = list(per_frame.get(phase, {}).items())
        joined = _consume(here, frames, steps)
        if joined is None:
            every = "; ".join(f for f, _ in frames)
            joined = {s.site: every for s in here}
        out.update(joined)
    return out


def _consume(sites, frames, steps):
    """Frames handed to the sites in order, each site taking frames until its count is met;
    None when the counts do not match."""
    out, i = {}, 0
    for s in sites:
        need, got = s.occurrences / steps, []
        while i < len(frames) and need > 1e-6:
            got.append(frames[i][0])
            need -= frames[i][1]
            i += 1
        if abs(need) > 1e-6:
            return None
        out[s.site] = "; ".join(got)
    return out if i == len(frames) else None


def _blocked_per_step(w, att):
    per = [0.0] * att.steps
    for s in w.syncs:
        i = max(0, sum(1 for st in w.steps if st.start <= s.start) - 1)
        per[i] += (s.end - s.start) / 1e3
    return per




def _free_running(ctx, step, active):
    """The step's unprofiled ms per step, free-running as in the window (median of stretches)."""
    ms = timing.free_running_ms_per_step(step, steps=active, stretches=FREE_STRETCHES,
                                         sync=ctx.sync)
    ctx.summary(ms, variant=FREE_RUNNING, metric=STEP_TIME,
                window=f"{FREE_STRETCHES} free-running stretches of {active} steps, no profiler",
                sync_boundary="free-running: each stretch from a drained queue to one sync at "
                "its end; ms per step of each stretch",
                statistics=("median", "p25", "p75", "min", "max"))
    return float(statistics.median(ms))


def _free_step_share(ctx, bound, att, free_ms, window):
    """The sync cost bound as % of the unprofiled step: blocked time is the host waiting on
    the device, which the profiler's slower host shortens rather than stretches (it reaches
    each sync later), and the device's idle time in the real step is at most free - busy."""
    busy = sum(att.per_step[trace.BUSY]) / att.steps
    blocked = sum(bound) / att.steps
    share = 100 * min(blocked, max(0.0, free_ms - busy)) / free_ms if free_ms > 0 else 0.0
    ctx.row(variant=SYNC_COST_BOUND, metric=FREE_STEP_SHARE, value=share, unit="%",
            n=att.steps, window=window,
            sync_boundary=f"min(the window's bound {blocked:.3f} ms, free-running step "
            f"{free_ms:.3f} - device busy {busy:.3f} ms) per step, as % of the free-running "
            "unprofiled step")


def _sync_rows(ctx, w, att, hits, n_debug, window, free_ms):
    how = "blocking runtime calls in the trace (stream/device/event synchronize, " \
          "device-to-host copies), the harness's drain excluded"
    sites = trace.sync_sites(w)
    ctx.row(variant=SYNCS, metric=SYNCS_PER_STEP, value=sum(s.occurrences for s in sites)
            / att.steps, unit="count", n=att.steps, window=window,
            sync_boundary=how + "; operator calls that blocked, per step")
    ctx.row(variant=SYNCS, metric=SYNC_WARNINGS_PER_STEP, value=len(hits) / n_debug,
            unit="count", n=n_debug, window=f"{n_debug} steps after the window's warm steps",
            sync_boundary='torch.cuda.set_sync_debug_mode("warn"): "called a synchronizing '
            'CUDA operation" warnings per step')
    blocked = _blocked_per_step(w, att)
    _series(ctx, blocked, att.step_ms, variant=SYNCS, metric=BLOCKED_TIME, window=window,
            how=how + "; host time inside them")
    bound = [min(b, s + la) for b, s, la in zip(blocked, att.per_step[trace.SYNC],
                                                att.per_step[trace.LAUNCH])]
    _series(ctx, bound, att.step_ms, variant=SYNC_COST_BOUND, metric=IDLE_TIME, window=window,
            how="per step min(host blocked in syncs, device idle waiting on a sync or a "
            "launch): what removing the syncs could save at most (the host gains the blocked "
            "time to run ahead; the device can only gain its idle time)")
    _free_step_share(ctx, bound, att, free_ms, window)
    frames = _frames(hits, n_debug, sites, att.steps)
    for s in sites:
        v = site_variant(s.phase, s.op, frames.get((s.phase, s.op), ""))
        where = f"the sync site {s.op or 'a direct synchronize call'} in {s.phase}"
        for metric, value, unit in ((SYNCS_PER_STEP, s.occurrences / att.steps, "count"),
                                    (BLOCKED_TIME, s.blocked_ms / att.steps, "ms"),
                                    (IDLE_TIME, att.sync_idle_by_site.get(s.site, 0.0)
                                     / att.steps, "ms")):
            ctx.row(variant=v, metric=metric, value=value, unit=unit, n=att.steps,
                    window=window, sync_boundary=f"{how}; {where} (per step)")
        ctx.log(f"sync site {v}: {s.occurrences / att.steps:.3g}/step, blocked "
                f"{s.blocked_ms / att.steps:.3f} ms/step")
    ctx.log(f"syncs per step: {sum(s.occurrences for s in sites) / att.steps:.3g} (profiler), "
            f"{len(hits) / n_debug:.3g} (sync debug mode)")


def _no_queue(ctx):
    for variant, metric, unit in ((BUSY, DEVICE_TIME, "ms"), (H2D_COPY, DEVICE_TIME, "ms"),
                                  *((idle_variant(c), IDLE_TIME, "ms") for c in trace.CAUSES),
                                  (SYNCS, SYNCS_PER_STEP, "count"),
                                  (SYNCS, SYNC_WARNINGS_PER_STEP, "count"),
                                  (SYNCS, BLOCKED_TIME, "ms"), (SYNC_COST_BOUND, IDLE_TIME, "ms"),
                                  (SYNC_COST_BOUND, FREE_STEP_SHARE, "%")):
        ctx.unsupported(variant=variant, metric=metric, unit=unit, reason=NO_QUEUE)


def measure(ctx):
    p, t = ctx.params, ctx.timing
    step = ctx.step(resident=False, variants=(WINDOW,), metric=STEP_TIME)
    if step is None:
        return
    own = step.workload.loader is not None
    fed = "the workload's loader" if own else "make_batch's batch on the host, copied each step"
    ctx.row(variant=STEP, metric=OWN_LOADER, value=float(own), unit="bool", window=fed,
            sync_boundary="n/a: a property of the workload")
    ranged = phases.ranged(step, PHASES)
    timing.warm(ranged, t["warmup"], ctx.sync)
    hits = syncs.located(step, p["sync_steps"]) if ctx.is_cuda else []
    free_ms = _free_running(ctx, ranged, p["active"]) if ctx.is_cuda else None
    # each stage's end in the log: which of them a slow R02 spent its time in
    ctx.log(f"warmed, syncs located ({len(hits)}), free-running {free_ms or 0:.3f} ms a step")
    acts = "CPU + CUDA" if ctx.is_cuda else "CPU"
    window = (f"{p['active']} free-running steps (torch.profiler schedule wait 0, warmup "
              f"{p['warmup']}, active {p['active']}, activities {acts}) after {t['warmup']} "
              f"warm steps; batches from {fed}; drained before and after the window only")
    with tempfile.TemporaryDirectory(prefix="perflab-r02-") as d:
        path = ctx.outputs.get("trace") or str(Path(d) / "trace.json.gz")
        profiling.profile_window(ranged, device=ctx.device, sync=ctx.sync,
                                 warmup=p["warmup"], active=p["active"], trace_path=path)
        ctx.log(f"profiled window written ({Path(path).stat().st_size / 2**20:.1f} MiB)")
        w = trace.read_chrome_trace(path, PHASES)
    att = trace.attribute(w)
    ctx.log(f"trace read and attributed: {len(w.activities)} device activities, "
            f"{len(w.syncs)} sync calls")
    ctx.summary(att.step_ms, variant=WINDOW, metric=STEP_TIME, window=window,
                sync_boundary="each step's ProfilerStep range on the host clock (the last one "
                "until the device finished it); profiled, so slower than unprofiled",
                statistics=STATS)
    ctx.row(variant=WINDOW, metric=STEPS, value=att.steps, unit="count", window=window,
            sync_boundary="ProfilerStep ranges in the trace")
    if not ctx.is_cuda:
        _no_queue(ctx)
        return
    if not w.activities:
        for variant, metric in ((BUSY, DEVICE_TIME), (SYNCS, SYNCS_PER_STEP)):
            ctx.unsupported(variant=variant, metric=metric, unit="ms", status="error",
                            reason="the profiler recorded no device activity (is CUPTI "
                            "available to torch.profiler here?)")
        return
    _device_rows(ctx, w, att, window)
    _sync_rows(ctx, w, att, hits, p["sync_steps"], window, free_ms)


if __name__ == "__main__":
    run("R02", measure, globals().get("snakemake"))
