"""E06 — two instruments: synchronized wall clock vs CUDA events.

The wall clock around a synchronized call answers "how long does my step
take"; CUDA events recorded into the stream answer "how long does the device
spend". Their gap, and the host's own time per step in a free-running loop,
say how much of the step is the host. CUDA events need a CUDA device: on CPU
those rows are written as unsupported, with the reason.
"""

from perflab import timing
from perflab.runner import run


def measure(ctx):
    t = ctx.timing
    step = ctx.training_step()
    if step is None:
        return
    window = f"steady state after warmup {t['warmup']}"
    stats = ("median", "iqr", "p25", "p75", "mean", "min", "max")

    wall = ctx.summary(timing.time_calls(step, warmup=t["warmup"], repeats=t["repeats"],
                                         sync=ctx.sync),
                       variant="wall_clock", metric="step_latency", window=window,
                       sync_boundary="synchronized at both ends of each call", statistics=stats)
    ctx.log(f"wall clock median {wall['median']:.3f} ms")

    if not ctx.is_cuda:
        why = "CUDA events need a CUDA device; CPU execution is synchronous"
        for variant in ("cuda_events", "host_submission"):
            ctx.unsupported(variant=variant, metric="step_latency", unit="ms", reason=why)
        ctx.unsupported(variant="wall_minus_events", metric="step_latency", unit="ms", reason=why)
        return

    ev = ctx.summary(timing.time_cuda_events(step, warmup=t["warmup"], repeats=t["repeats"],
                                             device=ctx.device),
                     variant="cuda_events", metric="step_latency", window=window,
                     sync_boundary="device time between two events recorded around the call",
                     statistics=stats)
    host = ctx.summary(timing.host_submission_samples(step, warmup=t["warmup"],
                                                      repeats=t["repeats"], sync=ctx.sync),
                       variant="host_submission", metric="step_latency", window=window,
                       sync_boundary="host clock per call in a free-running loop (no sync)",
                       statistics=stats)
    ctx.row(variant="wall_minus_events", metric="step_latency", value=wall["median"] - ev["median"],
            unit="ms", statistic="value", n=t["repeats"], window=window,
            sync_boundary="difference of the two medians")
    ctx.log(f"events median {ev['median']:.3f} ms, host submission {host['median']:.3f} ms, "
            f"wall - events {wall['median'] - ev['median']:+.3f} ms")


if __name__ == "__main__":
    run("E06", measure, globals().get("snakemake"))
