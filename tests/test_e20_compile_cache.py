"""E20 (compile cache): cold and warm, each a fresh process, sharing one cache directory.

Run by hand (the script's command line starts the two phases as subprocesses),
so the warm process really is a new process that can only reuse the on-disk cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from experiments import one_value

from perflab import compiling, figures, io, tables

ROOT = Path(__file__).resolve().parents[1]
TAG = "e20-test"


@pytest.fixture(scope="module")
def e20(tmp_path_factory):
    out = tmp_path_factory.mktemp("e20")
    cfg = out / "tag.yaml"
    cfg.write_text(f"tag: {TAG}\n")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "e20_compile_cache.py"),
         "--configfile", str(ROOT / "config" / "test.yaml"), "--configfile", str(cfg),
         "--device", "cpu", "--outdir", str(out)],
        capture_output=True, text=True, timeout=900, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-4000:]
    d = out / TAG
    csv, samples = d / "e20_compile_cache.csv", d / "e20_compile_cache_samples.csv"
    return io.read_results([csv]), pd.read_csv(samples), d, {"csv": csv, "samples": samples}


def test_outputs_hold_both_phases(e20):
    rows, samples, d, _ = e20
    assert (rows.status == "ok").all(), rows[rows.status != "ok"].reason.tolist()
    assert (rows.experiment == "E20").all()
    for phase in ("cold", "warm"):
        assert ((rows.variant == f"{phase}/compiled") & (rows.metric == "first_call")).any()
        assert (samples.variant == f"{phase}/compiled").any()
    assert Path(compiling.e20_cold_outputs(d)["csv"]).is_file()


def test_warm_first_call_faster_than_cold(e20):
    rows, *_ = e20
    cold = one_value(rows, "cold/compiled", "first_call")
    warm = one_value(rows, "warm/compiled", "first_call")
    assert warm < cold
    assert one_value(rows, "warm_vs_cold", "first_call_ratio") == pytest.approx(warm / cold)


def test_the_cache_was_wiped_then_reused(e20):
    rows, _, d, _ = e20
    assert one_value(rows, "cold/cache", "cache_files_before") == 0
    assert one_value(rows, "cold/compiled", "inductor/fxgraph_cache_miss") >= 1
    assert one_value(rows, "warm/cache", "cache_files_before") > 0
    assert one_value(rows, "warm/compiled", "inductor/fxgraph_cache_hit") >= 1
    assert one_value(rows, "warm/compiled", "inductor/fxgraph_cache_miss") == 0
    assert Path(compiling.e20_cache_dir(d)).is_dir()


def test_break_even_and_correctness(e20):
    rows, *_ = e20
    for phase in ("cold", "warm"):
        v = f"{phase}/compiled_vs_eager"
        assert 0 <= one_value(rows, v, "max_abs_diff") < 1e-4
        sel = rows[(rows.variant == v) & (rows.metric == "break_even_calls")]
        assert len(sel) == 1
        expected = compiling.break_even_calls(
            one_value(rows, f"{phase}/compiled", "first_call") * 1e3,
            one_value(rows, f"{phase}/compiled", "forward_latency", "median"),
            one_value(rows, f"{phase}/eager", "forward_latency", "median"))
        if expected is None:
            assert sel.status.iloc[0] == "unsupported"
        else:
            assert float(sel.value.iloc[0]) == expected


def test_break_even_formula():
    assert compiling.break_even_calls(1000.0, 1.0, 2.0) == 999
    assert compiling.break_even_calls(0.5, 1.0, 2.0) == 1
    assert compiling.break_even_calls(1000.0, 2.0, 2.0) is None


def test_table_and_figure(e20, tmp_path):
    rows, _, _, out = e20
    t = tables.table("E20", rows)
    assert t.cache.tolist() == ["cold", "warm", "warm vs cold"]
    assert t.first_call_ratio.iloc[2] == pytest.approx(
        one_value(rows, "warm_vs_cold", "first_call_ratio"))
    assert not tables.format_table(t).empty
    png = figures.make_figure("E20", out["csv"], out["samples"], tmp_path / "e20.png")
    assert png.stat().st_size > 0
