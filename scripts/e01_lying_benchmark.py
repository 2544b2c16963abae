"""E01 — the lying benchmark.

The chapter's opening: a training step timed by an unsynchronized loop reports
submission, not completion. For each loop length this measures what the loop's
clock says per step, how long the final synchronize then blocks (work still
queued), and the real per-step time (loop + backlog); beside them the first
step of the process, an unwarmed series, one step's host-visible return, and
the synchronized, warmed median — the real number.

On CPU execution is synchronous: the backlog is ~0 and the trap is cold vs
steady (first call, unwarmed, warmed).
"""

from perflab.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

from perflab import timing
from perflab.experiments.e01_lying_benchmark import (
    BACKLOG_AT_FINAL_SYNC,
    EID,
    FIRST_STEP,
    HOST_RETURN,
    REAL_MS_PER_STEP,
    REPORTED_MS_PER_STEP,
    SYNCHRONIZED_WARMED,
    UNWARMED,
    naive_loop,
)
from perflab.runner import run

SYNCED = "synchronized at both ends of each call"


def measure(ctx):
    p, t = ctx.params, ctx.timing
    step = ctx.training_step()
    if step is None:
        return

    # the first step must be the first thing this process runs on the model
    first = timing.time_first_call(step, ctx.sync)
    ctx.row(variant=FIRST_STEP, metric="step_latency", value=first, unit="ms",
            window="first training step in a fresh process", sync_boundary=SYNCED)
    ctx.log(f"first step {first:.3f} ms")

    unwarmed = timing.time_calls(step, warmup=0, repeats=p["loops"][0], sync=ctx.sync)
    ctx.summary(unwarmed, variant=UNWARMED, metric="step_latency",
                window=f"calls 2..{len(unwarmed) + 1} of the process, no warmup",
                sync_boundary=SYNCED)

    timing.warm(step, t["warmup"], ctx.sync)
    for n in p["loops"]:
        lt = timing.time_unsynchronized_loop(step, n, ctx.sync)
        window = f"loop of {n} after warmup {t['warmup']}, queue empty at start"
        ctx.row(variant=naive_loop(n), metric=REPORTED_MS_PER_STEP,
                value=lt.reported_ms_per_step, unit="ms", n=n, window=window,
                sync_boundary="none inside the loop; clock read when the loop returns")
        ctx.row(variant=naive_loop(n), metric=BACKLOG_AT_FINAL_SYNC,
                value=lt.backlog_ms, unit="ms", n=n, window=window,
                sync_boundary=f"time the final sync ({ctx.sync_name}) blocked after the loop")
        ctx.row(variant=naive_loop(n), metric=REAL_MS_PER_STEP,
                value=lt.real_ms_per_step, unit="ms", n=n, window=window,
                sync_boundary="loop + final sync")
        ctx.log(f"loop {n}: reported {lt.reported_ms_per_step:.3f} ms/step, backlog "
                f"{lt.backlog_ms:.1f} ms, real {lt.real_ms_per_step:.3f} ms/step")

    host = timing.host_return_samples(step, repeats=p["host_return_repeats"], sync=ctx.sync)
    ctx.summary(host, variant=HOST_RETURN, metric="step_latency",
                window="one step from an empty queue, warmed",
                sync_boundary="clock read when the call returns to Python (no sync)")

    # a scale's repeats (the CPU's 200: a median of a 20-30 ms step) or timing's
    repeats = t["repeats"] if p.get("repeats") is None else p["repeats"]
    synced = timing.time_calls(step, warmup=t["warmup"], repeats=repeats, sync=ctx.sync)
    s = ctx.summary(synced, variant=SYNCHRONIZED_WARMED, metric="step_latency",
                    window=f"steady state after warmup {t['warmup']}", sync_boundary=SYNCED)
    ctx.log(f"synchronized + warmed median of {len(synced)}: {s['median']:.3f} ms")


if __name__ == "__main__":
    run(EID, measure, globals().get("snakemake"))
