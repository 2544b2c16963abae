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

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

from perflab.core.names import SAMPLING_DECISION, STEP_LATENCY
from perflab.core.names import SYNCED_CALL as SYNCED
from perflab.experiments.e01_lying_benchmark import (
    BACKLOG_AT_FINAL_SYNC,
    CONVERGENCE_POINTS,
    EID,
    FIRST_STEP,
    HOST_RETURN,
    HOST_RETURN_COMPLETED,
    REAL_MS_PER_STEP,
    REPORTED_MS_PER_STEP,
    ROUND_MEDIAN,
    SYNCHRONIZED_WARMED,
    UNDER_REPORT_PCT,
    UNWARMED,
    naive_loop,
)
from perflab.instruments import budgeted, timing
from perflab.kit import sampling
from perflab.pipeline.runner import run

#: the quantities E01's adaptive rounds decide, one observation a round (C01, C02, C04)
DECIDING = ("short_loop_ratio", "longest_minus_shortest_ratio", "host_return_ratio")


def measure(ctx):
    p, t = ctx.params, ctx.timing
    step = ctx.training_step()
    if step is None:
        return

    # the first step must be the first thing this process runs on the model
    first = timing.time_first_call(step, ctx.sync)
    ctx.row(variant=FIRST_STEP, metric=STEP_LATENCY, value=first, unit="ms",
            window="first training step in a fresh process", sync_boundary=SYNCED)
    ctx.log(f"first step {first:.3f} ms")

    unwarmed = timing.time_calls(step, warmup=0, repeats=p["loops"][0], sync=ctx.sync)
    ctx.summary(unwarmed, variant=UNWARMED, metric=STEP_LATENCY,
                window=f"calls 2..{len(unwarmed) + 1} of the process, no warmup",
                sync_boundary=SYNCED)

    timing.warm(step, t["warmup"], ctx.sync)
    rounds = p["loop_rounds"]
    per_round = max(1, p["host_return_repeats"] // rounds)
    runs = {n: [] for n in p["loops"]}
    hosts = []

    def take(_: int) -> dict[str, list[float]]:
        # each length once a round: compared loops lie together
        for n in p["loops"]:
            runs[n].append(timing.time_unsynchronized_loop(step, n, ctx.sync))
        # the host's return too, a share of its calls each round: the host's speed drifts
        # through a job, and the rounds show how far the ratio moves with it
        hosts.append(timing.host_return_samples(step, repeats=per_round, sync=ctx.sync))
        return _round_ratios(runs, hosts)

    if sampling.rule(ctx.contract) == sampling.FIXED:
        for i in range(rounds):
            take(i)
    else:
        _until_decided(ctx, take, rounds)
    for n, loops in runs.items():
        _loop_rows(ctx, n, loops, t["warmup"])
    _host_return_rows(ctx, hosts)

    # a scale's repeats (the CPU's 200: a median of a 20-30 ms step) or timing's
    repeats = t["repeats"] if p.get("repeats") is None else p["repeats"]
    synced = timing.time_calls(step, warmup=t["warmup"], repeats=repeats, sync=ctx.sync)
    s = ctx.summary(synced, variant=SYNCHRONIZED_WARMED, metric=STEP_LATENCY,
                    window=f"steady state after warmup {t['warmup']}", sync_boundary=SYNCED)
    ctx.log(f"synchronized + warmed median of {len(synced)}: {s['median']:.3f} ms")


def _round_ratios(runs: dict, hosts: list) -> dict[str, list[float]]:
    """The last round's observation of each quantity the claims decide: the shortest loop's
    reported/real (C01, %), the longest's less the shortest's (C02, points) and the median
    host return over the median completion (C04, %)."""
    import numpy as np

    short, long = runs[min(runs)][-1], runs[max(runs)][-1]
    ratio = 100 * short.reported_ms_per_step / short.real_ms_per_step
    rise = 100 * long.reported_ms_per_step / long.real_ms_per_step - ratio
    h = hosts[-1]
    host = 100 * float(np.median(h.returned_ms)) / float(np.median(h.completed_ms))
    return {DECIDING[0]: [ratio], DECIDING[1]: [rise], DECIDING[2]: [host]}


def _until_decided(ctx, take, rounds: int) -> None:
    """Rounds until C01's, C02's and C04's quantities are each decided against their bound
    (anytime-valid intervals of their medians over the rounds), or ``rounds`` are in: on an
    H200 the three sat 10, 95 and 4 points from their bounds (intervals under a point wide
    at 24 rounds), and the rounds were 48 s of the pipeline. A row says where it stopped."""
    thresholds = dict(zip(DECIDING, (UNDER_REPORT_PCT, CONVERGENCE_POINTS, UNDER_REPORT_PCT)))
    outcome = budgeted.until_decided(take, thresholds, budget_s=None, max_n=rounds,
                                     statistic="median")
    ctx.log(f"adaptive: {outcome.rounds} of at most {rounds} rounds ({outcome.reason}); "
            + "; ".join(f"{k} {d.line(u, 'rounds')}" for (k, d), u in zip(
                outcome.decisions.items(), ("%", " points", "%"))))
    for (k, d), unit in zip(outcome.decisions.items(), ("%", "points", "%")):
        ctx.row(variant=k, metric=SAMPLING_DECISION, value=d.estimate, unit=unit, n=d.n,
                statistic="median", window=f"{outcome.rounds} rounds of at most {rounds}, "
                f"stopped: {outcome.reason}", sync_boundary="one observation a round; 95% "
                f"anytime interval {d.low:.4g}..{d.high:.4g}", reason=d.line(unit, "rounds"))


def _host_return_rows(ctx, hosts: list) -> None:
    """Every round's host-return calls as one series each way, and each round's median."""
    import numpy as np

    where = f"{len(hosts)} rounds of {len(hosts[0].returned_ms)} calls, after each round's loops"
    for variant, attr, window, boundary in (
        (HOST_RETURN, "returned_ms", "one step from an empty queue, warmed",
         "clock read when the call returns to Python (no sync)"),
        (HOST_RETURN_COMPLETED, "completed_ms", "the same calls as host_return, to their "
         "completion", "clock read after a sync that follows the call at once"),
    ):
        calls = [getattr(h, attr) for h in hosts]
        ctx.summary([x for c in calls for x in c], variant=variant, metric=STEP_LATENCY,
                    window=f"{window} ({where})", sync_boundary=boundary)
        ctx.summary([float(np.median(c)) for c in calls], variant=variant,
                    metric=ROUND_MEDIAN, window=f"each round's median ({where})",
                    sync_boundary=boundary, statistics=("median", "min", "max"))


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
