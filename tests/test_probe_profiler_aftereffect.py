"""The profiler after-effect probe (scripts/probe_profiler_aftereffect.py): its block plan
and its rows, on the CPU (the effect itself is the H200's, measured in ARTIFACT.md)."""

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "probe_profiler_aftereffect.py"


def _probe():
    spec = importlib.util.spec_from_file_location("probe_profiler_aftereffect", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_blocks_before_then_after_each_session_in_time_order(monkeypatch):
    monkeypatch.setenv("TEARDOWN_CUPTI", "1")
    rows = _probe().probe("cpu", batch=2, calls=2, before=2, after=1, sessions=2, warmup=1)
    assert rows.block.tolist() == [0, 1, 2, 3]
    assert rows.sessions_ended.tolist() == [0, 0, 1, 2]
    assert (rows.value > 0).all() and set(rows.unit) == {"ms"}
    assert set(rows.teardown_cupti) == {"1"} and set(rows.calls_per_block) == {2}


def test_a_block_plan_without_calls_is_refused():
    with pytest.raises(SystemExit):
        _probe().main(["--calls", "0", "--device", "cpu"])
