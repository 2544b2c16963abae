"""R01 — roofline: this device's measured ceilings and each phase's achieved fraction.

Calibration first: square matmuls (n x n @ n x n, 2 n^3 FLOPs) at a few sizes
in each dtype give the compute ceiling (the best median FLOP/s over the
sizes); copies of a large buffer give the bandwidth ceiling (device to device
on CUDA — host memcpy on a CPU, where the device's memory is the host's —
plus pinned host-to-device and device-to-host on CUDA). Each sample repeats
the operation back to back until it lasts about ``target_ms``, synchronized
at both ends, so launch latency does not pose as a ceiling.

Then the controlled workload: the work of each phase of a steady-state
training step (FLOPs from the flop counter, bytes from tensor sizes; see
perflab/instruments/roofline.py), each phase's median time with the device synchronized
at every boundary (as in E05), and the achieved FLOP/s and bytes/s as a
fraction of the ceilings. A workload without an optimizer gets ceilings only.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import torch

from perflab.experiments import r01_roofline as r01
from perflab.instruments import phases, roofline, timing
from perflab.pipeline.runner import run

STATS = ("median", "iqr", "min", "max")


def _dtypes(ctx) -> list[str]:
    """The configured dtypes, and always the contract's (its ceiling is the one used)."""
    return list(dict.fromkeys([*ctx.params["dtypes"], ctx.contract["dtype"]]))


def _precision_note(ctx, dtype: str) -> str:
    if dtype != "float32":
        return ""
    note = f"; float32 matmul precision {torch.get_float32_matmul_precision()!r}"
    if ctx.is_cuda:
        note += f", TF32 {'on' if torch.backends.cuda.matmul.allow_tf32 else 'off'}"
    return note


def matmul_ceilings(ctx) -> dict[str, float]:
    p = ctx.params
    peaks: dict[str, float] = {}
    for name in _dtypes(ctx):
        dtype = getattr(torch, name)
        best = None
        for n in p["matmul_sizes"]:
            flops = _matmul_rate(ctx, name, dtype, n)
            if flops is not None:
                best = flops if best is None else max(best, flops)
        if best is None:
            ctx.unsupported(variant=r01.matmul_ceiling(name), metric=r01.PEAK_FLOPS,
                            unit="FLOP/s", reason=f"no {name} matmul size measured", dtype=name)
            continue
        peaks[name] = best
        ctx.row(variant=r01.matmul_ceiling(name), metric=r01.PEAK_FLOPS, value=best,
                unit="FLOP/s", window=f"best median over sizes {p['matmul_sizes']}"
                + _precision_note(ctx, name), sync_boundary="see the matmul/ rows", dtype=name,
                n=len(p["matmul_sizes"]))
    return peaks


def _matmul_rate(ctx, name: str, dtype: torch.dtype, n: int) -> float | None:
    """The achieved FLOP/s of an n x n matmul in ``dtype`` (its rows), or None (why, a row)."""
    p = ctx.params
    variant = r01.matmul_variant(name, n)
    window = (f"torch.mm of two {n}x{n} {name} matrices into a preallocated output; "
              f"each sample repeats it until it lasts ~{p['target_ms']} ms"
              + _precision_note(ctx, name))
    sync = f"{ctx.sync_name} at both ends of each sample of back-to-back calls"
    try:
        samples, inner = roofline.per_call_ms(
            roofline.matmul_op(n, dtype, ctx.device), target_ms=p["target_ms"],
            repeats=p["repeats"], sync=ctx.sync)
    except torch.cuda.OutOfMemoryError as exc:
        ctx.unsupported(variant=variant, metric=r01.CALL_TIME, unit="ms", status="oom",
                        reason=f"out of memory: {str(exc).splitlines()[0]}", dtype=name)
        return None
    except (RuntimeError, NotImplementedError) as exc:
        ctx.unsupported(variant=variant, metric=r01.CALL_TIME, unit="ms",
                        reason=f"{name} matmul not available on {ctx.device}: "
                               f"{str(exc).splitlines()[0]}", dtype=name)
        return None
    s = ctx.summary(samples, variant=variant, metric=r01.CALL_TIME, window=window,
                    sync_boundary=sync, statistics=STATS, dtype=name, input_shape=f"[{n}, {n}]")
    flops = 2 * n**3 / (s["median"] / 1e3)
    ctx.row(variant=variant, metric=r01.ACHIEVED_FLOPS, value=flops, unit="FLOP/s",
            statistic="median", n=len(samples), window=window + f" ({inner} per sample)",
            sync_boundary=sync, dtype=name, input_shape=f"[{n}, {n}]")
    ctx.log(f"matmul {name} n={n}: {s['median']:.4f} ms, {flops / 1e12:.3f} TFLOP/s")
    return flops


def copy_ceilings(ctx) -> tuple[float | None, float] | None:
    """(pinned host-to-device bandwidth or None, memory bandwidth), or None."""
    p = ctx.params
    rates: dict[str, float] = {}
    for kind in r01.COPY_KINDS:
        variant = r01.copy_variant(kind)
        if kind != "host_memcpy" and not ctx.is_cuda:
            ctx.unsupported(variant=variant, metric=r01.BANDWIDTH, unit="B/s",
                            reason="a CPU device's memory is the host's: see copy/host_memcpy")
            continue
        # host memory is the slowest of these: its own buffer, still far above any cache
        mib = p["host_copy_mib"] if kind == "host_memcpy" else p["copy_mib"]
        nbytes = int(mib * 2**20)
        moved = "read + write" if kind in ("host_memcpy", "device_to_device") else "bytes copied"
        window = (f"Tensor.copy_ of a {mib} MiB float32 buffer"
                  + (" (pinned host memory, non_blocking)" if "host_to" in kind
                     or "to_host" in kind else "")
                  + f"; bandwidth counts {moved}")
        sync = f"{ctx.sync_name} at both ends of each sample of back-to-back copies"
        try:
            fn, per_call = roofline.copy_op(kind, nbytes, ctx.device)
            samples, _ = roofline.per_call_ms(fn, target_ms=p["target_ms"], repeats=p["repeats"],
                                              sync=ctx.sync)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:
            ctx.unsupported(variant=variant, metric=r01.BANDWIDTH, unit="B/s",
                            reason=f"{kind} copy failed: {str(exc).splitlines()[0]}")
            continue
        s = ctx.summary(samples, variant=variant, metric=r01.CALL_TIME, window=window,
                        sync_boundary=sync, statistics=STATS, dtype="float32")
        rates[kind] = per_call / (s["median"] / 1e3)
        ctx.row(variant=variant, metric=r01.BANDWIDTH, value=rates[kind], unit="B/s",
                statistic="median", n=len(samples), window=window, sync_boundary=sync,
                dtype="float32")
        ctx.log(f"copy {kind}: {rates[kind] / 1e9:.1f} GB/s")
    memory = "device_to_device" if ctx.is_cuda else "host_memcpy"
    if memory not in rates:
        ctx.unsupported(variant=r01.MEMORY_BANDWIDTH, metric=r01.BANDWIDTH, unit="B/s",
                        reason=f"copy/{memory} was not measured")
        return None
    ctx.row(variant=r01.MEMORY_BANDWIDTH, metric=r01.BANDWIDTH, value=rates[memory],
            unit="B/s", window=f"copy/{memory}: the device memory's bandwidth ceiling",
            sync_boundary="see the copy/ rows", dtype="float32")
    return rates.get("host_to_device"), rates[memory]


COUNTED = ("FLOPs: torch.utils.flop_counter (elementwise ops count 0); bytes: sizes of "
           "every tensor each ATen op reads and writes (views skipped)")


def _phase_medians(ctx, step, window: str, boundary: str) -> dict[str, float]:
    """Each work phase's median ms with the device synchronized at every boundary (as E05)."""
    timing.warm(step.and_read(), ctx.timing["warmup"], ctx.sync)
    times, _ = phases.samples(phases.timed(step, ctx.sync), ctx.params["repeats"])
    medians = {}
    for ph in r01.WORK_PHASES:
        medians[ph] = ctx.summary(times[ph], variant=r01.phase_variant(ph), metric=r01.PHASE_TIME,
                                  window=window, sync_boundary=boundary,
                                  statistics=("median", "iqr"))["median"]
    return medians


def _group_rows(ctx, name, members, work, medians, ceilings, window: str, boundary: str):
    """One phase or group: its counted work, its time (a group's: summed) and the achieved
    fractions of ``ceilings`` (peak FLOP/s, link bandwidth, memory bandwidth)."""
    peak, link, bandwidth = ceilings
    variant = r01.phase_variant(name)
    if name == "host_to_device" and not ctx.is_cuda:
        ctx.unsupported(variant=variant, metric=r01.BANDWIDTH_FRACTION, unit="%",
                        reason="on a CPU device the batch is already in place: no copy")
        return
    total = roofline.Work(sum(work[m].flops for m in members),
                          sum(work[m].bytes for m in members),
                          sum(work[m].ops for m in members))
    ms = sum(medians[m] for m in members)
    for metric, value, unit in ((r01.FLOPS, total.flops, "FLOP"), (r01.BYTES, total.bytes, "B"),
                                (r01.ATEN_OPS, total.ops, "count")):
        ctx.row(variant=variant, metric=metric, value=float(value), unit=unit,
                window="one steady-state step; " + COUNTED, sync_boundary="counted, not timed")
    if len(members) > 1:
        ctx.row(variant=variant, metric=r01.PHASE_TIME, value=ms, unit="ms", statistic="median",
                n=ctx.params["repeats"], window=window,
                sync_boundary=boundary + "; sum of the members' medians")
    ceiling_bw = link if name == "host_to_device" else bandwidth
    if peak is None or ceiling_bw is None:
        ctx.unsupported(variant=variant, metric=r01.ROOFLINE_FRACTION, unit="%",
                        reason="a ceiling was not measured")
        return
    fr = roofline.fractions(total, ms, peak, ceiling_bw)
    units = {r01.ACHIEVED_FLOPS: "FLOP/s", r01.ACHIEVED_BANDWIDTH: "B/s",
             r01.ARITHMETIC_INTENSITY: "FLOP/B"}
    against = "pinned host-to-device copy" if name == "host_to_device" else "memory bandwidth"
    for metric, value in fr.items():
        ctx.row(variant=variant, metric=metric, value=value, unit=units.get(metric, "%"),
                statistic="median", n=ctx.params["repeats"],
                window=window + f"; against the {ctx.contract['dtype']} matmul ceiling "
                f"and the {against} ceiling", sync_boundary=boundary)
    ctx.log(f"{name}: {total.flops:.3g} FLOP, {total.bytes:.3g} B in {ms:.3f} ms: "
            f"{fr[r01.FLOPS_FRACTION]:.1f}% of peak FLOP/s, "
            f"{fr[r01.BANDWIDTH_FRACTION]:.1f}% of bandwidth")


def phase_fractions(ctx, peak: float | None, link: float | None, bandwidth: float | None):
    step = ctx.step(resident=False, metric=r01.FLOPS, unit="FLOP",
                    variants=tuple(r01.phase_variant(ph) for ph in r01.WORK_PHASES))
    if step is None:
        return
    work = roofline.step_work(step)  # the phases from the hooks (perflab/instruments/phases.py)

    window = (f"steady-state step (optimizer state allocated); phase times: median of "
              f"{ctx.params['repeats']} after warmup {ctx.timing['warmup']}")
    boundary = f"sync ({ctx.sync_name}) at every phase boundary, as in E05"
    medians = _phase_medians(ctx, step, window, boundary)
    for name, members in r01.PHASE_GROUPS.items():
        _group_rows(ctx, name, members, work, medians, (peak, link, bandwidth), window, boundary)


def measure(ctx):
    peaks = matmul_ceilings(ctx)
    bw = copy_ceilings(ctx)
    link, bandwidth = bw if bw else (None, None)
    peak = peaks.get(ctx.contract["dtype"])
    if peak is not None and bandwidth:
        ctx.row(variant=r01.RIDGE_POINT, metric=r01.ARITHMETIC_INTENSITY,
                value=peak / bandwidth, unit="FLOP/B", dtype=ctx.contract["dtype"],
                window=f"{ctx.contract['dtype']} matmul ceiling / memory bandwidth ceiling: "
                "below it a phase is bandwidth-bound", sync_boundary="derived from ceilings")
    phase_fractions(ctx, peak, link, bandwidth)


if __name__ == "__main__":
    run("R01", measure, globals().get("snakemake"))
