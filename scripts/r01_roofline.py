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

import contextlib

import torch

from perflab.experiments import r01_roofline as r01
from perflab.experiments.w01_whatif import whatif
from perflab.instruments import convolution, phases, precision, roofline, timing
from perflab.pipeline.runner import run

STATS = ("median", "iqr", "min", "max")


def _precisions(ctx, ran=()) -> list[str]:
    """The configured dtypes, the contract's, and every precision the step runs (``ran``):
    a phase is judged against the ceilings of what it ran. TF32 only on CUDA."""
    want = [*ctx.params["dtypes"], ctx.contract["dtype"], *ran]
    if ctx.is_cuda and "float32" in want:
        want.append("tf32")
    return [p for p in dict.fromkeys(want) if p in precision.PRECISIONS]


#: the flag that turns TF32 on or off for each kind of op, and its values (on, off)
_TF32_FLAG = {"matmul": ("matmul precision", "'high'", "'highest'"),
              "convolution": ("torch.backends.cudnn.allow_tf32", "True", "False")}


def _precision_note(ctx, name: str, kind: str = "matmul") -> str:
    flag, on, off = _TF32_FLAG[kind]
    if name == "tf32":
        return f"; float32 operands, TF32 on ({flag} {on})"
    if name == "float32":
        return f"; float32 strict: TF32 off ({flag} {off})"
    return ""


def _mode(name: str):
    """The flags a precision's ceiling is measured under: float32 strict, or TF32 on."""
    if name == "float32":
        return whatif.strict_fp32()
    if name == "tf32":
        return precision.tf32_on()
    return contextlib.nullcontext()


def matmul_ceilings(ctx, ran=()) -> dict[str, float]:
    p = ctx.params
    peaks: dict[str, float] = {}
    for name in _precisions(ctx, ran):
        dtype = torch.float32 if name == "tf32" else getattr(torch, name)
        best = None
        with _mode(name):
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
    window = (f"torch.mm of two {n}x{n} {dtype} matrices into a preallocated output; "
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


def conv_ceilings(ctx, convs: dict, ran=()) -> dict[str, float]:
    """Where the step convolves: its heaviest convolution, forward and backward, at each of
    ``conv_batch_scales`` x its batch, in each precision its convolutions ran (``ran``: the
    counted keys, "conv_tf32" where cuDNN's TF32 applied); the best rate of each precision
    is its convolution ceiling, keyed as the step's FLOPs are (``conv_<precision>``)."""
    call = convolution.heaviest(convs)
    wanted = [precision.split_key(k)[1] for k in ran
              if precision.split_key(k)[0] == "convolution"]
    peaks: dict[str, float] = {}
    if call is None:
        return peaks
    scales = ctx.params.get("conv_batch_scales", [1, 4])
    for name in wanted:
        dtype = torch.float32 if name == "tf32" else getattr(torch, name)
        rates = []
        with _mode(name):
            for direction in convolution.DIRECTIONS:
                for k in scales:
                    rate = _conv_rate(ctx, name, dtype, call, direction, k)
                    rates += [rate] if rate is not None else []
        if not rates:
            ctx.unsupported(variant=r01.conv_ceiling(name), metric=r01.PEAK_FLOPS,
                            unit="FLOP/s", reason=f"no {name} convolution measured", dtype=name)
            continue
        peaks[precision.conv_key(name)] = max(rates)
        ctx.row(variant=r01.conv_ceiling(name), metric=r01.PEAK_FLOPS, value=max(rates),
                unit="FLOP/s", window=f"best median of the step's heaviest convolution "
                f"({call.shape()}), forward and backward, at {scales} x its batch"
                + _precision_note(ctx, name, "convolution"),
                sync_boundary="see the conv/ rows", dtype=name, input_shape=call.shape(),
                n=len(rates))
    return peaks


def _conv_rate(ctx, name: str, dtype: torch.dtype, call, direction: str, k: int
               ) -> float | None:
    """The achieved FLOP/s of the convolution at ``k`` x its batch (its rows), or None (why,
    a row). Its FLOPs are counted by the step's own counter, one call."""
    p, big = ctx.params, call.batched(k)
    variant = r01.conv_variant(name, direction, k)
    op = ("aten.convolution_backward (input and weight gradients)" if direction == "backward"
          else "aten.convolution")
    window = (f"{op} {big.shape()} in {dtype}; each sample repeats it until it lasts "
              f"~{p['target_ms']} ms" + _precision_note(ctx, name, "convolution"))
    sync = f"{ctx.sync_name} at both ends of each sample of back-to-back calls"
    try:
        fn = convolution.conv_op(big, direction, dtype, ctx.device)
        work, _ = roofline.count(fn)
        samples, inner = roofline.per_call_ms(fn, target_ms=p["target_ms"],
                                              repeats=p["repeats"], sync=ctx.sync)
    except (RuntimeError, NotImplementedError, torch.cuda.OutOfMemoryError) as exc:
        oom = isinstance(exc, torch.cuda.OutOfMemoryError)
        ctx.unsupported(variant=variant, metric=r01.CALL_TIME, unit="ms",
                        status="oom" if oom else "unsupported", dtype=name,
                        reason=f"{name} convolution failed on {ctx.device}: "
                               f"{str(exc).splitlines()[0]}", input_shape=big.shape())
        return None
    s = ctx.summary(samples, variant=variant, metric=r01.CALL_TIME, window=window,
                    sync_boundary=sync, statistics=STATS, dtype=name, input_shape=big.shape())
    flops = work.flops / (s["median"] / 1e3)
    ctx.row(variant=variant, metric=r01.ACHIEVED_FLOPS, value=flops, unit="FLOP/s",
            statistic="median", n=len(samples), window=window + f" ({inner} per sample; "
            f"{work.flops} FLOP a call, torch.utils.flop_counter)", sync_boundary=sync,
            dtype=name, input_shape=big.shape())
    ctx.log(f"conv {name} {direction} x{k}: {s['median']:.4f} ms, {flops / 1e12:.3f} TFLOP/s")
    return flops


def copy_ceilings(ctx) -> tuple[float | None, float, float | None] | None:
    """(pinned host-to-device bandwidth or None, memory bandwidth, cache-resident copy
    bandwidth or None), or None."""
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
    return rates.get("host_to_device"), rates[memory], _cache_ceiling(ctx, memory)


def _cache_ceiling(ctx, kind: str) -> float | None:
    """The same copy on a buffer small enough to stay in the last-level cache: the roof a
    phase whose tensors are cache-resident is held to (above the memory roof)."""
    mib = float(ctx.params.get("cache_copy_mib", 8 if ctx.is_cuda else 0.5))
    window = (f"Tensor.copy_ of a {mib} MiB float32 buffer, back to back (read + write; "
              "small enough to stay in the last-level cache)")
    sync = f"{ctx.sync_name} at both ends of each sample of back-to-back copies"
    try:
        fn, per_call = roofline.copy_op(kind, int(mib * 2**20), ctx.device)
        samples, _ = roofline.per_call_ms(fn, target_ms=ctx.params["target_ms"],
                                          repeats=ctx.params["repeats"], sync=ctx.sync)
    except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:
        ctx.unsupported(variant=r01.CACHE_BANDWIDTH, metric=r01.BANDWIDTH, unit="B/s",
                        reason=f"cache-resident copy failed: {str(exc).splitlines()[0]}")
        return None
    med = sorted(samples)[len(samples) // 2]
    rate = per_call / (med / 1e3)
    ctx.row(variant=r01.CACHE_BANDWIDTH, metric=r01.BANDWIDTH, value=rate, unit="B/s",
            statistic="median", n=len(samples), window=window, sync_boundary=sync,
            dtype="float32")
    ctx.log(f"cache-resident copy ({mib} MiB): {rate / 1e9:.1f} GB/s")
    return rate


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
    """One phase or group: its counted work (FLOPs by the precision they ran in), its time
    (a group's: summed) and the achieved fractions of its ceilings: the FLOP-weighted blend
    of the matmul and convolution ceilings of what it ran (perflab.instruments.precision.blend),
    the link or memory bandwidth; its ridge point is the blend over the memory bandwidth."""
    peaks, link, bandwidth, cache = ceilings
    variant = r01.phase_variant(name)
    if name == "host_to_device" and not ctx.is_cuda:
        ctx.unsupported(variant=variant, metric=r01.BANDWIDTH_FRACTION, unit="%",
                        reason="on a CPU device the batch is already in place: no copy")
        return
    total = sum((work[m] for m in members), roofline.Work(0, 0, 0))
    ms = sum(medians[m] for m in members)
    for metric, value, unit in ((r01.FLOPS, total.flops, "FLOP"), (r01.BYTES, total.bytes, "B"),
                                (r01.ATEN_OPS, total.ops, "count")):
        ctx.row(variant=variant, metric=metric, value=float(value), unit=unit,
                window="one steady-state step; " + COUNTED, sync_boundary="counted, not timed")
    for key, flops in sorted(total.by_precision.items()):
        kind, prec = precision.split_key(key)
        ctx.row(variant=variant, metric=r01.precision_flops(key), value=float(flops),
                unit="FLOP", dtype=prec, window=f"one steady-state step; the {kind} FLOPs "
                "whose operands had this precision at the ATen level (autocast's cast "
                "applied; float32 read as tf32 where TF32 applies: cudnn.allow_tf32 for "
                "convolutions)", sync_boundary="counted, not timed")
    if len(members) > 1:
        ctx.row(variant=variant, metric=r01.PHASE_TIME, value=ms, unit="ms", statistic="median",
                n=ctx.params["repeats"], window=window,
                sync_boundary=boundary + "; sum of the members' medians")
    # a torch whose flop counter has no per-op hook counts no precisions: the contract's
    mix = total.by_precision or {ctx.contract["dtype"]: total.flops}
    peak, why = precision.blend(mix, peaks)
    if peak is None and not total.flops:  # no FLOPs: the contract's ceiling, for the bytes
        peak, why = peaks.get(ctx.contract["dtype"]), ""
    ceiling_bw = link if name == "host_to_device" else bandwidth
    if peak is None or ceiling_bw is None:
        ctx.unsupported(variant=variant, metric=r01.ROOFLINE_FRACTION, unit="%",
                        reason=why or "a ceiling was not measured")
        return
    against_flops = (f"the FLOP-weighted blend of the matmul (and convolution: conv_) "
                     f"ceilings of what it ran "
                     f"({precision.describe(mix)})")
    ctx.row(variant=variant, metric=r01.BLENDED_PEAK, value=peak, unit="FLOP/s",
            window=against_flops, sync_boundary="derived from the ceilings and the counts")
    if name != "host_to_device":
        ctx.row(variant=variant, metric=r01.RIDGE, value=peak / bandwidth, unit="FLOP/B",
                window=f"{against_flops} / memory bandwidth: below it the phase is "
                "bandwidth-bound", sync_boundary="derived from ceilings")
    fr = roofline.fractions(total, ms, peak, ceiling_bw)
    units = {r01.ACHIEVED_FLOPS: "FLOP/s", r01.ACHIEVED_BANDWIDTH: "B/s",
             r01.ARITHMETIC_INTENSITY: "FLOP/B"}
    against = "pinned host-to-device copy" if name == "host_to_device" else "memory bandwidth"
    for metric, value in fr.items():
        ctx.row(variant=variant, metric=metric, value=value, unit=units.get(metric, "%"),
                statistic="median", n=ctx.params["repeats"],
                window=window + f"; against {against_flops} and the {against} ceiling",
                sync_boundary=boundary)
    if cache and name != "host_to_device":
        ctx.row(variant=variant, metric=r01.CACHE_FRACTION,
                value=100 * fr[r01.ACHIEVED_BANDWIDTH] / cache, unit="%", statistic="median",
                n=ctx.params["repeats"], window=window + "; against the cache-resident copy's "
                "bandwidth (ceiling/cache_bandwidth)", sync_boundary=boundary)
    over = [m for m in (r01.FLOPS_FRACTION, r01.BANDWIDTH_FRACTION)
            if fr[m] > r01.CEILING_MAX_PCT]
    ctx.log(f"{name}: {total.flops:.3g} FLOP ({precision.describe(mix)}), {total.bytes:.3g} B "
            f"in {ms:.3f} ms: {fr[r01.FLOPS_FRACTION]:.1f}% of its FLOP/s ceiling, "
            f"{fr[r01.BANDWIDTH_FRACTION]:.1f}% of bandwidth"
            + (f" — INSTRUMENT ERROR: {', '.join(over)} above 100% (a ceiling of the wrong "
               "precision, or bytes that stay in cache)" if over else ""))


def _tf32_rows(ctx) -> None:
    """The TF32 mode of each kind as this process runs the step (the contract's record)."""
    for kind, on in precision.tf32_modes(ctx.device.type).items():
        ctx.row(variant=r01.TF32_MODE, metric=f"tf32_{kind}", value=float(on), unit="bool",
                window=("torch.backends.cudnn.allow_tf32" if kind == "convolution" else
                        "torch.backends.cuda.matmul.allow_tf32 / float32 matmul precision")
                + " as the step runs (a CPU: never)", sync_boundary="read from torch's flags")


def measure(ctx):
    _tf32_rows(ctx)
    step = ctx.step(resident=False, metric=r01.FLOPS, unit="FLOP",
                    variants=tuple(r01.phase_variant(ph) for ph in r01.WORK_PHASES))
    # the work first (one counted step): the ceilings measured are those of what it runs
    work, convs = roofline.counted_step(step) if step is not None else ({}, {})
    ran = {p for w in work.values() for p, f in w.by_precision.items() if f}
    peaks = matmul_ceilings(ctx, sorted(ran))
    peaks.update(conv_ceilings(ctx, convs, sorted(ran)))
    bw = copy_ceilings(ctx)
    link, bandwidth, cache = bw if bw else (None, None, None)
    peak = peaks.get(ctx.contract["dtype"])
    if peak is not None and bandwidth:
        ctx.row(variant=r01.RIDGE_POINT, metric=r01.ARITHMETIC_INTENSITY,
                value=peak / bandwidth, unit="FLOP/B", dtype=ctx.contract["dtype"],
                window=f"{ctx.contract['dtype']} matmul ceiling / memory bandwidth ceiling "
                "(each phase's own, from the precisions it runs: its ridge_point row)",
                sync_boundary="derived from ceilings")
    if step is None:
        return
    window = (f"steady-state step (optimizer state allocated); phase times: median of "
              f"{ctx.params['repeats']} after warmup {ctx.timing['warmup']}")
    boundary = f"sync ({ctx.sync_name}) at every phase boundary, as in E05"
    medians = _phase_medians(ctx, step, window, boundary)
    for name, members in r01.PHASE_GROUPS.items():
        _group_rows(ctx, name, members, work, medians, (peaks, link, bandwidth, cache),
                    window, boundary)


if __name__ == "__main__":
    run("R01", measure, globals().get("snakemake"))
