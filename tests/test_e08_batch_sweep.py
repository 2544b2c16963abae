"""E08 batch sweep: per-batch jobs through the harness, then the aggregation, on the tiny contract.

Each batch size runs through ``perflab.runner.execute`` exactly as its
Snakemake job does (here in the test's process, not a fresh one: these tests
check the contract and the answers, not the peaks). No test asserts an
absolute time; the answers are recomputed from the rows and compared.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from experiments import load_script

from perflab import config, io, sweep, tables, timing
from perflab.experiments.e08_batch_sweep import FREE_RUNNING_STEP
from perflab.runner import execute

REPO_ROOT = Path(__file__).resolve().parents[1]
TEST_CONFIG = REPO_ROOT / "config" / "test.yaml"
SCRIPT = REPO_ROOT / "scripts" / "e08_batch_sweep.py"


@pytest.fixture(scope="module")
def e08():
    return load_script("e08_batch_sweep")


@pytest.fixture(scope="module")
def contract(tiny_cfg) -> dict:
    return config.contract(tiny_cfg, "E08")


def outputs(root) -> dict[str, str]:
    return {"csv": str(root / "e08.csv"), "samples": str(root / "e08_samples.csv"),
            "provenance": str(root / "e08.json")}


def run_sweep(e08, contract, root) -> pd.DataFrame:
    """Every batch size through the harness, then the aggregation; the aggregated rows."""
    for b in sweep.batches(contract):
        execute("E08", e08.measure, sweep.batch_contract(contract, b),
                sweep.batch_outputs(root, b))
    files = sweep.batch_files_for(root, sweep.batches(contract))
    sweep.aggregate(files, contract, outputs(root))
    return io.read_results([outputs(root)["csv"]])


def oom_for(e08, monkeypatch, failing: set[int]) -> None:
    """Make the step of each batch size in ``failing`` raise CUDA's out-of-memory error."""
    real = e08.build_step

    def build_step(ctx, batch):
        step = real(ctx, batch)
        if batch not in failing:
            return step

        def oom():
            raise torch.cuda.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate 64.00 GiB (simulated at batch {batch})")

        return oom

    monkeypatch.setattr(e08, "build_step", build_step)


def step_rows(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows.variant.str.startswith("batch_")]


def expected_answers(rows: pd.DataFrame) -> dict[str, int | None]:
    """The three answers recomputed here from the per-batch rows."""
    r = step_rows(rows)
    batch = r.variant.str.removeprefix("batch_").astype(int)
    ok = r[(r.metric == "step_latency") & (r.statistic == "median") & (r.status == "ok")]
    medians = dict(zip(batch[ok.index], ok.value))
    tp = r[(r.metric == "throughput") & (r.status == "ok")]
    throughput = dict(zip(batch[tp.index], tp.value))
    return {
        "lowest_latency": min(medians, key=medians.get) if medians else None,
        "highest_throughput": max(throughput, key=throughput.get) if throughput else None,
        "largest_that_fits": max(medians) if medians else None,
    }


def answer(rows: pd.DataFrame, name: str) -> pd.Series:
    sel = rows[rows.variant == name]
    assert len(sel) == 1, f"one {name} row expected, got {len(sel)}"
    return sel.iloc[0]


@pytest.fixture(scope="module")
def swept(e08, contract, tmp_path_factory):
    root = tmp_path_factory.mktemp("e08")
    return root, run_sweep(e08, contract, root)


def test_batch_contract_replaces_the_list_with_one_batch(contract):
    c = sweep.batch_contract(contract, 8)
    assert c["params"]["batch"] == 8 and "batches" not in c["params"]
    assert c["params"]["repeats"] == contract["params"]["repeats"]
    assert {k: v for k, v in c.items() if k != "params"} == \
        {k: v for k, v in contract.items() if k != "params"}
    assert "batches" in contract["params"]  # the experiment's own contract is untouched
    assert sweep.batches({"params": {"batches": [8, 4, 8]}}) == [4, 8]


def test_rows_obey_the_contract_one_set_per_batch(swept, contract):
    root, rows = swept
    assert set(rows.experiment) == {"E08"}
    sizes = sweep.batches(contract)
    assert sizes == [4, 8]
    r = step_rows(rows)
    assert list(dict.fromkeys(r.variant)) == [f"batch_{b}" for b in sizes]
    for b in sizes:
        mine = r[r.variant == f"batch_{b}"]
        ok = mine[mine.status == "ok"]
        assert {"step_latency", "throughput", "latency_per_example", "peak_rss"} <= set(ok.metric)
        assert len(ok[(ok.metric == "step_latency") & (ok.statistic == "median")]) == 1
        assert (ok[ok.metric == "step_latency"].n == contract["params"]["repeats"]).all()
        assert set(mine.input_shape) == {f"[{b}, 64]"}  # the batch size reached the workload
        # the CPU has no allocator counters: said so, with the reason, not invented
        cuda_only = mine[mine.metric.isin(["peak_allocated", "peak_reserved"])]
        assert set(cuda_only.status) == {"unsupported"} and cuda_only.value.isna().all()
        assert "VmHWM" in mine[mine.metric == "peak_rss"].window.iloc[0]
        # derived columns follow from the median (ratios only, no absolute time)
        med = ok[(ok.metric == "step_latency") & (ok.statistic == "median")].value.iloc[0]
        tp = ok[ok.metric == "throughput"]
        per = ok[ok.metric == "latency_per_example"].value.iloc[0]
        free = ok[ok.metric == FREE_RUNNING_STEP].value.iloc[0]
        # throughput is the free-running rate, not the batch over the drained latency
        assert tp.value.iloc[0] == pytest.approx(b / free * 1e3)
        assert tp.sync_boundary.iloc[0] == timing.FREE_RUNNING_THROUGHPUT
        assert per == pytest.approx(med / b)
        # each per-batch file holds only its own batch size
        own = io.read_results([sweep.batch_outputs(root, b)["csv"]])
        assert set(own.variant) == {f"batch_{b}"}
    samples = pd.read_csv(outputs(root)["samples"])
    assert list(samples.columns) == io.SAMPLE_COLUMNS
    counts = samples.groupby("variant").size().to_dict()
    assert counts == {f"batch_{b}": contract["params"]["repeats"] for b in sizes}


def test_answers_are_consistent_with_the_rows(swept):
    _, rows = swept
    want = expected_answers(rows)
    for name, batch in want.items():
        row = answer(rows, name)
        assert row.status == "ok" and row.metric == "batch_size"
        assert int(row.value) == batch, name
    assert want["largest_that_fits"] == 8


def test_provenance_carries_each_batch(swept, contract):
    root, _ = swept
    prov = json.loads(Path(outputs(root)["provenance"]).read_text())
    for key in ("environment", "contract", "started", "finished", "workloads", "batches"):
        assert key in prov
    assert prov["contract"]["params"]["batches"] == contract["params"]["batches"]
    assert set(prov["batches"]) == {"4", "8"}
    for b, p in prov["batches"].items():
        assert p["contract"]["params"]["batch"] == int(b)
        assert p["environment"]["torch"] == prov["environment"]["torch"]
        built = next(iter(p["workloads"].values()))
        assert built["batch_size"] == int(b)
    assert prov["answers"]["largest_that_fits"] == 8


def test_oom_becomes_a_row_and_is_not_a_fit(e08, contract, tmp_path, monkeypatch):
    oom_for(e08, monkeypatch, {8})
    rows = run_sweep(e08, contract, tmp_path)  # read_results validates every row
    b8 = rows[rows.variant == "batch_8"]
    assert set(b8.status) == {"oom"}
    assert b8.value.isna().all()
    assert b8.reason.str.contains("OutOfMemoryError").all()
    assert b8.reason.str.contains("warmup").all()  # where it failed
    assert (rows[rows.variant == "batch_4"].status == "ok").any()
    want = expected_answers(rows)
    assert want == {"lowest_latency": 4, "highest_throughput": 4, "largest_that_fits": 4}
    for name, batch in want.items():
        assert int(answer(rows, name).value) == batch
    samples = pd.read_csv(tmp_path / "e08_samples.csv")
    assert set(samples.variant) == {"batch_4"}
    # the table shows the status where the numbers would be, with the reason
    t = tables.table("E08", rows)
    b8_row = t[t.batch == 8].iloc[0]
    assert b8_row.median_ms == "oom" and "OutOfMemoryError" in b8_row.note
    fits = t[t.answer == "largest batch that fits"].iloc[0]
    assert fits.batch == 4


def test_no_batch_fits_answers_say_oom(e08, contract, tmp_path, monkeypatch):
    oom_for(e08, monkeypatch, {4, 8})
    rows = run_sweep(e08, contract, tmp_path)
    for name in sweep.ANSWERS:
        row = answer(rows, name)
        assert row.status == "oom" and pd.isna(row.value)
        assert "batch 4: oom" in row.reason and "batch 8: oom" in row.reason


def test_aggregate_refuses_a_batch_measured_under_another_contract(swept, contract, tmp_path):
    root, _ = swept
    other = copy.deepcopy(contract)
    other["params"]["repeats"] += 1
    files = sweep.batch_files_for(root, sweep.batches(contract))
    with pytest.raises(io.ContractError, match="another contract"):
        sweep.aggregate(files, other, outputs(tmp_path))
    assert not (tmp_path / "e08.csv").exists()


def test_table_and_figure(swept, tmp_path):
    root, rows = swept
    t = tables.table("E08", rows)
    assert list(t.columns[:4]) == ["batch", "median_ms", "iqr_ms", "examples_per_s"]
    assert "peak_rss_mib" in t.columns and "per_example_ms" in t.columns
    sweep_rows = t[t.answer == ""]
    assert list(sweep_rows.batch) == [4, 8]
    want = expected_answers(rows)
    for label, name in (("lowest-latency batch", "lowest_latency"),
                        ("highest-throughput batch", "highest_throughput"),
                        ("largest batch that fits", "largest_that_fits")):
        assert t[t.answer == label].batch.iloc[0] == want[name]
    tables.format_table(t)
    from perflab.figures import make_figure

    png = make_figure("E08", outputs(root)["csv"], outputs(root)["samples"], tmp_path / "e08.png")
    assert png.stat().st_size > 1000


def test_standalone_help():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "--batch" in proc.stdout and "fresh subprocess" in proc.stdout


def test_standalone_sweep_runs_a_process_per_batch(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--configfile", str(TEST_CONFIG), "--device", "cpu",
         "--outdir", str(tmp_path)],
        capture_output=True, text=True, timeout=600, cwd=REPO_ROOT, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (tag,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    rows = io.read_results([tag / "e08_batch_sweep.csv"])
    assert set(step_rows(rows).variant) == {"batch_4", "batch_8"}
    prov = json.loads((tag / "e08_batch_sweep.json").read_text())
    # one process per batch size: each was started with its own --batch
    for b, p in prov["batches"].items():
        argv = p["argv"]
        assert argv[argv.index("--batch") + 1] == b
        assert p["contract"]["params"]["batch"] == int(b)
