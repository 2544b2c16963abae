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
    synced = "synchronized at both ends of each call"

    if not ctx.is_cuda:
        wall = ctx.summary(timing.time_calls(step, warmup=t["warmup"], repeats=t["repeats"],
                                             sync=ctx.sync),
                           variant="wall_clock", metric="step_latency", window=window,
                           sync_boundary=synced, statistics=stats)
        ctx.log(f"wall clock median {wall['median']:.3f} ms")
        why = "CUDA events need a CUDA device; CPU execution is synchronous"
        for variant in ("cuda_events", "host_submission", "wall_minus_events"):
            ctx.unsupported(variant=variant, metric="step_latency", unit="ms", reason=why)
        return

    # both instruments on the same calls, so their difference is paired per call
    wall_s, events_s = timing.time_wall_and_events(step, warmup=t["warmup"],
                                                   repeats=t["repeats"], device=ctx.device)
    paired = "; wall clock and two CUDA events around the same calls"
    wall = ctx.summary(wall_s, variant="wall_clock", metric="step_latency", window=window,
                       sync_boundary=synced + paired, statistics=stats)
    ev = ctx.summary(events_s, variant="cuda_events", metric="step_latency", window=window,
                     sync_boundary="device time between two events recorded around the call"
                     + paired, statistics=stats)
    gap = ctx.summary([w - e for w, e in zip(wall_s, events_s)], variant="wall_minus_events",
                      metric="step_latency", window=window,
                      sync_boundary="per-call difference" + paired, statistics=stats)
    host = ctx.summary(timing.host_submission_samples(step, warmup=t["warmup"],
                                                      repeats=t["repeats"], sync=ctx.sync),
                       variant="host_submission", metric="step_latency", window=window,
                       sync_boundary="host clock per call in a free-running loop (no sync)",
                       statistics=stats)
    ctx.log(f"wall {wall['median']:.3f} ms, events {ev['median']:.3f} ms, wall - events "
            f"{gap['median']:+.3f} ms (IQR {gap['iqr']:.3f}), host submission "
            f"{host['median']:.3f} ms")


if __name__ == "__main__":
    run("E06", measure, globals().get("snakemake"))
