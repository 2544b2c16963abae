"""What the device did during a profiled window of the step, and why it idled: trace arithmetic.

A profiled window (``torch.profiler``'s Kineto trace of a few free-running
steps, :func:`read_chrome_trace`) becomes a :class:`Window` of plain
intervals on one clock (Kineto aligns device timestamps to the host's, in µs):

- the steps (the profiler's ``ProfilerStep#N`` ranges);
- the device's activities (kernels, copies, memsets), each with the host time
  its launch call started (the runtime call with the same correlation id);
- the host's synchronizing calls (``cudaStreamSynchronize``,
  ``cudaDeviceSynchronize``, ``cudaEventSynchronize``, and copies whose device
  side is device-to-host), each with the operator that made it and the phase;
- the phases' host ranges (:class:`perflab.instruments.phases.PhaseRanges`).

:func:`attribute` splits the window into device busy time (the union of the
activities) and idle gaps, each gap's time charged to one cause, in this order:

1. ``data``: the part of the gap during which the host was inside the loader's
   ``next()`` (the ``input_wait`` range): the device waited for data;
2. ``sync``: the rest of a gap that opened while the host was blocked in a
   synchronizing call (the call started before the device ran dry and was
   still open then): the queue drained because the host waited on it, so the
   host could not have queued the next work ahead;
3. ``launch``: the rest of a gap whose next activity was launched by the host
   after the device ran dry: the device waited for the host to launch;
4. ``other``: the rest (the next activity was already queued: device-side
   latency between kernels, a wait on another stream).

Each piece of time is then joined to the phase open on the host at that moment
and to its step, so the split is per phase and per step. Nothing here imports
torch: the arithmetic is tested on intervals built by hand.
"""

from __future__ import annotations

import bisect
import gzip
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: the causes a gap's time is charged to, in the order they are tested
DATA, SYNC, LAUNCH, OTHER = "data", "sync", "launch", "other"
CAUSES = (DATA, SYNC, LAUNCH, OTHER)
#: device time not in any phase range (between two steps: the profiler's step marker)
BETWEEN = "between_steps"
#: the phase whose range is the loader's next()
INPUT_PHASE = "input_wait"
#: the range the harness drains the device in after the last step (its sync is not the step's)
DRAIN_RANGE = "perflab_drain"
#: host calls that block until the device has drained (runtime and driver API names)
SYNC_CALLS = frozenset({
    "cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
    "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize",
})
#: a sync call may return a few µs after the device's last activity ends (two clocks)
SYNC_SLACK_US = 5.0

_HOST_OPS = {"cpu_op", "operator"}
_ANNOTATIONS = {"user_annotation"}
_RUNTIME = {"cuda_runtime", "cuda_driver", "runtime", "driver"}
_DEVICE = {"kernel": "kernel", "gpu_memcpy": "memcpy", "memcpy": "memcpy",
           "gpu_memset": "memset", "memset": "memset"}


@dataclass(frozen=True)
class Span:
    start: float
    end: float

    @property
    def length(self) -> float:
        return max(0.0, self.end - self.start)


@dataclass(frozen=True)
class Activity:
    """Work on the device: a kernel, copy or memset, and when the host launched it."""

    start: float
    end: float
    launch: float | None = None  # host start of its launch call; None: not found
    kind: str = "kernel"
    name: str = ""


@dataclass(frozen=True)
class SyncCall:
    """A host call that blocked until the device drained, and where the step made it."""

    start: float
    end: float
    call: str  # the runtime call, e.g. cudaStreamSynchronize
    op: str  # the operators enclosing it, outermost > innermost ("" when called directly)
    phase: str
    occurrence: int  # calls made inside one operator call share it (a copy and its sync)

    @property
    def site(self) -> tuple[str, str]:
        return self.phase, self.op


@dataclass
class Window:
    """One profiled window of free-running steps, as intervals."""

    steps: list[Span]
    activities: list[Activity] = field(default_factory=list)
    syncs: list[SyncCall] = field(default_factory=list)
    phases: dict[str, list[Span]] = field(default_factory=dict)
    #: the host reached the harness's final drain here (None: no drain range)
    drain_start: float | None = None

    @property
    def start(self) -> float:
        return self.steps[0].start

    @property
    def end(self) -> float:
        """The device's last activity, or the host's arrival at the drain if later."""
        ends = [a.end for a in self.activities]
        if self.drain_start is not None:
            ends.append(self.drain_start)
        return max(ends) if ends else self.steps[-1].end


# ------------------------------------------------------------------ interval arithmetic


def merge(spans: Iterable[Span]) -> list[Span]:
    """The union of ``spans`` as sorted, disjoint spans."""
    out: list[Span] = []
    for s in sorted((s for s in spans if s.end > s.start), key=lambda s: s.start):
        if out and s.start <= out[-1].end:
            out[-1] = Span(out[-1].start, max(out[-1].end, s.end))
        else:
            out.append(s)
    return out


def overlap(span: Span, merged: Sequence[Span]) -> float:
    """Length of ``span`` covered by ``merged`` (sorted, disjoint)."""
    return sum(piece.length for piece in intersect(span, merged))


def intersect(span: Span, merged: Sequence[Span]) -> list[Span]:
    """The pieces of ``span`` inside ``merged`` (sorted, disjoint)."""
    starts = [m.start for m in merged]
    i = max(0, bisect.bisect_right(starts, span.start) - 1)
    out = []
    for m in merged[i:]:
        if m.start >= span.end:
            break
        lo, hi = max(span.start, m.start), min(span.end, m.end)
        if hi > lo:
            out.append(Span(lo, hi))
    return out


def subtract(span: Span, merged: Sequence[Span]) -> list[Span]:
    """The pieces of ``span`` outside ``merged`` (sorted, disjoint)."""
    out, at = [], span.start
    for piece in intersect(span, merged):
        if piece.start > at:
            out.append(Span(at, piece.start))
        at = piece.end
    if span.end > at:
        out.append(Span(at, span.end))
    return out


# ------------------------------------------------------------------ attribution


@dataclass(frozen=True)
class Piece:
    """A stretch of the window: device busy (cause "") or idle for ``cause``."""

    span: Span
    cause: str = ""
    #: for a sync piece, the site (phase, operators) of the call the host was blocked in
    site: tuple[str, str] | None = None


@dataclass
class Attribution:
    """The window split into busy and idle time by cause, per phase and per step (ms)."""

    steps: int
    window_ms: float
    #: {(cause or "busy", phase): ms over the window}
    by_phase: dict[tuple[str, str], float]
    #: {cause or "busy": [ms in each step]}
    per_step: dict[str, list[float]]
    #: {(phase, op): ms of sync idle over the window}
    sync_idle_by_site: dict[tuple[str, str], float]
    #: each step's length on the host clock (ms), as the window splits them
    step_ms: list[float]

    def total(self, cause: str) -> float:
        """ms over the window for ``cause`` ("busy" for device busy time)."""
        return sum(v for (c, _), v in self.by_phase.items() if c == cause)

    def share(self, cause: str) -> float:
        """% of the window."""
        return 100.0 * self.total(cause) / self.window_ms if self.window_ms else 0.0


BUSY = "busy"


class _Blocking:
    """The sync calls by start, to find the one the host was blocked in at a time without
    scanning them all for each idle gap (a step with ~100 syncs and ~1,000 kernels made
    that scan seconds of R02's job)."""

    def __init__(self, syncs: Sequence[SyncCall]):
        self.syncs = sorted(enumerate(syncs), key=lambda x: x[1].start)
        self.starts = [s.start for _, s in self.syncs]
        self.longest = max((s.end - s.start for s in syncs), default=0.0)

    def at(self, t: float) -> SyncCall | None:
        """The sync call the host was blocked in when the device ran dry at ``t`` (the
        first in the window's order where calls overlap)."""
        i = bisect.bisect_right(self.starts, t)
        reach = t - self.longest - SYNC_SLACK_US  # no call starting before this covers t
        hits = []
        while i > 0 and self.starts[i - 1] >= reach:
            i -= 1
            order, s = self.syncs[i]
            if t <= s.end + SYNC_SLACK_US:
                hits.append((order, s))
        return min(hits, key=lambda x: x[0])[1] if hits else None


def _next_launch(acts: Sequence[Activity], starts: Sequence[float], t: float) -> float | None:
    """Launch time of the first activity starting at or after ``t``: inf when none follows
    (the host was still in the step when the window closed), None when its launch call is
    not in the trace."""
    i = bisect.bisect_left(starts, t)
    return float("inf") if i >= len(acts) else acts[i].launch


def _cause(gap: Span, blocking: _Blocking, acts: Sequence[Activity],
           starts: Sequence[float]) -> tuple[str, tuple[str, str] | None]:
    """Why the device idled in ``gap`` (its loader part aside): sync, launch or other."""
    blocked = blocking.at(gap.start)
    if blocked is not None:
        return SYNC, blocked.site
    launch = _next_launch(acts, starts, gap.end)
    if launch is not None and launch >= gap.start:
        return LAUNCH, None
    return OTHER, None  # already queued (or its launch not found): nothing says the host was late


def pieces(w: Window) -> list[Piece]:
    """Busy and idle pieces covering the window, each idle piece with its cause."""
    start, end = w.start, w.end  # each a scan of the window: once, not per activity
    acts = sorted((a for a in w.activities if a.end > start), key=lambda a: a.start)
    starts = [a.start for a in acts]
    busy = merge(Span(max(a.start, start), min(a.end, end)) for a in acts)
    data = merge(w.phases.get(INPUT_PHASE, []))
    blocking = _Blocking(w.syncs)
    out = [Piece(b) for b in busy]
    for gap in subtract(Span(start, end), busy):
        out += [Piece(p, DATA) for p in intersect(gap, data)]
        rest = subtract(gap, data)
        if rest:
            cause, site = _cause(gap, blocking, acts, starts)
            out += [Piece(p, cause, site) for p in rest]
    return sorted(out, key=lambda p: p.span.start)


def _label_of(spans_by_label: dict[str, list[Span]], piece: Span) -> list[tuple[str, float]]:
    """(label, µs) of ``piece`` inside each label's spans; the rest under BETWEEN."""
    out, covered = [], 0.0
    for label, merged in spans_by_label.items():
        v = overlap(piece, merged)
        if v > 0:
            out.append((label, v))
            covered += v
    if piece.length - covered > 1e-9:
        out.append((BETWEEN, piece.length - covered))
    return out


def attribute(w: Window) -> Attribution:
    """Busy and idle time of the window by cause, joined to the phases and to the steps."""
    if not w.steps:
        raise ValueError("a window needs at least one step")
    phases = {name: merge(spans) for name, spans in w.phases.items()}
    # the first step starts the window; the last runs until the device finished it
    steps = list(w.steps)
    end = w.end
    steps[-1] = Span(steps[-1].start, max(steps[-1].end, end))
    by_phase: dict[tuple[str, str], float] = defaultdict(float)
    per_step = {c: [0.0] * len(steps) for c in (BUSY, *CAUSES)}
    sync_sites: dict[tuple[str, str], float] = defaultdict(float)
    for piece in pieces(w):
        cause = piece.cause or BUSY
        for phase, us in _label_of(phases, piece.span):
            by_phase[(cause, phase)] += us / 1e3
        for i, s in enumerate(steps):
            if s.start < piece.span.end and s.end > piece.span.start:
                per_step[cause][i] += overlap(piece.span, [s]) / 1e3
        if piece.site is not None:
            sync_sites[piece.site] += piece.span.length / 1e3
    step_ms = [min(s.end, end) / 1e3 - s.start / 1e3 for s in steps]
    return Attribution(len(steps), (end - w.start) / 1e3, dict(by_phase), per_step,
                       dict(sync_sites), step_ms)


def h2d_outside_kernels(w: Window) -> float:
    """ms of the window the device spent copying host to device with no kernel running."""
    clip = Span(w.start, w.end)
    kernels = merge(s for a in w.activities if a.kind == "kernel"
                    for s in intersect(Span(a.start, a.end), [clip]))
    copies = merge(s for a in w.activities if a.kind == "memcpy"
                   and "htod" in a.name.lower().replace(" ", "")
                   for s in intersect(Span(a.start, a.end), [clip]))
    return sum(p.length for c in copies for p in subtract(c, kernels)) / 1e3


# ------------------------------------------------------------------ syncs


@dataclass(frozen=True)
class SyncSite:
    """The syncs of one (phase, operators) site over the window."""

    phase: str
    op: str
    occurrences: int  # operator calls that blocked
    calls: int  # blocking runtime calls inside them
    blocked_ms: float  # host time inside those calls

    @property
    def site(self) -> tuple[str, str]:
        return self.phase, self.op


def sync_sites(w: Window) -> list[SyncSite]:
    """Each site's syncs in the window, in the order the step first reaches them."""
    order: list[tuple[str, str]] = []
    occ: dict[tuple[str, str], set[int]] = defaultdict(set)
    calls: dict[tuple[str, str], int] = defaultdict(int)
    blocked: dict[tuple[str, str], float] = defaultdict(float)
    for s in sorted(w.syncs, key=lambda s: s.start):
        if s.site not in occ:
            order.append(s.site)
        occ[s.site].add(s.occurrence)
        calls[s.site] += 1
        blocked[s.site] += (s.end - s.start) / 1e3
    return [SyncSite(ph, op, len(occ[(ph, op)]), calls[(ph, op)], blocked[(ph, op)])
            for ph, op in order]


# ------------------------------------------------------------------ reading a Kineto trace


def _events(doc: dict) -> list[dict]:
    return [e for e in doc.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]


def _span(e: dict) -> Span:
    ts = float(e["ts"])
    return Span(ts, ts + float(e["dur"]))


def _cat(e: dict) -> str:
    return str(e.get("cat", "")).lower()


def _correlation(e: dict) -> int | None:
    c = (e.get("args") or {}).get("correlation")
    return int(c) if c is not None else None


def _enclosing(ops: list[dict], queries: Sequence[tuple[object, float]]
               ) -> list[list[tuple[str, int]]]:
    """For each (thread, time) query, the host operators open then on that thread, outermost
    first, as (name, index in ``ops``). One sweep per thread over its operators by start and
    its queries by time, holding only the operators still open: a scan of every operator for
    each query took 1.3 s of R02's job on a step with ~100 syncs."""
    by_tid: dict[object, list[tuple[Span, str, int]]] = defaultdict(list)
    for i, e in enumerate(ops):
        by_tid[e.get("tid")].append((_span(e), str(e.get("name", "")), i))
    asked: dict[object, list[tuple[float, int]]] = defaultdict(list)
    for q, (tid, t) in enumerate(queries):
        asked[tid].append((t, q))
    out: list[list[tuple[str, int]]] = [[] for _ in queries]
    for tid, times in asked.items():
        spans = sorted(by_tid.get(tid, ()), key=lambda x: (x[0].start, -x[0].end))
        open_, k = [], 0
        for t, q in sorted(times):
            while k < len(spans) and spans[k][0].start <= t:
                open_.append(spans[k])
                k += 1
            open_ = [x for x in open_ if x[0].end >= t]  # in start order, as sorted
            out[q] = [(name, i) for _, name, i in open_]
    return out


def _blocks(e: dict, d2h: set[int | None]) -> bool:
    """A runtime call that blocks the host until the device drains: a synchronize, or a
    device-to-host copy."""
    name = str(e.get("name", ""))
    return name in SYNC_CALLS or ("memcpy" in name.lower() and _correlation(e) in d2h)


def _phase_at(phases: dict[str, list[Span]], t: float) -> str:
    for name, spans in phases.items():
        if any(s.start <= t <= s.end for s in spans):
            return name
    return BETWEEN


def _op_label(chain: list[tuple[str, int]]) -> tuple[str, int]:
    """("outermost > innermost", the innermost's index): the operator a sync happened in."""
    if not chain:
        return "", -1
    names = [chain[0][0]] + ([chain[-1][0]] if len(chain) > 1 else [])
    return " > ".join(names), chain[-1][1]


def from_chrome_trace(doc: dict, phase_names: Iterable[str]) -> Window:
    """A :class:`Window` from a Kineto chrome trace (``prof.export_chrome_trace``'s JSON).

    Steps are the ``ProfilerStep#N`` ranges; phases the ``record_function``
    ranges named in ``phase_names``; syncs inside :data:`DRAIN_RANGE` are the
    harness's and are left out.
    """
    names = set(phase_names)
    events = _events(doc)
    steps, phases, drains = [], defaultdict(list), []
    ops, runtime, device = [], [], []
    for e in events:
        cat, name = _cat(e), str(e.get("name", ""))
        if cat in _ANNOTATIONS:
            if name.startswith("ProfilerStep#"):
                steps.append(_span(e))
            elif name in names:
                phases[name].append(_span(e))
            elif name == DRAIN_RANGE:
                drains.append(_span(e))
        elif cat in _HOST_OPS:
            ops.append(e)
        elif cat in _RUNTIME:
            runtime.append(e)
        elif cat in _DEVICE:
            device.append(e)
    steps.sort(key=lambda s: s.start)
    launch = {c: float(e["ts"]) for e in runtime if (c := _correlation(e)) is not None}
    d2h = {_correlation(e) for e in device if _DEVICE[_cat(e)] == "memcpy"
           and "dtoh" in str(e.get("name", "")).lower().replace(" ", "")}
    activities = [Activity(s.start, s.end, launch.get(_correlation(e)), _DEVICE[_cat(e)],
                           str(e.get("name", ""))) for e in device for s in [_span(e)]]
    phases = dict(phases)
    blocking = [e for e in runtime if _blocks(e, d2h)
                and not any(d.start <= float(e["ts"]) <= d.end for d in drains)]
    chains = _enclosing(ops, [(e.get("tid"), float(e["ts"])) for e in blocking])
    syncs = []
    for e, chain in zip(blocking, chains):
        name, span = str(e.get("name", "")), _span(e)
        op, idx = _op_label(chain)
        syncs.append(SyncCall(span.start, span.end, name, op, _phase_at(phases, span.start),
                              idx if idx >= 0 else -(len(syncs) + 2)))
    return Window(steps, activities, syncs, phases,
                  drain_start=min((d.start for d in drains), default=None))


def read_chrome_trace(path: str | Path, phase_names: Iterable[str]) -> Window:
    """:func:`from_chrome_trace` of a trace file (``.json`` or ``.json.gz``)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return from_chrome_trace(json.load(fh), phase_names)
