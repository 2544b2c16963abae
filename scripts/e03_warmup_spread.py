"""E03 — warmup and spread.

Repeats the synchronized training step after warmup 0, 1 and 30 (in that
order, the first series starting in a fresh process, so warmup 0 includes the
process's first step), then 400 warmed steps summarised by median, IQR,
quartiles, mean, std, max and the count of steps above median + 3 IQR.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

from perflab.core.names import STEP_LATENCY
from perflab.core.names import SYNCED_CALL as SYNCED
from perflab.experiments.e03_warmup_spread import EID, SPREAD, SPREAD_STATISTICS, warmup_variant
from perflab.instruments import timing
from perflab.pipeline.runner import run


def measure(ctx):
    p, t = ctx.params, ctx.timing
    step = ctx.training_step()
    if step is None:
        return

    for i, wu in enumerate(p["warmups"]):
        samples = timing.time_calls(step, warmup=wu, repeats=p["repeats"], sync=ctx.sync)
        where = "fresh process" if i == 0 else "after the previous series"
        s = ctx.summary(samples, variant=warmup_variant(wu), metric=STEP_LATENCY,
                        window=f"warmup {wu} ({where}), then {p['repeats']} repeats",
                        sync_boundary=SYNCED)
        ctx.log(f"warmup {wu}: median {s['median']:.3f} mean {s['mean']:.3f} max {s['max']:.3f}")

    samples = timing.time_calls(step, warmup=t["warmup"], repeats=p["spread_repeats"],
                                sync=ctx.sync)
    s = ctx.summary(samples, variant=SPREAD, metric=STEP_LATENCY,
                    window=f"steady state after warmup {t['warmup']}", sync_boundary=SYNCED,
                    statistics=SPREAD_STATISTICS)
    ctx.log(f"spread: median {s['median']:.3f} IQR {s['iqr']:.3f} "
            f"tail {int(s['tail_count'])}/{int(s['count'])}")


if __name__ == "__main__":
    run(EID, measure, globals().get("snakemake"))
