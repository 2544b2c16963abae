"""On CUDA: the profiled window of the script's own steps, read as R02 reads its window.

perflab.instruments.trace splits the window's device time into busy and idle, each idle gap charged to
data (the host in the loader's next()), sync (the host blocked in a synchronizing call),
launch (the device ran dry before the host launched more) or other; it finds the blocking
calls and the operators that made them. Here those are written as R02's rows, so
perflab.views.diagnose's trace-based tests decide input, synchronization and host overhead on the
user's loop. Two differences from R02, said in every row's window: the loop is the script's
(nothing drains the device before or after the window), and the unprofiled step the sync
bound is set against is the script's own steady step (the timed steps' median wall).
The sync sites' frames are the user's lines that torch's sync debug mode located in the
sync window (observers), joined to the trace's sites by phase.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from perflab.core.names import PHASES
from perflab.experiments import r02_step_trace as r02
from perflab.instruments import trace

WINDOW = "attached: the script's own loop, its profiled window (torch.profiler, CPU + CUDA)"


def _share_rows(row, values, step_ms, variant, metric):
    out = [row("R02", variant, metric, "mean", float(np.mean(values)), "ms")]
    total = sum(step_ms)
    out.append(row("R02", variant, r02.WINDOW_SHARE, "value",
                   100 * sum(values) / total if total else 0.0, "%"))
    shares = sorted(100 * v / s for v, s in zip(values, step_ms) if s > 0)
    for name, q in (("p25", 0.25), ("p75", 0.75)):
        if shares:
            out.append(row("R02", variant, r02.WINDOW_SHARE, name,
                           shares[min(len(shares) - 1, int(q * len(shares)))], "%"))
    return out


def trace_rows(ev: dict, out_dir: Path, free_ms: float | None, row) -> list[dict]:
    """R02's rows from the kept trace (``row(eid, variant, metric, statistic, value, unit)``
    makes one contract row); [] when there is no trace."""
    name = (ev.get("profile") or {}).get("trace")
    if not name or not (out_dir / name).is_file():
        return []
    w = trace.read_chrome_trace(out_dir / name, PHASES)
    if not w.steps:
        return []
    att = trace.attribute(w)
    out = _share_rows(row, att.per_step[trace.BUSY], att.step_ms, r02.BUSY, r02.DEVICE_TIME)
    for cause in trace.CAUSES:
        out += _share_rows(row, att.per_step[cause], att.step_ms, r02.idle_variant(cause),
                           r02.IDLE_TIME)
    for (cause, phase), ms in sorted(att.by_phase.items()):
        out.append(row("R02", r02.phase_variant(phase, cause),
                       r02.DEVICE_TIME if cause == trace.BUSY else r02.IDLE_TIME, "mean",
                       ms / att.steps, "ms"))
    copy_ms = trace.h2d_outside_kernels(w) / att.steps
    out.append(row("R02", r02.H2D_COPY, r02.WINDOW_SHARE, "value",
                   100 * copy_ms * att.steps / att.window_ms if att.window_ms else 0.0, "%"))
    sites = trace.sync_sites(w)
    out.append(row("R02", r02.SYNCS, r02.SYNCS_PER_STEP, "value",
                   sum(s.occurrences for s in sites) / att.steps, "count"))
    n_debug = max(1, sum(1 for r in ev["steps"] if r["kind"] == "syncs"))
    out.append(row("R02", r02.SYNCS, r02.SYNC_WARNINGS_PER_STEP, "value",
                   len(ev.get("sync_hits") or []) / n_debug, "count"))
    blocked = [0.0] * att.steps
    for s in w.syncs:
        i = max(0, sum(1 for st in w.steps if st.start <= s.start) - 1)
        blocked[min(i, att.steps - 1)] += (s.end - s.start) / 1e3
    out.append(row("R02", r02.SYNCS, r02.BLOCKED_TIME, "mean", float(np.mean(blocked)), "ms"))
    bound = [min(b, s + la) for b, s, la in zip(blocked, att.per_step[trace.SYNC],
                                                att.per_step[trace.LAUNCH])]
    out += _share_rows(row, bound, att.step_ms, r02.SYNC_COST_BOUND, r02.IDLE_TIME)
    if free_ms:
        busy = float(np.mean(att.per_step[trace.BUSY]))
        out.append(row("R02", r02.SYNC_COST_BOUND, r02.FREE_STEP_SHARE, "value",
                       100 * min(float(np.mean(bound)), max(0.0, free_ms - busy)) / free_ms,
                       "%"))
    frames: dict[str, list[str]] = {}
    for h in ev.get("sync_hits") or []:
        frames.setdefault(h.get("phase") or trace.BETWEEN, [])
        if h["site"] and h["site"] not in frames[h.get("phase") or trace.BETWEEN]:
            frames[h.get("phase") or trace.BETWEEN].append(h["site"])
    for s in sites:
        v = r02.site_variant(s.phase, s.op, "; ".join(frames.get(s.phase, [])))
        out += [row("R02", v, r02.SYNCS_PER_STEP, "value", s.occurrences / att.steps, "count"),
                row("R02", v, r02.BLOCKED_TIME, "value", s.blocked_ms / att.steps, "ms"),
                row("R02", v, r02.IDLE_TIME, "value",
                    att.sync_idle_by_site.get(s.site, 0.0) / att.steps, "ms")]
    return out
