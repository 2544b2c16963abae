"""A memory snapshot as one offline HTML page: the allocator's timeline and who held the peak.

PyTorch's own viewer (``torch.cuda._memory_viz.trace_plot``) is a page that imports
MemoryViz.js from a CDN, so it shows nothing offline, and the wheel does not ship the script.
This page is drawn here instead, from the snapshot ``torch.cuda.memory._snapshot()`` returns:
allocated and reserved bytes over the recorded events (an inline SVG), the peak, and the
allocations live at the peak, largest first, each with the top of its stack. The snapshot
itself is carried in the page as a download (``snapshot.pickle``) for PyTorch's interactive
viewer where a network is at hand.

Snapshot format (PyTorch's): ``device_traces[d]`` is a list of events with ``action``
(``alloc``, ``free_requested``, ``free_completed``, ``segment_alloc``, ``segment_free``,
...), ``addr``, ``size`` and ``frames`` (``filename``, ``line``, ``name``); ``segments``
holds the allocator's state when the snapshot was taken.
"""

from __future__ import annotations

import base64
import html
import pickle
from typing import Any

MiB = 2 ** 20


def _frames(event: dict, top: int = 4) -> str:
    """The top of an allocation's stack: the Python frames outside torch where there are
    any (a snapshot's stacks start with C++ and torch's own frames), else what there is."""
    frames = event.get("frames") or []
    py = [f for f in frames if str(f.get("filename", "")).endswith(".py")]
    own = [f for f in py if "/torch/" not in str(f.get("filename", ""))]
    frames = own or py or frames
    return " ← ".join(f"{f.get('name', '?')} ({f.get('filename', '?')}:{f.get('line', '?')})"
                      for f in frames[:top])


def timeline(snapshot: dict, device: int | None = None) -> dict[str, Any]:
    """allocated and reserved bytes after each event of one device's trace (the first with
    events, unless ``device``), the peak, and the allocations live at the peak.

    Bytes allocated before recording began are the baseline: what the segments hold now,
    less what the recorded events added."""
    traces = snapshot.get("device_traces") or []
    if device is None:
        device = next((i for i, t in enumerate(traces) if t), 0)
    events = traces[device] if device < len(traces) else []
    segments = [s for s in snapshot.get("segments", []) if s.get("device", device) == device]
    end_allocated = sum(b.get("size", 0) for s in segments for b in s.get("blocks", [])
                        if b.get("state") == "active_allocated")
    end_reserved = sum(s.get("total_size", 0) for s in segments)
    net_alloc = net_reserved = 0
    for e in events:
        sign = {"alloc": 1, "free_completed": -1}.get(e.get("action"), 0)
        net_alloc += sign * e.get("size", 0)
        seg = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1,
               "segment_unmap": -1}.get(e.get("action"), 0)
        net_reserved += seg * e.get("size", 0)
    allocated, reserved = end_allocated - net_alloc, end_reserved - net_reserved
    live: dict[int, dict] = {}
    series_a, series_r = [allocated], [reserved]
    peak, peak_at, peak_live = allocated, 0, {}
    for i, e in enumerate(events, 1):
        action, size = e.get("action"), e.get("size", 0)
        if action == "alloc":
            allocated += size
            live[e.get("addr")] = e
        elif action == "free_completed":
            allocated -= size
            live.pop(e.get("addr"), None)
        elif action in ("segment_alloc", "segment_map"):
            reserved += size
        elif action in ("segment_free", "segment_unmap"):
            reserved -= size
        series_a.append(allocated)
        series_r.append(reserved)
        if allocated > peak:
            peak, peak_at, peak_live = allocated, i, dict(live)
    held = sorted(peak_live.values(), key=lambda e: -e.get("size", 0))
    return {"device": device, "events": len(events), "allocated": series_a,
            "reserved": series_r, "peak": peak, "peak_at": peak_at, "held_at_peak": held,
            "baseline": series_a[0]}


def _polyline(values: list[int], top: float, width: int, height: int, colour: str) -> str:
    n = max(len(values) - 1, 1)
    step = max(1, len(values) // 2000)  # at most ~2000 points: the page stays small
    pts = " ".join(f"{i / n * width:.1f},{height - v / top * height:.1f}"
                   for i, v in enumerate(values) if i % step == 0 or i == len(values) - 1)
    return f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{pts}"/>'


def page(snapshot: dict, title: str = "perflab memory snapshot", top: int = 20) -> str:
    """The self-contained page: no script, nothing fetched."""
    t = timeline(snapshot)
    esc = html.escape
    ceiling = max(max(t["reserved"]), max(t["allocated"]), 1)
    w, h = 1000, 260
    svg = (f'<svg viewBox="0 0 {w} {h}" width="100%" style="max-width:{w}px;border:1px solid '
           f'#ccc" role="img"><title>allocated (blue) and reserved (grey) bytes over '
           f'{t["events"]} allocator events</title>'
           + _polyline(t["reserved"], ceiling, w, h, "#999")
           + _polyline(t["allocated"], ceiling, w, h, "#1a4f8b") + "</svg>")
    rows = "".join(f"<tr><td>{e.get('size', 0) / MiB:.2f}</td><td>{esc(_frames(e))}</td></tr>"
                   for e in t["held_at_peak"][:top])
    held = sum(e.get("size", 0) for e in t["held_at_peak"])
    data = base64.b64encode(pickle.dumps(snapshot)).decode("ascii")
    return f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:20px auto;padding:0 12px}}
table{{border-collapse:collapse;display:block;overflow-x:auto}}td,th{{text-align:left;
padding:3px 8px;border-bottom:1px solid #eee;vertical-align:top}}</style></head><body>
<h1>{esc(title)}</h1>
<p>Device {t['device']}: {t['events']} allocator events recorded. Peak allocated
<b>{t['peak'] / MiB:.1f} MiB</b> at event {t['peak_at']} (reserved at most
{max(t['reserved']) / MiB:.1f} MiB; {t['baseline'] / MiB:.1f} MiB allocated before recording
began). Allocated in blue, reserved (the caching allocator's segments) in grey.</p>
{svg}
<h2>Live at the peak: {len(t['held_at_peak'])} allocations made while recording,
{held / MiB:.1f} MiB (largest {min(top, len(t['held_at_peak']))})</h2>
<table><thead><tr><th>MiB</th><th>allocated at (innermost frame first)</th></tr></thead>
<tbody>{rows}</tbody></table>
<p>The snapshot itself: <a download="snapshot.pickle"
href="data:application/octet-stream;base64,{data}">snapshot.pickle</a> — drop it on PyTorch's
interactive viewer (pytorch.org/memory_viz) where a network is at hand; this page needs
none.</p>
</body></html>
"""
