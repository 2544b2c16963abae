"""E06 — two instruments: synchronized wall clock vs device time.

The wall clock around a synchronized call answers "how long does my step
take"; device time answers "how long does the device spend". Device time comes
from CUDA events with the device kept ahead of the host: a device-side sleep
is queued before the start event, so the whole step is queued while the device
sleeps and then runs back to back (perflab.instruments.timing.time_wall_and_device).
Events recorded into an idle stream, the chapter's way, start counting at
submission and include every launch gap; they are kept, named as such, to show
what they include. Their difference from the wall clock, host-exposed time
(wall - device), and the host's own time per step in a free-running loop say
how much of the step is the host. CUDA events need a CUDA device: on CPU those
rows are written as unsupported, with the reason.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import time  # noqa: E402

from perflab.core.names import SYNCED_CALL as SYNCED
from perflab.experiments.e06_events_vs_wall import (
    CALLS_REDONE,
    DEVICE,
    DEVICE_LEAD,
    EID,
    HOST_EXPOSED,
    HOST_EXPOSED_SHARE,
    IDLE_EVENTS,
    SUBMISSION,
    WALL,
)
from perflab.instruments import timing
from perflab.kit import sampling
from perflab.pipeline.runner import run

STATS = ("median", "iqr", "p25", "p75", "mean", "min", "max")
AHEAD = ("CUDA events around the call with the device kept ahead of the host: a device-side "
         "sleep (torch.cuda._sleep) queued before the start event, so the whole call is queued "
         "before the device starts it; calls whose start event had fired before submission "
         "ended were redone with a longer sleep")
IDLE = ("CUDA events recorded into an idle stream (queue drained before): the start event fires "
        "at submission, so launch gaps count")


#: under a budget E06 only corroborates, so its repeats shrink to fit its small share, but
#: never below this many (a median and IQR of fewer say little)
MIN_REPEATS = 20
#: step times per repeat: on CUDA a wall call, a device-ahead call (after a device sleep of
#: twice the host's submission, so about three step times) and a free-running host call; the
#: count of three calls let E06 run 1.5-2.5 s on an H100 where its share was 1.5-1.8 s
CALLS_PER_REPEAT = {True: 5, False: 1}


def _timing(ctx, step, started: float) -> tuple[dict, str]:
    """(timing, what the window says of it): the contract's, or under a budget share
    (sampling.rule adaptive) as many repeats as the rest of the share pays for at the step
    time of the warmup calls, between MIN_REPEATS and the fixed count."""
    t = dict(ctx.timing)
    share = (sampling.job_budget_s(ctx.contract, EID)
             if sampling.rule(ctx.contract) == sampling.ADAPTIVE else None)
    if share is None:
        return t, ""
    warm = timing.time_calls(step, warmup=t["warmup"], repeats=3, sync=ctx.sync)
    left_ms = 1e3 * (share - (time.perf_counter() - started))
    per = CALLS_PER_REPEAT[ctx.is_cuda] * sorted(warm)[1]
    fits = int(left_ms / per) if per > 0 else t["repeats"]
    t["repeats"], t["warmup"] = max(MIN_REPEATS, min(t["repeats"], fits)), 0  # warm already
    ctx.log(f"budget share {share:.1f} s (corroboration only): {t['repeats']} repeats")
    return t, (f"; {t['repeats']} repeats, what its share of the run's budget "
               f"({share:.1f} s: corroboration only) pays for")


def _cuda_rows(ctx, step, window, t):
    res = timing.time_wall_and_device(step, warmup=t["warmup"], repeats=t["repeats"],
                                      device=ctx.device)
    pairs = f"; pairs of neighbouring calls, {t['repeats']} pairs, alternating which runs first"
    wall = ctx.summary(res.wall_ms, variant=WALL[0], metric=WALL[1], window=window + pairs,
                       sync_boundary=SYNCED, statistics=STATS)
    dev = ctx.summary(res.device_ms, variant=DEVICE[0], metric=DEVICE[1], window=window + pairs,
                      sync_boundary=AHEAD, statistics=STATS)
    ctx.summary(res.idle_events_ms, variant=IDLE_EVENTS[0], metric=IDLE_EVENTS[1],
                window=window + "; around the wall-clock calls", sync_boundary=IDLE,
                statistics=STATS)
    gap = ctx.summary([w - d for w, d in zip(res.wall_ms, res.device_ms)],
                      variant=HOST_EXPOSED[0], metric=HOST_EXPOSED[1], window=window + pairs,
                      sync_boundary="wall clock minus device time, pair by pair",
                      statistics=STATS)
    ctx.row(variant=HOST_EXPOSED_SHARE[0], metric=HOST_EXPOSED_SHARE[1],
            value=100 * gap["median"] / wall["median"], unit="%", n=t["repeats"],
            window=window + pairs, sync_boundary="median host-exposed / median wall clock")
    ctx.row(variant=DEVICE_LEAD[0], metric=DEVICE_LEAD[1], value=res.lead_ms, unit="ms",
            window="twice the longest host submission of ten warm calls",
            sync_boundary="device-side sleep before each start event")
    ctx.row(variant=CALLS_REDONE[0], metric=CALLS_REDONE[1], value=res.behind, unit="count",
            n=t["repeats"], window=window, sync_boundary="calls whose start event fired "
            "before the host finished submitting them (redone with a longer sleep)")
    ctx.log(f"wall {wall['median']:.3f} ms, device {dev['median']:.3f} ms, host-exposed "
            f"{gap['median']:+.3f} ms (IQR {gap['iqr']:.3f}); lead {res.lead_ms:.2f} ms, "
            f"{res.behind} calls redone")


def _wall_only(ctx, step, window, why, t):
    wall = ctx.summary(timing.time_calls(step, warmup=t["warmup"], repeats=t["repeats"],
                                         sync=ctx.sync),
                       variant=WALL[0], metric=WALL[1], window=window, sync_boundary=SYNCED,
                       statistics=STATS)
    ctx.log(f"wall clock median {wall['median']:.3f} ms; {why}")
    for variant, metric in (DEVICE, IDLE_EVENTS, HOST_EXPOSED, HOST_EXPOSED_SHARE):
        ctx.unsupported(variant=variant, metric=metric,
                        unit="%" if metric == HOST_EXPOSED_SHARE[1] else "ms", reason=why)


def measure(ctx):
    started = time.perf_counter()
    step = ctx.training_step()
    if step is None:
        return
    t, capped = _timing(ctx, step, started)
    window = f"steady state after warmup {ctx.timing['warmup']}" + capped
    if not ctx.is_cuda:
        _wall_only(ctx, step, window, "CUDA events need a CUDA device; CPU execution is "
                                      "synchronous", t)
        ctx.unsupported(variant=SUBMISSION[0], metric=SUBMISSION[1], unit="ms",
                        reason="CUDA events need a CUDA device; CPU execution is synchronous")
        return
    try:
        _cuda_rows(ctx, step, window, t)
    except timing.Unsupported as exc:  # the step waits for the device inside the call
        _wall_only(ctx, step, window, str(exc), t)
    host = ctx.summary(timing.host_submission_samples(step, warmup=t["warmup"],
                                                      repeats=t["repeats"], sync=ctx.sync),
                       variant=SUBMISSION[0], metric=SUBMISSION[1], window=window,
                       sync_boundary="host clock per call in a free-running loop (no sync)",
                       statistics=STATS)
    ctx.log(f"host submission {host['median']:.3f} ms")


if __name__ == "__main__":
    run(EID, measure, globals().get("snakemake"))
