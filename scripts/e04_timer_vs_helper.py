"""E04 — torch.utils.benchmark.Timer vs the project's helper.

The same mutable training step measured by Timer.blocked_autorange (which
chooses a block size and times blocks of calls) and by the helper (warmup,
then per-call synchronized samples). Both are valid; they measure slightly
different boundaries, so the report shows them side by side.

The two instruments take turns in rounds (helper then Timer, Timer then helper, ...):
each round's Timer measurement and helper calls run next to each other, so a drift of
the host lands on both, and their difference is judged as an A/B of paired rounds.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import statistics

from perflab.core.names import STEP_LATENCY, SYNCED_CALL
from perflab.experiments.e04_timer_vs_helper import (
    EID,
    HELPER,
    NUMBER_PER_RUN,
    RUNS,
    TIMER,
    TIMER_MINUS_HELPER,
)
from perflab.instruments import ab, timing
from perflab.pipeline.runner import run


def measure(ctx):
    p, t = ctx.params, ctx.timing
    step = ctx.training_step()
    if step is None:
        return
    timing.warm(step, t["warmup"], ctx.sync)
    rounds = p["blocks"]
    per_round_s = p["min_run_time_s"] / rounds
    calls = max(1, t["repeats"] // rounds)
    timer, helper = ([], [], []), ([], [], [])  # (samples, round of each, round medians)
    number = None  # the Timer's block size: blocked_autorange's choice in its first round
    for r in range(rounds):
        # AB|BA: the helper first in even rounds, the Timer first in odd ones
        for which in ((HELPER, TIMER) if r % 2 == 0 else (TIMER, HELPER)):
            if which == HELPER:
                _add(helper, r, timing.time_calls(step, warmup=0, repeats=calls, sync=ctx.sync))
            elif number is None:
                m = timing.timer_blocked_autorange(step, min_run_time=per_round_s)
                number = m["number_per_run"]
                _add(timer, r, m["times_ms"])
            else:
                _add(timer, r, timing.timer_blocks(step, number=number, min_run_time=per_round_s))
        ctx.log(f"round {r + 1}/{rounds}: Timer {timer[2][-1]:.3f} ms, "
                f"helper {helper[2][-1]:.3f} ms (round medians)")
    window = (f"{rounds} rounds after warmup {t['warmup']}, the instruments in turn (AB|BA): "
              f"each round {per_round_s:.3g} s of Timer blocks (blocked_autorange's own block "
              f"size, chosen in its first round; Timer.timeit blocks of it after) and "
              f"{calls} helper calls")
    timer_boundary = ("sync (" + ctx.sync_name + ") at each block's ends; per-call time = "
                      f"block / {number}")
    pc = ab.record(ctx, ab.Side(HELPER, helper[0], helper[1], helper[2],
                                SYNCED_CALL),
                   ab.Side(TIMER, timer[0], timer[1], timer[2], timer_boundary),
                   metric=STEP_LATENCY, window=window, diff_variant=TIMER_MINUS_HELPER)
    kw = dict(variant=TIMER, window=window, sync_boundary=timer_boundary)
    ctx.row(metric=NUMBER_PER_RUN, value=number, unit="calls", **kw)
    ctx.row(metric=RUNS, value=len(timer[0]), unit="blocks", n=rounds, **kw)
    ctx.log(f"Timer: median {pc.b_median:.3f} ms; helper: median {pc.a_median:.3f} ms; "
            f"Timer - helper {pc.judgement.relative_pct:+.1f}% (median paired difference of "
            f"{rounds} rounds)")


def _add(side, r, values):
    """Append one round's values to (samples, block_of, round medians)."""
    samples, block_of, medians = side
    samples += values
    block_of += [r] * len(values)
    medians.append(statistics.median(values))


if __name__ == "__main__":
    run(EID, measure, globals().get("snakemake"))
