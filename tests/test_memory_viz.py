"""The memory snapshot page (perflab.views.memory_viz) on a snapshot built by hand in PyTorch's
format: a CPU has no allocator history to record, so the real one is the H200's."""

from __future__ import annotations

import base64
import pickle
import re

from perflab.views import memory_viz

MiB = 2 ** 20


def _frame(name, filename="train.py", line=1):
    return {"name": name, "filename": filename, "line": line}


def _snapshot():
    cxx = {"name": "c10::alloc", "filename": "??", "line": 0}
    torch_frame = _frame("forward", "/site-packages/torch/nn/modules/linear.py", 125)
    events = [
        {"action": "segment_alloc", "addr": 0, "size": 20 * MiB},
        {"action": "alloc", "addr": 1, "size": 4 * MiB,
         "frames": [cxx, torch_frame, _frame("step", "train.py", 10)]},
        {"action": "alloc", "addr": 2, "size": 8 * MiB, "frames": [_frame("activations")]},
        {"action": "free_requested", "addr": 2, "size": 8 * MiB},
        {"action": "free_completed", "addr": 2, "size": 8 * MiB},
        {"action": "alloc", "addr": 3, "size": 1 * MiB, "frames": [_frame("small")]},
    ]
    # at the end: 2 MiB allocated before recording (a block the trace never saw), plus
    # the blocks 1 and 3 still live; one 20 MiB segment recorded, one 10 MiB older
    segments = [{"device": 0, "total_size": 20 * MiB, "blocks": [
        {"size": 4 * MiB, "state": "active_allocated"},
        {"size": 1 * MiB, "state": "active_allocated"},
        {"size": 15 * MiB, "state": "inactive"}]},
        {"device": 0, "total_size": 10 * MiB, "blocks": [
            {"size": 2 * MiB, "state": "active_allocated"}]}]
    return {"device_traces": [events], "segments": segments}


def test_timeline_peak_and_who_held_it():
    t = memory_viz.timeline(_snapshot())
    assert t["baseline"] == 2 * MiB  # allocated before recording began
    assert t["peak"] == 14 * MiB and t["peak_at"] == 3  # 2 + 4 + 8, after the third event
    assert [e["addr"] for e in t["held_at_peak"]] == [2, 1]  # largest first
    assert t["allocated"][-1] == 7 * MiB  # what the segments hold at the end
    assert t["reserved"][0] == 10 * MiB and t["reserved"][-1] == 30 * MiB


def test_page_is_offline_and_carries_the_snapshot():
    page = memory_viz.page(_snapshot(), "snap <b>")
    assert "<script" not in page and "http" not in page.split("pytorch.org/memory_viz")[0]
    assert "snap &lt;b&gt;" in page and "<svg" in page
    assert "14.0 MiB" in page  # the peak
    # the stack shown is the user's frame, not the C++ or torch frames above it
    assert "step (train.py:10)" in page and "c10::alloc" not in page.split("<tbody>")[1]
    data = re.search(r"base64,([A-Za-z0-9+/=]+)", page).group(1)
    assert pickle.loads(base64.b64decode(data)) == _snapshot()


def test_an_empty_trace_is_a_flat_page():
    t = memory_viz.timeline({"device_traces": [], "segments": []})
    assert t["events"] == 0 and t["peak"] == 0 and t["held_at_peak"] == []
    assert "0 allocator events" in memory_viz.page({"device_traces": [], "segments": []})
