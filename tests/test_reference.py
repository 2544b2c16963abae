"""The chapter's reference rows, the side-by-side join, and shipped reference runs."""

from __future__ import annotations

import json

import numpy as np
import pytest

from perflab import experiments
from perflab.core import io
from perflab.experiments.catalogue import EXPERIMENTS
from perflab.views import compare, reference

#: experiments of the chapter that publish at least one number (E21, E22, E24 are the
#: article's, which publishes none)
PUBLISHED = {f"E{i:02d}" for i in range(1, 21)} | {"E23", "E25"}


@pytest.fixture(scope="module")
def chapter():
    return reference.load_chapter()


def test_chapter_rows_obey_the_contract(chapter):
    io.validate_rows(chapter.rows)  # load_chapter validated already; say it here too
    assert list(chapter.rows.columns) == io.COLUMNS
    assert set(chapter.rows.experiment) == PUBLISHED
    assert set(chapter.rows.device) == {"cuda"}
    assert set(chapter.rows.device_name) == {"NVIDIA GeForce RTX 2060"}
    env = chapter.meta["environment"]
    assert (env["compute_capability"], env["gpu_memory_mib"]) == ("7.5", 12288)
    assert env["torch"].startswith("2.6") and env["cuda_runtime"] == "11.8"
    # one row per measured quantity: the join key is unique
    assert not chapter.rows.duplicated(reference.KEYS).any()


def test_chapter_rows_use_the_names_the_experiments_write(chapter):
    """Spot checks against the names in scripts/ (a renamed metric would silently stop the join)."""
    r = chapter.rows
    for eid, variant, metric, statistic, value in (
        ("E01", "naive_loop_20", "reported_ms_per_step", "value", 9.491),
        ("E03", "spread", "step_latency", "tail_count", 21),
        ("E05", "sync/optimizer", "phase_share", "value", 51.3),
        ("E07", "fused_vs_foreach", "max_abs_diff", "value", 3.7e-9),
        ("E08", "batch_2048", "throughput", "median", 30993),
        ("E13", "controlled/tax", "tax", "value", 0.432),
        ("E14", "profiler_overhead", "overhead_rel", "value", 58.0),
        ("E25", "adamw_fused", "step_latency", "median", 14.4),
    ):
        sel = r[(r.experiment == eid) & (r.variant == variant) & (r.metric == metric)
                & (r.statistic == statistic)]
        assert len(sel) == 1 and sel.value.iloc[0] == pytest.approx(value), (eid, variant)
    oom = r[(r.experiment == "E18") & (r.variant == "T4096/manual")]
    assert set(oom.status) == {"oom"} and oom.value.isna().all()


def machine_rows(device: str, device_name: str, model: str, shape: str, value: float):
    return io.rows_to_frame([{
        "experiment": "E01", "variant": "synchronized_warmed", "workload": "mlp", "model": model,
        "input_shape": shape, "dtype": "float32", "device": device, "device_name": device_name,
        "mode": "train", "execution": "eager", "metric": "step_latency", "window": "w",
        "sync_boundary": "s", "statistic": "median", "value": value, "unit": "ms", "n": 400,
        "status": "ok", "reason": ""}])


def test_ratio_only_where_the_contract_matches(chapter):
    h200 = machine_rows("cuda", "NVIDIA H200", "MLP dim1536 depth12", "[256, 1536]", 4.108)
    side = reference.side_by_side(h200, "E01", chapter)
    line = side[(side.variant == "synchronized_warmed") & (side.statistic == "median")].iloc[0]
    assert line["this machine"] == pytest.approx(4.108)
    assert line["chapter"] == pytest.approx(16.430)
    assert line["ratio to chapter"] == pytest.approx(4.108 / 16.430)
    assert "other device (NVIDIA H200 vs NVIDIA GeForce RTX 2060)" in line["comparison"]

    cpu = machine_rows("cpu", "Intel", "MLP dim512 depth6", "[64, 512]", 18.0)
    line = reference.side_by_side(cpu, "E01", chapter).query("variant == 'synchronized_warmed'").iloc[0]
    assert line["ratio to chapter"] == ""
    assert line["comparison"].startswith("scaled CPU contract")
    assert "MLP dim512 depth6 vs MLP dim1536 depth12" in line["comparison"]
    # a quantity this run did not measure is said to be not run, never blank
    assert (reference.side_by_side(cpu, "E01", chapter).query("variant == 'first_step'")
            ["this machine"] == "not run").all()


def fake_results(d, value: float):
    """A result directory with one experiment's rows and provenance (tests only; never shipped)."""
    d.mkdir(parents=True)
    frame = machine_rows("cpu", "Intel", "MLP dim512 depth6", "[64, 512]", value)
    io.write_results(d / "e01_lying_benchmark.csv", frame.to_dict("records"))
    io.write_samples(d / "e01_lying_benchmark_samples.csv", [])
    io.write_samples(d / "e02_four_questions_samples.csv", [])  # no claim reads these
    io.atomic_write_json(d / "e01_lying_benchmark.json", {
        "experiment": "E01", "contract": {"device": "cpu", "scale": "cpu"},
        "environment": {"git_commit": "abc123", "device_name": "Intel"},
        "started": "2026-01-01T00:00:00+00:00", "finished": "2026-01-01T00:01:00+00:00"})
    experiments.evaluate_claims(io.read_results([d / "e01_lying_benchmark.csv"])).to_csv(
        d / "claims.csv", index=False)
    (d / "ledger.md").write_text("```\nPERFORMANCE LEDGER\n```\n")
    return d


def test_ship_then_load_a_reference_run(tmp_path, chapter):
    results = fake_results(tmp_path / "results" / "cpu-2c", 18.0)
    root = tmp_path / "reference"
    reference.ship(results, root / "cpu-2c")
    shipped = root / "cpu-2c"
    assert (shipped / "results" / "e01_lying_benchmark.csv").is_file()
    # E01's claims judge ratios by their own interval over its samples: those travel;
    # samples no claim reads stay behind (size)
    assert (shipped / "results" / "e01_lying_benchmark_samples.csv").is_file()
    assert not (shipped / "results" / "e02_four_questions_samples.csv").exists()
    meta = json.loads((shipped / "run.json").read_text())
    assert (meta["commit"], meta["device"], meta["experiments"]) == ("abc123", "cpu", ["E01"])

    runs = reference.load_runs(root)
    assert [r.name for r in runs] == ["cpu-2c"]
    assert runs[0].claims is not None and "PERFORMANCE LEDGER" in runs[0].ledger_md

    # this machine beside the chapter and the shipped run
    mine = machine_rows("cpu", "Intel", "MLP dim512 depth6", "[64, 512]", 20.0)
    side = reference.side_by_side(mine, "E01", chapter, runs)
    line = side.query("variant == 'synchronized_warmed' and statistic == 'median'").iloc[0]
    assert (line["this machine"], line["cpu-2c"]) == (20.0, 18.0)
    # same CPU contract as the shipped run: a ratio to it; none to the chapter's GPU sizes
    assert line["ratio to cpu-2c"] == pytest.approx(20.0 / 18.0)
    assert line["ratio to chapter"] == ""
    other = machine_rows("cpu", "Intel", "MLP dim64 depth2", "[16, 64]", 20.0)
    line = reference.side_by_side(other, "E01", chapter, runs).query(
        "variant == 'synchronized_warmed' and statistic == 'median'").iloc[0]
    assert line["ratio to cpu-2c"] == ""


def test_ship_keeps_calibration_and_roofline_and_compare_reads_the_shipped_run(tmp_path):
    """Every catalogued experiment's CSV ships (C00 and R01 too), and the samples its claims
    read; other CSVs do not."""
    results = fake_results(tmp_path / "results" / "cpu-2c", 18.0)
    for slug, eid in (("c00_calibration", "C00"), ("r01_roofline", "R01")):
        frame = machine_rows("cpu", "Intel", "MLP dim512 depth6", "[64, 512]", 1.0)
        frame["experiment"] = eid
        io.write_results(results / f"{slug}.csv", frame.to_dict("records"))
    (results / "diagnosis.csv").write_text("verdict\nx\n")
    shipped = reference.ship(results, tmp_path / "reference" / "cpu-2c")
    assert sorted(p.name for p in (shipped / "results").glob("*.csv")) == [
        "c00_calibration.csv", "e01_lying_benchmark.csv", "e01_lying_benchmark_samples.csv",
        "r01_roofline.csv"]
    assert set(reference.load_run(shipped).rows.experiment) == {"C00", "E01", "R01"}

    # `compare_to` may name the shipped run itself: CSVs under results/, claims beside them
    out = compare.compare(results, shipped, tmp_path / "cmp")
    assert set(out["rows"].experiment) == {"C00", "E01", "R01"}
    assert np.allclose(out["rows"].ratio.dropna(), 1.0)
    claimed = out["verdicts"][out["verdicts"].source == "claim"]
    assert len(claimed) and not claimed.changed.any()


def test_ship_refuses_an_empty_directory(tmp_path):
    with pytest.raises(FileNotFoundError):
        reference.ship(tmp_path, tmp_path / "out")


def test_no_reference_run_is_committed_without_its_provenance():
    """Every shipped run carries run.json with a commit and its result CSVs."""
    for run in reference.load_runs():
        assert run.meta.get("commit"), run.name
        assert not run.rows.empty, run.name
        # a full run ships its calibration (the floors its tables sit above) and roofline
        if len(set(run.rows.experiment)) > 20:
            assert {"C00", "R01"} <= set(run.rows.experiment), run.name


def test_every_experiment_has_a_chapter_section():
    for eid in list(EXPERIMENTS) + sorted(PUBLISHED):
        assert not reference.section(eid).startswith("Other"), eid
    order = list(EXPERIMENTS)
    # the calibration comes first (it runs first), then the chapter in its order
    assert order[:2] == ["C00", "E01"] and order.index("E09") > order.index("E08")
