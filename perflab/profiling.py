"""Instruments that localize, and what they cost: the profiler and host reads.

Two groups of helpers, shared by E13 (sync tax), E14 (profiler) and E23
(instrument cost):

* the profiler: :func:`profile_steps` runs a scheduled ``torch.profiler``
  session over a step, timing every step synchronized at both ends;
  :func:`range_times` and :func:`top_ops` read per-``record_function``-range
  and per-operator times out of it; :func:`export_trace_gz` writes the chrome
  trace gzipped and atomically. Field names of the profiler's events changed
  across torch versions (``cuda_time_total`` became ``device_time_total``);
  :func:`device_time_us` and :func:`cpu_time_us` read whichever the installed
  torch has.
* throughput pairs: :func:`free_running` turns a step into a run of ``k`` steps
  with no sync inside (so a step without a host read can run ahead of the
  device, as in a training loop), and :func:`paired_cost` turns two sides'
  samples and per-block medians into a difference judged against the
  block-to-block spread.

The profiler answers "where does the time go, in proportion"; a profiled
step is slower than the real one, so its times are never compared with an
unprofiled baseline as if they were a speedup or a cost of the code.
"""

from __future__ import annotations

import gzip
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from perflab import io, stats

#: the ``record_function`` ranges of :func:`perflab.steps.ranged_train_step`, in order
PHASE_RANGES = ("forward", "loss", "backward", "optimizer")

_clock = time.perf_counter


# --------------------------------------------------------------------------- field access


def _first_attr(obj: object, names: Sequence[str]) -> float | None:
    for name in names:
        try:
            v = getattr(obj, name)
        except (AttributeError, AssertionError):
            continue
        if v is not None:
            return float(v)
    return None


def device_time_us(event: object, *, self_only: bool = False) -> float:
    """An event's (or key average's) device time in µs, whatever this torch calls it.

    ``device_time_total`` / ``self_device_time_total`` where present (torch
    >= 2.4), else ``cuda_time_total`` / ``self_cuda_time_total``; 0 when the
    profile recorded no device activity.
    """
    names = (("self_device_time_total", "self_cuda_time_total") if self_only
             else ("device_time_total", "cuda_time_total"))
    return _first_attr(event, names) or 0.0


def cpu_time_us(event: object, *, self_only: bool = False) -> float:
    """An event's (or key average's) host time in µs (``[self_]cpu_time_total``)."""
    return _first_attr(event, ("self_cpu_time_total",) if self_only else ("cpu_time_total",)) or 0.0


def _on_host(event: object) -> bool:
    """True for a host-side event (an operator or a range), False for a kernel or GPU span."""
    dt = getattr(event, "device_type", None)
    return dt is None or str(dt).rsplit(".", 1)[-1] == "CPU"


def _is_annotation(event: object) -> bool:
    """A ``record_function`` range or a profiler marker rather than an operator."""
    name = str(getattr(event, "key", None) or getattr(event, "name", ""))
    return bool(getattr(event, "is_user_annotation", False)) or name.startswith("ProfilerStep")


# --------------------------------------------------------------------------- running a profile


def activities(device: torch.device | str) -> list:
    """CPU, plus CUDA when ``device`` is a CUDA device."""
    from torch.profiler import ProfilerActivity

    acts = [ProfilerActivity.CPU]
    if torch.device(device).type == "cuda":
        acts.append(ProfilerActivity.CUDA)
    return acts


@dataclass
class ProfiledRun:
    """A scheduled profiling session and the synchronized time of each of its steps."""

    prof: object  # torch.profiler.profile, stopped; its events are the active steps'
    wait: int
    warmup: int
    active: int
    step_ms: list[float] = field(default_factory=list)  # every step, in order
    device_activity: bool = False  # CUDA activity was recorded

    @property
    def active_ms(self) -> list[float]:
        """The steps the profiler recorded (after ``wait + warmup`` steps)."""
        return self.step_ms[self.wait + self.warmup:]


def profile_steps(
    step: Callable[[], object],
    *,
    device: torch.device | str,
    sync: Callable[[], None],
    wait: int,
    warmup: int,
    active: int,
    profile_memory: bool = True,
) -> ProfiledRun:
    """Run ``wait + warmup + active`` steps under ``schedule(wait, warmup, active, repeat=1)``.

    Each step is timed on the host clock with the device drained before and
    after it; ``prof.step()`` runs outside the timed region (the last one
    stops the profiler and collects the trace, which is no part of a step).
    """
    from torch.profiler import profile, schedule

    if active < 1:
        raise ValueError("active must be >= 1")
    acts = activities(device)
    run = ProfiledRun(prof=None, wait=wait, warmup=warmup, active=active,
                      device_activity=len(acts) > 1)
    with profile(activities=acts, schedule=schedule(wait=wait, warmup=warmup, active=active,
                                                    repeat=1),
                 profile_memory=profile_memory) as prof:
        for _ in range(wait + warmup + active):
            sync()
            t0 = _clock()
            step()
            sync()
            run.step_ms.append((_clock() - t0) * 1e3)
            prof.step()
    run.prof = prof
    return run


# --------------------------------------------------------------------------- reading it


@dataclass
class RangeTime:
    """One ``record_function`` range, summed over its occurrences (one per active step)."""

    name: str
    count: int
    cpu_ms: float  # host time inside the range
    #: device time of the kernels launched while the range was open, from any thread
    #: (autograd runs CUDA backward ops on its own thread); None without device activity
    device_ms: float | None = None


def range_times(prof: object, names: Iterable[str] = PHASE_RANGES, *,
                device_activity: bool = False) -> dict[str, RangeTime]:
    """Host and device time of each named range over the profiled (active) steps.

    Device time is attributed by launch: a kernel counts towards a range when
    the host operator that launched it started while the range was open on
    the host, on any thread. Summing each operator's own kernels counts every
    kernel once, including those of backward ops that autograd runs outside
    the calling thread. ``device_time_total`` of the range itself is built
    from its same-thread children and misses those (on an H200 with torch 2.11,
    over 5 steps, 0.004 ms for a backward whose kernels ran 5.3 ms), and so
    does the GPU-side span of the range that CUDA profiles also record.
    """
    names = list(names)
    host = [e for e in prof.events() if _on_host(e)]
    out: dict[str, RangeTime] = {}
    launches: list[tuple[float, float]] = []
    if device_activity:
        for e in host:
            kernels = getattr(e, "kernels", None) or []
            us = sum(float(getattr(k, "duration", 0) or 0) for k in kernels)
            if us:
                launches.append((float(e.time_range.start), us))
    for name in names:
        occ = [e for e in host if e.name == name]
        rt = RangeTime(name=name, count=len(occ),
                       cpu_ms=sum(cpu_time_us(e) for e in occ) / 1e3)
        if device_activity:
            spans = [(float(e.time_range.start), float(e.time_range.end)) for e in occ]
            rt.device_ms = sum(us for t, us in launches
                               if any(a <= t <= b for a, b in spans)) / 1e3
        out[name] = rt
    return out


@dataclass
class OpTime:
    """One operator in the profile's key averages."""

    name: str
    calls: int
    self_ms: float
    total_ms: float


def top_ops(prof: object, n: int, *, by_device: bool,
            exclude: Iterable[str] = PHASE_RANGES) -> list[OpTime]:
    """The ``n`` host-side operators with the largest self time, largest first.

    ``by_device``: self device time (the kernels each operator launched
    itself); otherwise self CPU time. ``record_function`` ranges, optimizer
    annotations and ``ProfilerStep#`` markers are not operators and are left
    out, as are device-side entries (kernels, GPU spans), so no time is
    counted twice.
    """
    excluded = set(exclude)
    ops = []
    for a in prof.key_averages():
        if not _on_host(a) or _is_annotation(a) or a.key in excluded:
            continue
        if by_device:
            self_us, total_us = device_time_us(a, self_only=True), device_time_us(a)
        else:
            self_us, total_us = cpu_time_us(a, self_only=True), cpu_time_us(a)
        ops.append(OpTime(name=a.key, calls=int(a.count), self_ms=self_us / 1e3,
                          total_ms=total_us / 1e3))
    ops.sort(key=lambda o: o.self_ms, reverse=True)
    return ops[:n]


def export_trace_gz(prof: object, path: str | Path) -> Path:
    """Write the chrome trace of the last profiled window to ``path`` as gzip, atomically."""
    path = Path(path)
    with tempfile.TemporaryDirectory(prefix="perflab-trace-") as d:
        raw = Path(d) / "trace.json"
        prof.export_chrome_trace(str(raw))

        def write(fh) -> None:
            with open(raw, "rb") as src, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0) as gz:
                shutil.copyfileobj(src, gz, 1 << 20)

        io.atomic_write(path, write, binary=True)
    return path


# --------------------------------------------------------------------------- throughput pairs


def free_running(step: Callable[[], object], k: int) -> Callable[[], None]:
    """``k`` calls of ``step`` with nothing between them: a stretch of a training loop.

    Timed with a sync at both ends (:func:`perflab.timing.time_calls`), a step
    that reads nothing back runs ahead of the device inside the stretch; one
    that reads a device value each call cannot.
    """
    if k < 1:
        raise ValueError("k must be >= 1")

    def run() -> None:
        for _ in range(k):
            step()

    return run


@dataclass
class PairedCost:
    """B - A from per-call samples and per-block medians of both sides."""

    a_median: float  # of all samples
    b_median: float
    diff: float  # b_median - a_median
    rel: float  # diff / a_median (a fraction)
    a_spread: tuple[float, float]  # (min, max) of A's block medians
    b_spread: tuple[float, float]
    noise: float  # the wider of the two block spreads (reported beside the difference)
    resolved: bool  # the judgement's verdict (perflab.stats.judge on the paired blocks)
    block_diffs: list[float] = field(default_factory=list)  # b_i - a_i, block by block
    judgement: stats.Judgement | None = None


def paired_cost(a_samples: Sequence[float], b_samples: Sequence[float],
                a_blocks: Sequence[float], b_blocks: Sequence[float], *,
                block_diffs: Sequence[float] | None = None,
                noise_floor_pct: float | None = None) -> PairedCost:
    """The difference of the sides' medians, judged by :func:`perflab.stats.judge`.

    The judgement runs on the paired block differences (``block_diffs`` when
    given, else ``b_i - a_i``); the block spread is kept beside it as the
    visible noise.
    """
    a_med, b_med = statistics.median(a_samples), statistics.median(b_samples)
    a_sp, b_sp = stats.block_spread(a_blocks), stats.block_spread(b_blocks)
    noise = max(a_sp[1] - a_sp[0], b_sp[1] - b_sp[0])
    diff = b_med - a_med
    diffs = (list(block_diffs) if block_diffs is not None
             else [b - a for a, b in zip(a_blocks, b_blocks)])
    j = stats.judge(a_blocks, b_blocks, paired=True, diffs=diffs,
                    noise_floor_pct=noise_floor_pct)
    return PairedCost(
        a_median=a_med, b_median=b_med, diff=diff, rel=stats.relative_change(b_med, a_med),
        a_spread=a_sp, b_spread=b_sp, noise=noise, resolved=j.resolved,
        block_diffs=diffs, judgement=j,
    )


#: per-call statistics written for each side of a pair
SIDE_STATISTICS = ("median", "iqr", "p25", "p75", "mean", "min", "max")


def record_pair(
    ctx,
    *,
    metric: str,
    sides: Sequence[tuple[str, Sequence[float], Sequence[int], Sequence[float], str]],
    window: str,
    diff_variant: str,
    diff_metric: str,
    block_ids: tuple[Sequence[int], Sequence[int]] | None = None,
    block_diffs: Sequence[float] | None = None,
) -> PairedCost:
    """Rows of an A/B pair on ``ctx`` (a :class:`perflab.runner.Context`), and its cost.

    ``sides`` is ``[(variant, samples, block of each sample, block medians,
    sync boundary)]`` for A then B. Each side gets summary rows of its samples
    under ``metric`` and of its block medians under ``block_median`` (median,
    min, max: the block spread); both go to the samples file with their block
    index. ``diff_variant`` gets ``<diff_metric>`` (B - A, ms),
    ``<diff_metric>_rel`` (%), ``block_spread`` (the noise, ms) and
    ``<diff_metric>_resolved`` (1 when :func:`perflab.stats.judge` resolves it, else 0)
    with the judgement's ``ab_*`` rows,
    and, when given, the block-by-block differences as ``block_pair_diff``.
    """
    (av, a_s, _, a_blk, _), (bv, b_s, _, b_blk, _) = sides
    ids = block_ids or (list(range(len(a_blk))), list(range(len(b_blk))))
    for (variant, samples, block_of, blocks, sync), bid in zip(sides, ids):
        ctx.summary(samples, variant=variant, metric=metric, window=window, sync_boundary=sync,
                    statistics=SIDE_STATISTICS, block=list(block_of))
        ctx.summary(blocks, variant=variant, metric="block_median",
                    window=window + "; one value per block: the median of its samples",
                    sync_boundary=sync, statistics=("median", "min", "max"), block=list(bid))
    pc = paired_cost(a_s, b_s, a_blk, b_blk, block_diffs=block_diffs,
                     noise_floor_pct=getattr(ctx, "noise_floor_pct", None))
    how = f"{bv} minus {av}: difference of the two sides' medians of all samples"
    n_blocks = len(a_blk) + len(b_blk)
    ctx.row(variant=diff_variant, metric=diff_metric, value=pc.diff, unit="ms", window=window,
            sync_boundary=how, n=n_blocks)
    ctx.row(variant=diff_variant, metric=f"{diff_metric}_rel", value=100 * pc.rel, unit="%",
            window=window, sync_boundary=how + f", relative to {av}", n=n_blocks)
    ctx.row(variant=diff_variant, metric="block_spread", value=pc.noise, unit="ms",
            window=window, sync_boundary="the wider of the two sides' block spreads "
            "(max - min of block medians)", n=n_blocks)
    ctx.row(variant=diff_variant, metric=f"{diff_metric}_resolved", value=float(pc.resolved),
            unit="bool", window=window,
            sync_boundary="1 when perflab.stats.judge resolves the paired block differences "
            "(Wilcoxon p < 0.05, bootstrap interval excludes 0, above the A/A floor when "
            "known), else 0 (unresolved)",
            n=n_blocks)
    ctx.judgement(pc.judgement, variant=diff_variant, window=window)
    if pc.block_diffs:
        ctx.summary(pc.block_diffs, variant=diff_variant, metric="block_pair_diff",
                    window=window + "; B - A block by block",
                    sync_boundary="difference of block medians measured next to each other",
                    statistics=("median", "min", "max"), block=list(range(len(pc.block_diffs))))
    return pc
