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
  device, as in a training loop), and :func:`record_pair` writes two sides'
  samples and per-block medians as an A/B (:func:`perflab.instruments.ab.record`).

The profiler answers "where does the time go, in proportion"; a profiled
step is slower than the real one, so its times are never compared with an
unprofiled baseline as if they were a speedup or a cost of the code.
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from perflab.core import io
from perflab.instruments import ab
from perflab.instruments.steps import STEP_PHASES

#: the ``record_function`` ranges E14 reads (:func:`perflab.instruments.phases.ranged`), in order
PHASE_RANGES = STEP_PHASES

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


def profile_window(step: Callable[[], object], *, device: torch.device | str,
                   sync: Callable[[], None], warmup: int, active: int,
                   trace_path: str | Path) -> Path:
    """A trace of ``active`` free-running calls of ``step``, as a training loop runs them.

    ``schedule(wait=0, warmup, active, repeat=1)``: the profiler's own warmup
    calls first (its start-up cost stays out of the trace); the device is
    drained before the first active call, so the window opens on an idle
    device with nothing of the warmup still queued; nothing synchronizes
    between the active calls (only the step's own syncs); after the last one
    the device is drained inside a ``perflab_drain`` range
    (:data:`perflab.instruments.trace.DRAIN_RANGE`), so the trace holds all of the window's
    device work and its reader can tell that sync from the step's. Writes the
    chrome trace to ``trace_path`` (gzip) and returns it.
    """
    from torch.profiler import profile, record_function, schedule

    from perflab.instruments.trace import DRAIN_RANGE

    if active < 1:
        raise ValueError("active must be >= 1")
    sync()
    with profile(activities=activities(device),
                 schedule=schedule(wait=0, warmup=warmup, active=active, repeat=1)) as prof:
        for i in range(warmup + active):
            step()
            if i == warmup - 1:
                sync()  # the last profiler-warmup call: drain before the window opens
            if i == warmup + active - 1:
                with record_function(DRAIN_RANGE):
                    sync()
            prof.step()
    return export_trace_gz(prof, trace_path)


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

    Timed with a sync at both ends (:func:`perflab.instruments.timing.time_calls`), a step
    that reads nothing back runs ahead of the device inside the stretch; one
    that reads a device value each call cannot.
    """
    if k < 1:
        raise ValueError("k must be >= 1")

    def run() -> None:
        for _ in range(k):
            step()

    return run


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
) -> ab.PairedCost:
    """An A/B pair's rows on ``ctx`` through the one A/B writer, :func:`perflab.instruments.ab.record`.

    ``sides`` is ``[(variant, samples, block of each sample, block medians,
    sync boundary)]`` for A then B; ``block_ids`` the index of each side's blocks (e.g.
    profiled blocks between unprofiled ones); the difference goes under ``diff_variant`` as
    ``diff_metric`` (B - A, ms) with the rows :mod:`perflab.instruments.ab` names.
    """
    ids = block_ids or (None, None)
    a, b = (ab.Side(v, samples, block_of, blocks, sync, block_ids=bid)
            for (v, samples, block_of, blocks, sync), bid in zip(sides, ids))
    return ab.record(ctx, a, b, metric=metric, window=window, diff_variant=diff_variant,
                     diff_metric=diff_metric, block_diffs=block_diffs)


@dataclass
class BracketedSessions:
    """Profiling sessions, each between two unprofiled blocks of the same length: block
    ``2i`` unprofiled, ``2i + 1`` session ``i``'s active steps, in time order."""

    unprofiled: list[float] = field(default_factory=list)
    unprofiled_of: list[int] = field(default_factory=list)
    unprofiled_blocks: list[float] = field(default_factory=list)
    profiled: list[float] = field(default_factory=list)
    profiled_of: list[int] = field(default_factory=list)
    profiled_blocks: list[float] = field(default_factory=list)
    first: ProfiledRun | None = None  # the first session, kept (with its trace) when asked

    def between(self) -> list[float]:
        """Each session's median less the mean of the two unprofiled blocks around it: a
        drift across the bracket cancels, where a median against all unprofiled steps
        would carry it (the paired differences the A/B judgement reads)."""
        u = self.unprofiled_blocks
        return [p - (u[i] + u[i + 1]) / 2 for i, p in enumerate(self.profiled_blocks)]


def bracketed_sessions(plain: Callable[[], object], profiled: Callable[[], object], *,
                       device: torch.device | str, sync: Callable[[], None], sessions: int,
                       bracket: int, wait: int, warmup: int, active: int,
                       keep_first: bool = False) -> BracketedSessions:
    """``sessions`` profiling sessions of ``profiled`` (``schedule(wait, warmup, active)``,
    :func:`profile_steps`), each bracketed by ``bracket`` synchronized calls of ``plain``
    right before and after, so a drift of the machine shows as the brackets' difference and
    cancels from each session's paired difference (:meth:`BracketedSessions.between`). Warm
    ``plain`` first. Only the first session's profile is kept (``keep_first``): each holds
    its events and memory records."""
    import statistics

    from perflab.instruments import timing

    if sessions < 1 or bracket < 1:
        raise ValueError("bracketed sessions need sessions >= 1 and bracket >= 1")
    res = BracketedSessions()

    def unprofiled(pos: int) -> None:
        s = timing.time_calls(plain, warmup=0, repeats=bracket, sync=sync)
        res.unprofiled.extend(s)
        res.unprofiled_of.extend([pos] * len(s))
        res.unprofiled_blocks.append(statistics.median(s))

    for i in range(sessions):
        unprofiled(2 * i)
        run = profile_steps(profiled, device=device, sync=sync, wait=wait, warmup=warmup,
                            active=active)
        res.profiled.extend(run.active_ms)
        res.profiled_of.extend([2 * i + 1] * len(run.active_ms))
        res.profiled_blocks.append(statistics.median(run.active_ms))
        if keep_first and i == 0:
            res.first = run
        del run
    unprofiled(2 * sessions)
    return res


def record_bracketed(ctx, res: BracketedSessions, *, metric: str, window: str,
                     variants: tuple[str, str], syncs: tuple[str, str], diff_variant: str,
                     diff_metric: str) -> ab.PairedCost:
    """The rows of :func:`bracketed_sessions` as an A/B (unprofiled, profiled), each
    session against its own bracket (:func:`record_pair`, the project's one judgement)."""
    n = len(res.profiled_blocks)
    return record_pair(
        ctx, metric=metric, window=window,
        sides=[(variants[0], res.unprofiled, res.unprofiled_of, res.unprofiled_blocks, syncs[0]),
               (variants[1], res.profiled, res.profiled_of, res.profiled_blocks, syncs[1])],
        diff_variant=diff_variant, diff_metric=diff_metric,
        block_ids=(list(range(0, 2 * n + 1, 2)), list(range(1, 2 * n, 2))),
        block_diffs=res.between())
