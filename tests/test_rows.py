"""The one row lookup: what a missing number says, in the Missing and the raising form."""

from __future__ import annotations

import pytest

from perflab.core import io
from perflab.core.rows import NOT_RECORDED, NOT_RUN, Absent, Missing, Rows, Unmeasured, pick


def _row(eid, variant, metric, statistic, value, status="ok", reason=""):
    return {"experiment": eid, "variant": variant, "workload": "mlp", "dtype": "float32",
            "device": "cpu", "mode": "train", "execution": "eager", "metric": metric,
            "window": "w", "sync_boundary": "s", "statistic": statistic, "value": value,
            "unit": "ms", "n": 10, "status": status, "reason": reason}


RUN = io.rows_to_frame([
    _row("E19", "f/eager", "forward_latency", "median", 2.0),
    _row("E19", "f/eager", "forward_latency", "iqr", 0.1),
    _row("E19", "f/compiled", "compile", "value", None, "error", "inductor failed"),
    _row("E09", "steady", "peak_allocated", "value", None, "unsupported", "no CUDA allocator"),
    _row("E09", "steady", "peak_rss", "value", 512.0),
])


def test_an_ok_row_gives_its_value_and_fields():
    r = Rows(RUN)
    assert r.pick("E19", "f/eager", "forward_latency") == 2.0
    assert r.pick("E19", "f/eager", "forward_latency", "median", field="n") == 10
    assert r.value("E19", "f/eager", "forward_latency", "iqr") == pytest.approx(0.1)
    assert r.found("E09", "steady", "peak_rss", "value")["value"] == 512.0


def test_a_row_that_did_not_measure_says_why_in_both_forms():
    r = Rows(RUN)
    # a non-ok row is found whatever statistic is asked for
    assert r.pick("E09", "steady", "peak_allocated", "max") == Missing(
        "unsupported", "no CUDA allocator")
    assert r.found("E09", "steady", "peak_allocated", "value") is None
    with pytest.raises(Unmeasured) as exc:
        r.row("E09", "steady", "peak_allocated", "value")
    assert exc.value.status == "unsupported" and exc.value.reason == "no CUDA allocator"
    assert r.maybe("E09", "steady", "peak_allocated", "value", default=-1.0) == -1.0


def test_a_failure_under_another_metric_explains_a_table_cell_not_a_claim():
    r = Rows(RUN)
    assert pick(r.of("E19"), "f/compiled", "forward_latency") == Missing("error", "inductor failed")
    with pytest.raises(Absent, match="no row E19 f/compiled forward_latency median$"):
        r.row("E19", "f/compiled", "forward_latency")


def test_absent_rows_are_not_run_or_not_recorded():
    r = Rows(RUN)
    assert r.pick("E19", "f/eager", "forward_latency", "p75") == Missing(NOT_RECORDED)
    assert r.pick("E19", "f/eager", "throughput") == Missing(NOT_RUN)
    assert r.pick("E05", "sync/forward", "phase_share", "value") == Missing(NOT_RUN)
    with pytest.raises(Absent, match=r"\(E05 not run\)"):
        r.row("E05", "sync/forward", "phase_share", "value")
    with pytest.raises(Absent, match="^E05 not run$"):
        Rows(RUN.iloc[:0]).row("E05", "sync/forward", "phase_share", "value")
    assert not r.has("E05") and r.has("E09") and r.device("E09") == "cpu"
    assert not r.is_cuda("E09")


def test_variants_by_prefix_are_the_ok_rows_only():
    r = Rows(RUN)
    assert r.variants("E19", "f/", "forward_latency") == {"f/eager": 2.0}
    assert r.variants("E05", "sync/", "phase_share", "value") == {}
