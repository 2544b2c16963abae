"""E05 — localize before intervening: the seven phases of the training step.

Each step is bracketed into input_wait, host_to_device, forward, loss,
backward, optimizer and logging. With the device synchronized at every
boundary each phase is charged for its own work (median, IQR, share of the
sum); the sum of phase medians is set against the uninstrumented step (the
same seven operations, one sync at the end), the two measured in turn, in blocks. The same
brackets without the per-phase sync show where the time lands when the clock
reads submission: the first host read (logging) absorbs the backlog.

The step is the workload's own (its train_step fed from its loader) where it
gives them, else the chapter's with its batch on the host, as from a data
loader; the phase boundaries come from hooks (perflab/instruments/phases.py), so the
user's code is not edited. Each step ends with a host read of its loss, as a
loop's logging would. On CPU host_to_device is a no-op copy and the syncs are
no-ops.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import time  # noqa: E402

from perflab.core.names import SAMPLING_DECISION, STEP_LATENCY
from perflab.experiments.e05_phases import (
    EID,
    ENTRIES_PER_STEP,
    FED_BY_LOADER,
    INPUT_SHARE_DECISION,
    INTERLEAVED_BLOCKS,
    NOSYNC,
    OPTIMIZER_SHARE_DECISION,
    PHASE_SHARE,
    PHASE_TIME,
    SERVED_BATCH,
    STEP_LATENCY_REL,
    SUM_MINUS_TOTAL,
    SUM_OF_PHASES,
    SYNC,
    UNINSTRUMENTED_TOTAL,
)
from perflab.instruments import budgeted, timing
from perflab.instruments import phases as ph
from perflab.kit import sampling
from perflab.pipeline.runner import run

#: the shares the diagnosis decides on, each the phases it sums and its threshold (%):
#: with a budget (sampling.rule adaptive) the blocks stop once both are decided
DECIDING = {INPUT_SHARE_DECISION: (("input_wait", "host_to_device"), "INPUT_SHARE_PCT"),
            OPTIMIZER_SHARE_DECISION: (("optimizer",), "OPTIMIZER_SHARE_PCT")}


def measure(ctx):
    started = time.perf_counter()
    # calls per series: E05's own `repeats` where set (perflab diagnose), else timing's
    t = {**ctx.timing, "repeats": ctx.params.get("repeats") or ctx.timing["repeats"]}
    step = ctx.step(resident=False, metric=PHASE_TIME)
    if step is None:
        return
    synced = ph.timed(step, ctx.sync)
    unsynced = ph.timed(step, None)
    plain = step.and_read()
    timing.warm(plain, t["warmup"], ctx.sync)
    fed = FED_BY_LOADER if step.workload.loader is not None else SERVED_BATCH
    window = f"steady state after warmup {t['warmup']}; batches from {fed}"

    budget = (sampling.job_budget_s(ctx.contract, EID)
              if sampling.rule(ctx.contract) == sampling.ADAPTIVE else None)
    if budget is None:  # the fixed count (rule fixed, or no budget split to this job)
        phases, entries, plain_ms, block = _interleaved(ctx, synced, plain, t["repeats"])
    else:
        phases, entries, plain_ms, block, outcome = _adaptive(
            ctx, synced, plain, t["repeats"], budget - (time.perf_counter() - started))
        t["repeats"] = len(block)
    free_window = window + "; after the phased and uninstrumented blocks"
    window += f"; {max(block) + 1} blocks, phased and uninstrumented steps in turn (AB|BA)"
    boundary = f"sync ({ctx.sync_name}) at every phase boundary (hooks)"
    medians = {}
    for phase, samples in phases.items():
        medians[phase] = ctx.summary(samples, variant=SYNC + phase, metric=PHASE_TIME,
                                     window=window, sync_boundary=boundary,
                                     block=block)["median"]
    total_of_medians = sum(medians.values())
    for phase, med in medians.items():
        ctx.row(variant=SYNC + phase, metric=PHASE_SHARE, value=100 * med / total_of_medians,
                unit="%", n=t["repeats"], window=window,
                sync_boundary=boundary + "; share of the sum of phase medians")
    ctx.row(variant=SUM_OF_PHASES, metric=STEP_LATENCY, value=total_of_medians, unit="ms",
            n=t["repeats"], window=window, sync_boundary="sum of the per-phase medians")

    total = ctx.summary(plain_ms, variant=UNINSTRUMENTED_TOTAL, metric=STEP_LATENCY,
                        window=window, sync_boundary="synchronized at both ends of the step only",
                        block=block)
    ctx.row(variant=UNINSTRUMENTED_TOTAL, metric=INTERLEAVED_BLOCKS, value=max(block) + 1,
            unit="count", window=window, sync_boundary="sample i of each series in block i's "
            "pair: C11 resamples them together")
    gap = total_of_medians - total["median"]
    ctx.row(variant=SUM_MINUS_TOTAL, metric=STEP_LATENCY, value=gap, unit="ms",
            n=t["repeats"], window=window,
            sync_boundary="sum of phase medians - uninstrumented median")
    ctx.row(variant=SUM_MINUS_TOTAL, metric=STEP_LATENCY_REL,
            value=100 * gap / total["median"], unit="%", n=t["repeats"], window=window,
            sync_boundary="sum of phase medians - uninstrumented median, % of the latter")

    if budget is not None:
        _decision_rows(ctx, outcome, window, budget)
    for phase, counts in entries.items():
        ctx.row(variant=SYNC + phase, metric=ENTRIES_PER_STEP,
                value=sorted(counts)[len(counts) // 2], unit="count", statistic="median",
                n=len(counts), window=window, sync_boundary="how often the hooks entered the "
                "phase in one step (0: its boundary never fired, e.g. no optimizer step)")
    free, _ = ph.samples(unsynced, t["repeats"])
    for phase, samples in free.items():
        ctx.summary(samples, variant=NOSYNC + phase, metric=PHASE_TIME, window=free_window,
                    sync_boundary="clock read at each boundary with no sync: submission times; "
                                  "float(loss) in logging is the first host read")
    largest = max(medians, key=medians.get)
    absorber = max(free, key=lambda p: sorted(free[p])[len(free[p]) // 2])
    ctx.log("phases (sync): " + ", ".join(f"{p} {m:.3f}" for p, m in medians.items()))
    ctx.log(f"sum {total_of_medians:.3f} ms vs uninstrumented {total['median']:.3f} ms; "
            f"largest phase {largest}; without sync the largest is {absorber}")


def _interleaved(ctx, synced, plain, repeats: int):
    """``repeats`` phased steps and as many uninstrumented ones, in turn in blocks (AB, then
    BA, ...): a drift of the machine lands on both series alike, where one series measured
    after the other reads it as the instruments' cost (the CPU read the sum 16% below the
    step it instruments). Returns (phase samples, entries, uninstrumented samples, the block
    of each sample: the same for sample i of every series)."""
    blocks = max(1, min(ctx.params["blocks"], repeats))
    sizes = [repeats // blocks + (b < repeats % blocks) for b in range(blocks)]
    series = _series()
    for b, n in enumerate(sizes):
        _block(ctx, synced, plain, b, n, series)
    return series


def _series():
    """(phase samples, entries, uninstrumented samples, block of each sample), empty."""
    return {p: [] for p in ph.PHASES}, {p: [] for p in ph.PHASES}, [], []


def _block(ctx, synced, plain, b: int, n: int, series) -> dict[str, list[float]]:
    """Block ``b``: ``n`` phased and ``n`` uninstrumented steps in its AB order, appended to
    ``series``; returns the phased steps' per-phase ms."""
    phases, entries, plain_ms, block = series
    for side in timing.ab_order(b):  # A: the phased steps, B: the uninstrumented
        if side == "B":
            plain_ms += timing.time_calls(plain, warmup=0, repeats=n, sync=ctx.sync)
            continue
        ms, ent = ph.samples(synced, n)
        for p in ph.PHASES:
            phases[p] += ms[p]
            entries[p] += ent[p]
    block += [b] * n
    return ms


def _shares(ms: dict[str, list[float]]) -> dict[str, list[float]]:
    """Each deciding share of each step in ``ms`` (% of that step's phase sum)."""
    n = len(ms[ph.PHASES[0]])
    total = [sum(ms[p][i] for p in ph.PHASES) or float("nan") for i in range(n)]
    return {k: [100 * sum(ms[p][i] for p in parts) / total[i] for i in range(n)]
            for k, (parts, _) in DECIDING.items()}


def _adaptive(ctx, synced, plain, repeats: int, budget_s: float):
    """The blocks of :func:`_interleaved` one at a time (AB, BA, ...), until both deciding
    shares are decided against their thresholds, twice the fixed count is in, or about two
    thirds of what is left of the job's budget is spent (the unsynchronized series after
    the blocks takes about half as long as they did)."""
    from perflab.views import diagnose as view  # the thresholds the verdict holds them to

    n = max(1, repeats // max(1, min(ctx.params["blocks"], repeats)))
    series = _series()

    def take(b: int) -> dict[str, list[float]]:
        return _shares(_block(ctx, synced, plain, b, n, series))

    thresholds = {k: getattr(view, name) for k, (_, name) in DECIDING.items()}
    outcome = budgeted.until_decided(take, thresholds, budget_s=max(0.0, budget_s) * 2 / 3,
                                     max_n=2 * repeats)
    ctx.log(f"adaptive: {outcome.rounds} blocks of {n} steps in {outcome.elapsed_s:.1f} s "
            f"({outcome.reason}); " + "; ".join(
                f"{k} {d.line('%', 'steps')}" for k, d in outcome.decisions.items()))
    return (*series, outcome)


def _decision_rows(ctx, outcome, window: str, budget_s: float) -> None:
    """One row per deciding share: its estimate over the steps taken, and in ``reason``
    whether it was decided against its threshold or left undecided within the budget."""
    for k, d in outcome.decisions.items():
        ctx.row(variant=k, metric=SAMPLING_DECISION, value=d.estimate, unit="%", n=d.n,
                statistic="mean", window=f"{window}; {outcome.rounds} blocks, stopped: "
                f"{outcome.reason} (budget {budget_s:.1f} s)",
                sync_boundary="per-step share of the phase sum (sync at every boundary), "
                f"95% anytime interval {d.low:.3g}..{d.high:.3g} %",
                reason=d.line("%", "steps"))


if __name__ == "__main__":
    run(EID, measure, globals().get("snakemake"))
