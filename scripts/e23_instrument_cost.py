"""E23 — forensic mode vs performance mode: what each instrument costs.

Three instruments on the controlled step, each against the same step without
it (one model and optimizer throughout, so both sides see the same state):

* per-phase synchronization: ``phases.timed`` (the phase hooks) with the
  device's synchronize before each phase's clock read against the same step
  with only the loss read (E05's step: batch from the host or the workload's
  loader);
* ``.item()`` every step: the training step followed by ``loss.item()``
  against the step with no host read;
* the profiler: ``torch.profiler`` with a schedule and ``record_function``
  ranges, its active steps timed, against the plain step timed right before
  and after each profiling session (bracketing, so drift shows).

The first two are interleaved A/B pairs whose samples are free-running
stretches of up to 10 steps (synchronized only at their ends, so the
uninstrumented side keeps the run-ahead a training loop has); the profiler's
steps are timed one by one, synchronized at both ends, like its brackets.
Rows per instrument: baseline and instrumented medians and block spreads,
the cost in ms and %, and whether the cost exceeds the block-to-block
spread. This regenerates the chapter's forensic-vs-performance-mode table.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import math

from perflab.experiments.e23_instrument_cost import (
    BRACKET_DRIFT,
    COST,
    INSTRUMENTS,
    ITEM,
    PHASE_SYNC,
    PROFILER,
    STEP_LATENCY,
    STOP_AT,
    baseline_variant,
    cost_variant,
    instrumented_variant,
)
from perflab.instruments import phases, profiling, steps, timing
from perflab.instruments.sequential import NO_CHANGE
from perflab.instruments.steps import PHASES
from perflab.pipeline.runner import run

#: steps in one timed free-running stretch (fewer when a block has fewer)
STRETCH = 10
#: the profiler's schedule before its active steps, in each session
PROFILER_WAIT, PROFILER_WARMUP = 1, 1


def _ab(ctx, key, fa, fb, a_sync, b_sync, what):
    """One instrument as an interleaved A/B of free-running stretches."""
    p, t = ctx.params, ctx.timing
    k = min(STRETCH, p["inner"])
    calls = max(1, p["inner"] // k)
    res = ctx.interleaved(profiling.free_running(fa, k), profiling.free_running(fb, k),
                          blocks=p["blocks"], inner=calls,
                          warmup=max(1, math.ceil(t["warmup"] / k)), variant=cost_variant(key),
                          stop_at=STOP_AT.get(key, NO_CHANGE))
    n_blocks, calls = len(res.a_blocks), len(res.a_samples) // max(1, len(res.a_blocks))
    block_of = [i for i in range(n_blocks) for _ in range(calls)]
    window = (f"{INSTRUMENTS[key]}: {what}; interleaved A/B, {n_blocks} blocks per side "
              f"alternating {'/'.join(dict.fromkeys(res.order))}, each {calls} stretch(es) of "
              f"{k} free-running steps (ms per step = stretch time / {k})")
    stretch = f"{ctx.sync_name} at both ends of each {k}-step stretch; "
    return profiling.record_pair(
        ctx, metric=STEP_LATENCY, window=window,
        sides=[(baseline_variant(key), [v / k for v in res.a_samples], block_of,
                [v / k for v in res.a_blocks], stretch + a_sync),
               (instrumented_variant(key), [v / k for v in res.b_samples], block_of,
                [v / k for v in res.b_blocks], stretch + b_sync)],
        diff_variant=cost_variant(key), diff_metric=COST,
    )


def _profiler(ctx, base, ranged):
    """Profiling sessions, each bracketed by unprofiled series of the plain step."""
    p, t = ctx.params, ctx.timing
    n = p["inner"]
    # its own count: a session's start and stop cost far more than its steps, and the
    # profiler's cost is tens of % (the A/Bs' few % are what more pairs are for)
    sessions = p["blocks"] if p["sessions"] is None else p["sessions"]
    timing.warm(base, t["warmup"], ctx.sync)
    res = profiling.bracketed_sessions(base, ranged, device=ctx.device, sync=ctx.sync,
                                       sessions=sessions, bracket=n, wait=PROFILER_WAIT,
                                       warmup=PROFILER_WARMUP, active=n)
    acts = "CPU + CUDA" if ctx.is_cuda else "CPU"
    window = (f"{INSTRUMENTS[PROFILER]}: {sessions} sessions of schedule(wait="
              f"{PROFILER_WAIT}, warmup={PROFILER_WARMUP}, active={n}, repeat=1), activities "
              f"{acts}, profile_memory=True, over the step with record_function ranges; each "
              f"session bracketed by {n} unprofiled steps of the plain step right before and "
              "after (blocks in time order: even = unprofiled, odd = profiled)")
    synced = f"{ctx.sync_name} at both ends of each step"
    pc = profiling.record_bracketed(
        ctx, res, metric=STEP_LATENCY, window=window,
        variants=(baseline_variant(PROFILER), instrumented_variant(PROFILER)),
        syncs=(synced + "; no profiler",
               synced + "; the profiler's active steps (prof.step() outside the timed region)"),
        diff_variant=cost_variant(PROFILER), diff_metric=COST)
    base_blocks = res.unprofiled_blocks
    ctx.row(variant=baseline_variant(PROFILER), metric=BRACKET_DRIFT,
            value=base_blocks[-1] - base_blocks[0], unit="ms", window=window,
            sync_boundary="last unprofiled block median minus the first", n=len(base_blocks))
    return pc


def measure(ctx):
    base = ctx.step(variants=tuple(cost_variant(key) for key in INSTRUMENTS), metric=COST)
    if base is None:
        return
    base_and_read = base.and_read()
    # E05's step: its batch from the host (or the workload's loader), the loss read at the end
    host = steps.build(base.workload, ctx.device, model=base.model, optimizer=base.optimizer,
                       resident=False,
                       batches=base.batches if base.workload.loader is not None else None)
    plain = host.and_read()
    phased = phases.timed(host, ctx.sync)
    ranged = phases.ranged(base, profiling.PHASE_RANGES)
    cpu = "" if ctx.is_cuda else " (CPU: synchronize is a no-op, so only the clock reads remain)"

    results = {
        PHASE_SYNC: _ab(ctx, PHASE_SYNC, plain, phased,
                          "the step (batch copy included) and one loss read",
                          "the same, with a sync and a clock read at each phase boundary "
                          "(hooks)",
                          f"a synchronize at each of the {len(PHASES)} phases' boundaries "
                          "against the loss read alone" + cpu),
        ITEM: _ab(ctx, ITEM, base, base_and_read, "no host read",
                    "loss.item() after every step",
                    "a host read of the loss every step against none"
                    + ("" if ctx.is_cuda else " (CPU: no device queue, so expected ~0)")),
        PROFILER: _profiler(ctx, base, ranged),
    }
    for key, pc in results.items():
        ctx.log(f"{INSTRUMENTS[key]}: baseline {pc.a_median:.3f} ms, instrumented "
                f"{pc.b_median:.3f} ms, cost {pc.diff:+.3f} ms ({100 * pc.rel:+.1f}%), block "
                f"spread {pc.noise:.3f} ms -> {'resolved' if pc.resolved else 'unresolved'}")


if __name__ == "__main__":
    run("E23", measure, globals().get("snakemake"))
