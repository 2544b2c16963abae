"""R02: the trace arithmetic on intervals built by hand, the Kineto reader on a trace built by
hand, the script's CUDA rows from that trace (instruments replaced: a patched contract, so run
here), and the CPU path as the shared pipeline run ran it.

The hand-built window has two steps of 100 µs each. Each step: the loader's next() 0-20, the
host launches kernel A at 22 (it runs 24-40) and kernel B at 25 (queued: 41-60); in the loss
the host calls ``.item()`` (a device-to-host copy and a stream sync, 58-61), so the device runs
dry at 60 while the host is blocked; kernel C, launched at 68, runs 70-90; kernel D, launched
at 50, runs 90-95. The second step repeats it 100 µs later; the harness drains from 196.

Known answers (µs): busy 2 x 60; data 2 x 20; sync 2 x 10 (60-70, in the loss); other 2 x 1
(40-41: B was queued); launch 4 (20-24) + 5 (95-100, step 1's end, before step 2's loader) + 4
(120-124) + 1 (195-196, before the drain): 14. Window 0-196.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from experiments import pipeline_results, run_tiny

from perflab.core import io
from perflab.experiments import r02_step_trace as r02
from perflab.instruments import trace
from perflab.instruments.trace import Activity, Span, SyncCall, Window
from perflab.pipeline import config

ROOT = config.ROOT


def _window(drain: bool = True) -> Window:
    acts, syncs, phases = [], [], {p: [] for p in ("input_wait", "forward", "loss")}
    for k, off in enumerate((0, 100)):
        acts += [Activity(off + 24, off + 40, off + 22), Activity(off + 41, off + 60, off + 25),
                 Activity(off + 70, off + 90, off + 68), Activity(off + 90, off + 95, off + 50)]
        syncs.append(SyncCall(off + 58, off + 61, "cudaStreamSynchronize",
                              "aten::item > aten::_local_scalar_dense", "loss", k))
        phases["input_wait"].append(Span(off, off + 20))
        phases["forward"].append(Span(off + 25, off + 55))
        phases["loss"].append(Span(off + 55, off + 80))
    return Window([Span(0, 100), Span(100, 200)], acts, syncs, phases,
                  drain_start=196 if drain else None)


def test_interval_arithmetic():
    m = trace.merge([Span(5, 7), Span(0, 2), Span(1, 3), Span(9, 9)])
    assert m == [Span(0, 3), Span(5, 7)]
    assert trace.overlap(Span(2, 6), m) == 2
    assert trace.subtract(Span(0, 10), m) == [Span(3, 5), Span(7, 10)]
    assert trace.intersect(Span(-1, 1), m) == [Span(0, 1)]


def test_idle_time_is_split_by_cause_phase_and_step():
    att = trace.attribute(_window())
    assert att.window_ms == pytest.approx(0.196)
    got = {c: att.total(c) * 1e3 for c in (trace.BUSY, *trace.CAUSES)}
    assert got == pytest.approx({"busy": 120, "data": 40, "sync": 20, "other": 2, "launch": 14})
    assert sum(got.values()) == pytest.approx(196)  # busy + idle cover the window exactly
    assert att.by_phase[(trace.SYNC, "loss")] * 1e3 == pytest.approx(20)
    assert att.by_phase[(trace.DATA, "input_wait")] * 1e3 == pytest.approx(40)
    assert att.sync_idle_by_site[("loss", "aten::item > aten::_local_scalar_dense")] * 1e3 == \
        pytest.approx(20)
    per = {c: [v * 1e3 for v in vs] for c, vs in att.per_step.items()}
    assert per["launch"] == pytest.approx([9, 5]) and per["data"] == pytest.approx([20, 20])
    assert [s * 1e3 for s in att.step_ms] == pytest.approx([100, 96])
    assert att.share(trace.SYNC) == pytest.approx(100 * 20 / 196)


def test_a_sync_the_host_reached_after_the_device_ran_dry_is_not_the_wait():
    """The device idled because the host was late, not because it waited on a sync: a sync
    called once the queue is already empty costs nothing; the gap is the host's launch."""
    w = _window()
    late = [SyncCall(s.start + 3, s.end + 3, s.call, s.op, s.phase, s.occurrence)
            for s in w.syncs]  # 61-64: after the device ran dry at 60
    att = trace.attribute(Window(w.steps, w.activities, late, w.phases, w.drain_start))
    assert att.total(trace.SYNC) == 0
    assert att.total(trace.LAUNCH) * 1e3 == pytest.approx(14 + 20)


def test_a_gap_whose_launch_is_unknown_is_not_blamed_on_the_host():
    w = _window()
    acts = [Activity(a.start, a.end, None if a.start in (70, 170) else a.launch)
            for a in w.activities]
    att = trace.attribute(Window(w.steps, acts, [], w.phases, w.drain_start))
    assert att.total(trace.OTHER) * 1e3 == pytest.approx(2 + 20)  # 60-70 twice: unknown launch


# ------------------------------------------------------------------ a Kineto trace by hand

PID, TID, BWD = 1, 11, 12


def _x(cat, name, ts, dur, tid=TID, pid=PID, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}


def kineto(steps=2) -> dict:
    """The hand-built window as torch.profiler's chrome trace writes it (µs, floats)."""
    ev, corr = [], iter(range(100, 10_000))

    def launch(ts, start, dur, name="gemm", tid=TID, kind="kernel", api="cudaLaunchKernel"):
        c = next(corr)
        ev.append(_x("cuda_runtime", api, ts, 1.5, tid=tid, correlation=c))
        ev.append(_x(kind, name, start, dur, tid=7, pid=0, correlation=c, stream=7, device=0))
        return c

    for k in range(steps):
        o = 100.0 * k
        ev.append(_x("user_annotation", f"ProfilerStep#{k + 4}", o, 100.0))
        for name, a, b in (("input_wait", 0, 20), ("forward", 25, 55), ("loss", 55, 80),
                           ("backward", 80, 95)):
            ev.append(_x("user_annotation", name, o + a, b - a))
        ev.append(_x("cpu_op", "aten::copy_", o + 20, 3))
        launch(o + 21, o + 20.5, 1.0, "Memcpy HtoD (Pageable -> Device)", kind="gpu_memcpy",
               api="cudaMemcpyAsync")  # an upload: not a sync
        launch(o + 22, o + 24, 16)
        launch(o + 25, o + 41, 19)
        launch(o + 50, o + 90, 5, tid=BWD)  # launched from the autograd thread
        ev.append(_x("cpu_op", "aten::item", o + 57, 5))
        ev.append(_x("cpu_op", "aten::_local_scalar_dense", o + 57.5, 4))
        launch(o + 58, o + 60, 0.0, "Memcpy DtoH (Device -> Pageable)", kind="gpu_memcpy",
               api="cudaMemcpyAsync")
        ev.append(_x("cuda_runtime", "cudaStreamSynchronize", o + 58.5, 2.5))
        launch(o + 68, o + 70, 20)
    ev.append(_x("user_annotation", trace.DRAIN_RANGE, 196, 3))
    ev.append(_x("cuda_runtime", "cudaDeviceSynchronize", 196.5, 2))  # the harness's: left out
    ev.append({"ph": "M", "name": "process_name", "pid": PID, "tid": 0, "args": {}})
    return {"traceEvents": ev, "displayTimeUnit": "ms"}


def test_a_kineto_trace_reads_into_the_window(tmp_path):
    path = tmp_path / "trace.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump(kineto(), fh)
    w = trace.read_chrome_trace(path, ("input_wait", "forward", "loss", "backward"))
    assert len(w.steps) == 2 and w.drain_start == 196
    sites = trace.sync_sites(w)
    assert [(s.phase, s.op, s.occurrences, s.calls) for s in sites] == [
        ("loss", "aten::item > aten::_local_scalar_dense", 2, 4)]  # a copy and its sync, x2
    assert sites[0].blocked_ms * 1e3 == pytest.approx(2 * (1.5 + 2.5))
    att = trace.attribute(w)
    assert att.total(trace.SYNC) * 1e3 == pytest.approx(2 * 10)
    assert att.total(trace.DATA) * 1e3 == pytest.approx(2 * 20)
    # the 1 µs upload at 20.5 sits in the loader's gap: busy, and a host-to-device copy
    assert trace.h2d_outside_kernels(w) * 1e3 == pytest.approx(2.0)


# ------------------------------------------------------------------ the script's rows


class _Hit:
    def __init__(self, step, phase, frame):
        self.step, self.phase, self.frame = step, phase, frame


def _cuda_rows(tmp_path, monkeypatch, tiny_cfg, hits):
    """R02's script on this CPU with a CUDA context's instruments replaced: the step's syncs
    as ``hits`` and the profiler's window as the hand-built trace."""
    from experiments import load_script

    script = load_script("r02_step_trace")

    def window(step, *, device, sync, warmup, active, trace_path):
        for _ in range(warmup + active):
            step()
        with gzip.open(trace_path, "wt") as fh:
            json.dump(kineto(active), fh)
        return trace_path

    monkeypatch.setattr(script.profiling, "profile_window", window)
    monkeypatch.setattr(script.syncs, "located", lambda step, n: hits * n)

    def measure(ctx):
        ctx.is_cuda = True
        script.measure(ctx)

    _, out = run_tiny(tiny_cfg, "R02", tmp_path, measure=measure,
                      extra={"trace": str(tmp_path / "trace.json.gz")},
                      patch=lambda c: c["params"].update(active=2))
    return io.read_results([out["csv"]])


def test_the_scripts_cuda_rows_locate_the_sync(tmp_path, monkeypatch, tiny_cfg):
    frame = "mypkg/losses.py:31 in loss_fn: if torch.isnan(loss).item():"
    rows = _cuda_rows(tmp_path, monkeypatch, tiny_cfg, [_Hit(0, "loss", frame)])
    assert (rows.status == "ok").all(), rows[rows.status != "ok"][["variant", "reason"]]

    def one(variant, metric, statistic="value"):
        sel = rows[(rows.variant == variant) & (rows.metric == metric)
                   & (rows.statistic == statistic)]
        assert len(sel) == 1, (variant, metric, statistic)
        return float(sel.value.iloc[0])

    assert one(r02.SYNCS, r02.SYNCS_PER_STEP) == 1
    assert one(r02.SYNCS, r02.SYNC_WARNINGS_PER_STEP) == 1
    assert one(r02.idle_variant("sync"), r02.IDLE_TIME, "mean") == pytest.approx(0.010)
    assert one(r02.idle_variant("sync"), r02.WINDOW_SHARE) == pytest.approx(100 * 20 / 196)
    assert one(r02.phase_variant("loss", "sync"), r02.IDLE_TIME, "mean") == \
        pytest.approx(0.010)
    # at most what removing the sync could save: min(blocked 4 µs, idle after it) per step
    assert one(r02.SYNC_COST_BOUND, r02.IDLE_TIME, "mean") == pytest.approx(0.004)
    # and as % of the step timed free-running without the profiler: the bound, capped by
    # that step's room for idle time (free - busy)
    free = one(r02.FREE_RUNNING, r02.STEP_TIME, "median")
    busy = one(r02.BUSY, r02.DEVICE_TIME, "mean")
    assert free > 0 and one(r02.SYNC_COST_BOUND, r02.FREE_STEP_SHARE) == pytest.approx(
        100 * min(0.004, max(0.0, free - busy)) / free)
    (site,) = r02.sync_sites(rows)
    assert (site.phase, site.op, site.frame) == (
        "loss", "aten::item > aten::_local_scalar_dense", frame)
    assert site.syncs_per_step == 1 and site.blocked_ms == pytest.approx(0.004)
    assert site.idle_ms == pytest.approx(0.010)
    assert "loss_fn" in site.where and "aten::item" in site.where
    table = r02.table(rows)
    assert any("sync site" in m for m in table.measurement)
    _draws(tmp_path, rows)


def _draws(tmp_path, rows):
    """R02's figure and caption from these rows (the shipped runs predate R02)."""
    from perflab.experiments import make_figure

    csv = tmp_path / "figure_rows.csv"
    io.write_results(csv, rows.to_dict("records"))
    png = make_figure("R02", csv, None, tmp_path / "r02.png")
    assert png.stat().st_size > 1000


def test_the_cpu_path_says_there_is_no_device_queue(pipeline_run, tiny_cfg, tmp_path):
    """R02 as the shared pipeline run ran it on this CPU (tests/shared_run.py)."""
    rows, _, _, out = pipeline_results(pipeline_run, tiny_cfg, "R02")
    trace_path = Path(out["trace"])
    bad = rows[rows.status != "ok"]
    assert {r02.SYNCS_PER_STEP, r02.IDLE_TIME, r02.DEVICE_TIME} <= set(bad.metric)
    assert (bad.status == "unsupported").all() and (bad.reason == r02.NO_QUEUE).all()
    ok = rows[rows.status == "ok"]
    steps = ok[(ok.variant == r02.WINDOW) & (ok.metric == r02.STEPS)].value
    assert list(steps) == [tiny_cfg["experiments"]["R02"]["active"]]
    assert (ok[ok.metric == r02.OWN_LOADER].value == 0).all()
    assert trace_path.stat().st_size > 0  # the window's trace, for Perfetto
    assert r02.sync_sites(rows) == []
    assert "no device queue" in " ".join(r02.table(rows).note)
    _draws(tmp_path, rows)


def test_frames_are_handed_to_the_sites_in_order_until_each_count_is_met():
    """Two lines select by mask (one operator site, 4 syncs a step) and one checks NaN."""
    from experiments import load_script

    frames = load_script("r02_step_trace")._frames
    hits = [_Hit(0, "loss", f) for f in ("rows", "labels", "rows", "labels", "nan")]
    mask = trace.SyncSite("loss", "aten::index > aten::nonzero", 4, 8, 1.0)
    nan = trace.SyncSite("loss", "aten::is_nonzero > aten::_local_scalar_dense", 1, 2, 0.5)
    assert frames(hits, 1, [mask, nan], 1) == {mask.site: "rows; labels", nan.site: "nan"}
    # counts that do not add up: every frame of the phase is named for each of its sites
    assert frames(hits[:4], 1, [mask, nan], 1) == {mask.site: "rows; labels",
                                                    nan.site: "rows; labels"}
