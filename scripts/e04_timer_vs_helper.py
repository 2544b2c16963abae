"""E04 — torch.utils.benchmark.Timer vs the project's helper.

The same mutable training step measured by Timer.blocked_autorange (which
chooses a block size and times blocks of calls) and by the helper (warmup,
then per-call synchronized samples). Both are valid; they measure slightly
different boundaries, so the report shows them side by side.
"""

from perflab.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

from perflab import timing
from perflab.experiments.e04_timer_vs_helper import EID, HELPER, NUMBER_PER_RUN, RUNS, TIMER
from perflab.runner import run


def measure(ctx):
    p, t = ctx.params, ctx.timing
    step = ctx.training_step()
    if step is None:
        return
    timing.warm(step, t["warmup"], ctx.sync)

    m = timing.timer_blocked_autorange(step, min_run_time=p["min_run_time_s"])
    window = f"blocked_autorange(min_run_time={p['min_run_time_s']} s) after warmup {t['warmup']}"
    boundary = (f"sync ({ctx.sync_name}) at each block's ends; per-call time = block / "
                f"{m['number_per_run']}")
    kw = dict(variant=TIMER, window=window, sync_boundary=boundary)
    ctx.row(metric="step_latency", statistic="median", value=m["median_ms"], unit="ms",
            n=m["runs"], **kw)
    ctx.row(metric="step_latency", statistic="iqr", value=m["iqr_ms"], unit="ms", n=m["runs"], **kw)
    ctx.row(metric="step_latency", statistic="mean", value=m["mean_ms"], unit="ms", n=m["runs"], **kw)
    ctx.row(metric=NUMBER_PER_RUN, value=m["number_per_run"], unit="calls", **kw)
    ctx.row(metric=RUNS, value=m["runs"], unit="blocks", **kw)
    for i, v in enumerate(m["times_ms"]):
        ctx.samples.append({"experiment": ctx.eid, "variant": kw["variant"], "execution": "eager",
                            "metric": "step_latency", "unit": "ms", "block": i, "index": i,
                            "value": v})
    ctx.log(f"Timer: median {m['median_ms']:.3f} ms IQR {m['iqr_ms']:.3f} "
            f"n_per_run {m['number_per_run']} runs {m['runs']}")

    samples = timing.time_calls(step, warmup=t["warmup"], repeats=t["repeats"], sync=ctx.sync)
    s = ctx.summary(samples, variant=HELPER, metric="step_latency",
                    window=f"warmup {t['warmup']}, repeats {t['repeats']}",
                    sync_boundary="synchronized at both ends of each call")
    ctx.log(f"helper: median {s['median']:.3f} ms IQR {s['iqr']:.3f}")


if __name__ == "__main__":
    run(EID, measure, globals().get("snakemake"))
