"""E01 — the lying benchmark.

The chapter's opening: a training step timed by an unsynchronized loop reports
submission, not completion. For each loop length this measures what the loop's
clock says per step, how long the final synchronize then blocks (work still
queued), and the real per-step time (loop + backlog), in rounds (each length once a
round) so the claims judge a loop's reported/real ratio by its spread; beside them the first
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
    HOST_RETURN_COMPLETED,
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
    runs = {n: [] for n in p["loops"]}
    for _ in range(p["loop_rounds"]):  # each length once a round: compared loops lie together
        for n in p["loops"]:
            runs[n].append(timing.time_unsynchronized_loop(step, n, ctx.sync))
    for n, loops in runs.items():
        _loop_rows(ctx, n, loops, t["warmup"])

    host = timing.host_return_samples(step, repeats=p["host_return_repeats"], sync=ctx.sync)
    ctx.summary(host.returned_ms, variant=HOST_RETURN, metric="step_latency",
                window="one step from an empty queue, warmed",
                sync_boundary="clock read when the call returns to Python (no sync)")
    ctx.summary(host.completed_ms, variant=HOST_RETURN_COMPLETED, metric="step_latency",
                window="the same calls as host_return, to their completion",
                sync_boundary="clock read after a sync that follows the call at once")

    # a scale's repeats (the CPU's 200: a median of a 20-30 ms step) or timing's
    repeats = t["repeats"] if p.get("repeats") is None else p["repeats"]
    synced = timing.time_calls(step, warmup=t["warmup"], repeats=repeats, sync=ctx.sync)
    s = ctx.summary(synced, variant=SYNCHRONIZED_WARMED, metric="step_latency",
                    window=f"steady state after warmup {t['warmup']}", sync_boundary=SYNCED)
    ctx.log(f"synchronized + warmed median of {len(synced)}: {s['median']:.3f} ms")


def _loop_rows(ctx, n: int, loops: list, warmup: int) -> None:
    """The first loop of ``n`` steps as the chapter times it (statistic ``value``), and every
    round's loop as samples with their median, min and max: the claims' interval."""
    lt = loops[0]
    window = f"the first loop of {n} after warmup {warmup}, queue empty at start"
    over = (f"{len(loops)} loops of {n} after warmup {warmup}, one a round over the lengths, "
            "queue empty at the start of each")
    for metric, attr, boundary in (
        (REPORTED_MS_PER_STEP, "reported_ms_per_step",
         "none inside the loop; clock read when the loop returns"),
        (BACKLOG_AT_FINAL_SYNC, "backlog_ms",
         f"time the final sync ({ctx.sync_name}) blocked after the loop"),
        (REAL_MS_PER_STEP, "real_ms_per_step", "loop + final sync"),
    ):
        ctx.row(variant=naive_loop(n), metric=metric, value=getattr(lt, attr), unit="ms",
                n=n, window=window, sync_boundary=boundary)
        ctx.summary([getattr(x, attr) for x in loops], variant=naive_loop(n), metric=metric,
                    window=over, sync_boundary=boundary, statistics=("median", "min", "max"))
    ctx.log(f"loop {n}: reported {lt.reported_ms_per_step:.3f} ms/step, backlog "
            f"{lt.backlog_ms:.1f} ms, real {lt.real_ms_per_step:.3f} ms/step (the first of "
            f"{len(loops)})")


if __name__ == "__main__":
    run(EID, measure, globals().get("snakemake"))
