"""E14 — the profiler localizes; it does not measure.

The training step (the workload's own where it gives one) with a
``record_function`` range per phase (forward, loss, backward, optimizer),
opened and closed by the phase hooks of perflab/instruments/phases.py, runs under ``torch.profiler`` with
``schedule(wait, warmup, active, repeat=1)`` and ``profile_memory=True``
(activities: CPU, plus CUDA on a CUDA device), ``prof.step()`` after each
step. Rows: the time of each phase range summed over the active steps (on
CUDA the device time of the kernels launched inside the range, and the host
time beside it; on a CPU the CPU time, the CPU being the device); the top
operators by self device time (CPU: self CPU time), one row per operator;
the profiled step's synchronized wall time over the active steps of
``sessions`` sessions, each bracketed by unprofiled calls of the same step,
and their paired difference, judged as an A/B against C00's floor: the
profiler's overhead. The ranges, operators and
chrome trace are the first session's; the trace is written gzipped beside the CSV.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

from perflab.experiments.e14_profiler import (
    OP_SELF_CPU_TIME,
    OP_SELF_DEVICE_TIME,
    OVERHEAD,
    PROFILED,
    PROFILER_OVERHEAD,
    RANGE_CPU_TIME,
    RANGE_DEVICE_TIME,
    STEP_LATENCY,
    UNPROFILED,
    op_variant,
    range_variant,
)
from perflab.instruments import phases, profiling, timing
from perflab.pipeline.runner import run

STATS = ("median", "iqr", "p25", "p75", "mean", "min", "max")


def _overhead(ctx, step, synced: str):
    """The same step profiled in ``sessions`` sessions, each bracketed by unprofiled calls;
    rows of both sides and of their paired difference (the A/B judgement).

    Returns the first profiling session (its ranges, operators and trace are the rows
    beside) and its window.
    """
    p, t = ctx.params, ctx.timing
    sessions = int(p["sessions"])
    bracket = max(1, t["repeats"] // (sessions + 1))
    sched = f"schedule(wait={p['wait']}, warmup={p['warmup']}, active={p['active']}, repeat=1)"
    timing.warm(step, t["warmup"], ctx.sync)
    res = profiling.bracketed_sessions(step, step, device=ctx.device, sync=ctx.sync,
                                       sessions=sessions, bracket=bracket, wait=p["wait"],
                                       warmup=p["warmup"], active=p["active"], keep_first=True)
    acts = "CPU + CUDA" if res.first.device_activity else "CPU"
    window = f"the {p['active']} active steps of {sched}, activities {acts}, profile_memory=True"
    pc = profiling.record_bracketed(
        ctx, res, metric=STEP_LATENCY,
        window=(f"{window}; {sessions} sessions, each bracketed by {bracket} unprofiled calls "
                f"right before and after (after warmup {t['warmup']}; blocks in time order: "
                "even = unprofiled, the record_function ranges present but inert, odd = "
                "profiled)"),
        variants=(UNPROFILED, PROFILED),
        syncs=(synced, synced + "; prof.step() outside the timed region"),
        diff_variant=PROFILER_OVERHEAD, diff_metric=OVERHEAD)
    ctx.log(f"profiled {pc.b_median:.3f} ms vs unprofiled {pc.a_median:.3f} ms over "
            f"{sessions} bracketed sessions: overhead {pc.diff:+.3f} ms "
            f"({100 * pc.rel:+.1f}%) -> {'resolved' if pc.resolved else 'unresolved'}")
    return res.first, window + " (the first session)"


def _range_rows(ctx, prof_run, window: str) -> None:
    """Where the time goes, in proportion: each phase range over the active steps."""
    ranges = profiling.range_times(prof_run.prof, profiling.PHASE_RANGES,
                                   device_activity=prof_run.device_activity)
    for name, rt in ranges.items():
        variant = range_variant(name)
        if prof_run.device_activity:
            ctx.row(variant=variant, metric=RANGE_DEVICE_TIME, value=rt.device_ms, unit="ms",
                    window=window + "; device time summed over the active steps",
                    sync_boundary="kernels launched while the range was open on the host "
                    "(any thread), their device durations summed", n=rt.count)
        ctx.row(variant=variant, metric=RANGE_CPU_TIME, value=rt.cpu_ms, unit="ms",
                window=window + "; host (CPU) time summed over the active steps"
                + ("" if prof_run.device_activity else " (on a CPU the CPU is the device)"),
                sync_boundary="the range's host duration (cpu_time_total)", n=rt.count)
        ctx.log(f"range {name}: {rt.count}x, host {rt.cpu_ms:.3f} ms"
                + (f", device {rt.device_ms:.3f} ms" if rt.device_ms is not None else ""))


def _op_rows(ctx, prof_run, window: str, top: int) -> None:
    """The ``top`` operators by self time (device time where the profiler saw the device)."""
    by_device = prof_run.device_activity
    metric = OP_SELF_DEVICE_TIME if by_device else OP_SELF_CPU_TIME
    what = ("self device time: the kernels the operator launched itself" if by_device
            else "self CPU time: host time inside the operator, its children excluded")
    for rank, op in enumerate(profiling.top_ops(prof_run.prof, top, by_device=by_device),
                              start=1):
        ctx.row(variant=op_variant(op.name), metric=metric, value=op.self_ms, unit="ms",
                window=window + f"; rank {rank} of the top {top} operators by "
                "self time, summed over the active steps; ranges and annotations excluded",
                sync_boundary=what + "; n = calls", n=op.calls)


def measure(ctx):
    base = ctx.step()
    if base is None:
        return
    step = phases.ranged(base, profiling.PHASE_RANGES)  # ranges opened and closed by hooks
    prof_run, window = _overhead(ctx, step, f"{ctx.sync_name} at both ends of each step")
    _range_rows(ctx, prof_run, window)
    _op_rows(ctx, prof_run, window, ctx.params["top_ops"])
    trace = ctx.outputs.get("trace")
    if trace:
        profiling.export_trace_gz(prof_run.prof, trace)
        ctx.log(f"chrome trace of the active steps -> {trace}")
    else:
        ctx.log("no trace output path given: chrome trace not written")


if __name__ == "__main__":
    run("E14", measure, globals().get("snakemake"))
