"""The pipeline benchmark (perflab bench-pipeline): its arithmetic on a fake run, then the
shared run's own log and provenance. No time is asserted, only how the parts add up."""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path

import pytest
from shared_run import first_log, results_dir

from perflab import cli
from perflab.experiments.e08_batch_sweep.sweep import combines_jobs
from perflab.views import bench_pipeline as bench

LOG_NAME = "2026-01-05T100000.000000.snakemake.log"
T0 = dt.datetime(2026, 1, 5, 10, 0, 0)

#: (rule, start s, end s, outputs, wall_s of its provenance or None, aggregated)
FAKE_JOBS = (
    ("c00_calibration", 2, 12, ["results/t/c00.csv", "results/t/c00.json"], 8.0, False),
    ("e08_batch", 12, 15, ["results/t/e08/b4.json"], 2.0, False),
    ("e08_batch_sweep", 15, 16, ["results/t/e08.csv", "results/t/e08.json"], 2.0, True),
    ("figure", 16, 20, ["figures/t/c00.png"], None, False),
    ("report_html", 20, 30, ["results/t/report.html"], None, False),
    ("ledger", 30, 31, ["results/t/ledger.md"], None, False),
    ("all", 31, 31, [], None, False),
)
WALL_S = 33.0


def _stamp(seconds: float) -> str:
    """A log stamp as Snakemake writes it: ``[Mon Jan  5 10:00:02 2026]``."""
    return f"[{(T0 + dt.timedelta(seconds=seconds)).ctime()}]"


def fake_run(work: Path, elapsed: bool = True) -> Path:
    """A Snakemake log of FAKE_JOBS and the provenance JSONs they wrote."""
    lines = ["Building DAG of jobs...", "Job stats:", "job  count", "---  -----"]
    for i, (rule, start, end, outputs, wall, aggregated) in enumerate(FAKE_JOBS, 1):
        lines += [_stamp(start), f"localrule {rule}:"]
        if outputs:
            lines.append("    output: " + ", ".join(outputs))
        lines += [f"    jobid: {i}", "    resources: tmpdir=/x, mem_mb=4000",
                  _stamp(end), f"Finished jobid: {i} (Rule: {rule})", f"{i} of 7 steps done"]
        for out in outputs:
            p = work / out
            p.parent.mkdir(parents=True, exist_ok=True)
            if out.endswith(".json"):
                prov = {"experiment": "X", "wall_s": wall}
                if aggregated:
                    # as perflab.experiments.e08_batch_sweep.sweep.combined_provenance writes an aggregation's
                    prov.update(batches={"4": {"wall_s": wall}},
                                environment_differs_across_batches=[])
                p.write_text(json.dumps(prov))
            else:
                p.write_text("x")
    if elapsed:
        lines.append(f"Elapsed time: 0:00:{WALL_S:09.6f}")
    log = work / ".snakemake" / "log" / LOG_NAME
    log.parent.mkdir(parents=True)
    log.write_text("\n".join(lines) + "\n")
    return log


def write_metadata(work: Path, shift_s: float = 0.25) -> None:
    """Snakemake's metadata for every output: each job starts and ends ``shift_s`` later."""
    d = work / ".snakemake" / "metadata"
    d.mkdir(parents=True)
    t0 = T0.timestamp()
    for rule, start, end, outputs, *_ in FAKE_JOBS:
        for out in outputs:
            key = base64.urlsafe_b64encode(out.encode()).decode()
            (d / key).write_text(json.dumps({"rule": rule, "starttime": t0 + start + shift_s,
                                             "endtime": t0 + end + 2 * shift_s}))


def test_breakdown_adds_up(tmp_path):
    fake_run(tmp_path)
    b = bench.breakdown(tmp_path)
    assert b.timed_by == "log"
    assert b.wall_s == WALL_S
    assert "all" not in {j.rule for j in b.jobs}
    # measurement: C00's 8 s and the batch job's 2 s; the sweep's sum is not counted again
    assert b.measurement_s == pytest.approx(10.0)
    over = b.overhead_s()
    assert over == pytest.approx({"process floor": (10 - 8) + (3 - 2), "figures": 4.0,
                                  "report": 10.0, "other jobs": 1.0 + 1.0,
                                  "scheduling and gaps": WALL_S - 29.0})
    assert sum(over.values()) == pytest.approx(b.wall_s - b.measurement_s)
    assert b.overhead_share == pytest.approx(23 / 33)
    text = bench.format_breakdown(b)
    assert "overhead share: 69.7 %" in text and "2 experiment jobs" in text
    rows = bench.jobs_table(b)
    assert [r["kind"] for r in rows] == ["experiment", "experiment", "other jobs", "figures",
                                        "report", "other jobs"]


def test_metadata_times_replace_the_log_stamps(tmp_path):
    fake_run(tmp_path)
    write_metadata(tmp_path, shift_s=0.25)
    b = bench.breakdown(tmp_path)
    assert b.timed_by == "metadata"
    c00 = next(j for j in b.jobs if j.rule == "c00_calibration")
    assert (c00.start_s, c00.end_s) == pytest.approx((2.25, 12.5))
    assert b.overhead_s()["process floor"] == pytest.approx((10.25 - 8) + (3.25 - 2))


def test_metadata_of_another_invocation_is_not_used(tmp_path):
    # a record far from the log's stamps (a later run rewrote it, or another clock): the log
    fake_run(tmp_path)
    write_metadata(tmp_path, shift_s=3600)
    assert bench.breakdown(tmp_path).timed_by == "log"


def test_without_elapsed_the_wall_ends_at_the_last_stamp(tmp_path):
    fake_run(tmp_path, elapsed=False)
    assert bench.breakdown(tmp_path).wall_s == 31.0


def test_command_line(tmp_path, capsys):
    fake_run(tmp_path)
    csv = tmp_path / "jobs.csv"
    assert cli.main(["bench-pipeline", "--directory", str(tmp_path), "--jobs-csv", str(csv)]) == 0
    out = capsys.readouterr().out
    assert "measurement (sum of wall_s)" in out and "scheduling and gaps" in out
    assert csv.read_text().splitlines()[0] == "jobid,rule,kind,start_s,duration_s,measured_s"
    with pytest.raises(SystemExit, match="no Snakemake log"):
        cli.main(["bench-pipeline", "--directory", str(tmp_path / "nowhere")])


def test_the_shared_run(pipeline_run):
    """The shared run: every experiment job is found and its provenance's wall_s counted."""
    b = bench.breakdown(pipeline_run, first_log(pipeline_run))
    provs = [json.loads(p.read_text()) for p in results_dir(pipeline_run).rglob("*.json")]
    walls = [p["wall_s"] for p in provs if isinstance(p, dict) and "wall_s" in p
             and not combines_jobs(p)]
    assert b.measurement_s == pytest.approx(sum(walls))
    assert len([j for j in b.jobs if j.measured_s is not None]) == len(walls)
    assert any(j.kind == "figures" for j in b.jobs) and any(j.kind == "report" for j in b.jobs)
    over = b.overhead_s()
    assert sum(over.values()) == pytest.approx(b.wall_s - b.measurement_s)
    assert over["process floor"] > 0  # every job pays an interpreter and its imports
    assert 0 < b.overhead_share < 1
    # the jobs ran one after another (--cores 1), inside the invocation's wall
    spans = sorted((j.start_s, j.end_s) for j in b.jobs)
    assert all(a_end <= b_start + 1e-3 for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    assert spans[0][0] >= 0 and spans[-1][1] <= b.wall_s + 1
