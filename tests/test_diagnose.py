"""The verdict rules on synthetic evidence: each verdict, its cited rows, its ruled-out rivals."""

from __future__ import annotations

import pandas as pd
import pytest

from perflab import diagnose, io, ledger
from perflab.experiments import e06_events_vs_wall as e06
from perflab.experiments.c00_calibration import AA_FLOOR
from perflab.vocabulary import PHASES


def _row(eid, variant, metric, value, statistic="value", device="cpu", unit="x"):
    return {
        "experiment": eid, "variant": variant, "workload": "w", "model": "m",
        "input_shape": "[1]", "dtype": "float32", "device": device, "device_name": "d",
        "mode": "train", "execution": "eager", "metric": metric, "window": "w",
        "sync_boundary": "s", "statistic": statistic, "value": value, "unit": unit, "n": 1,
        "status": "ok", "reason": "",
    }


def phases(**shares):
    """E05 phase shares (%): the given ones, the rest of 100 spread over forward/backward."""
    given = {ph: 0.5 for ph in PHASES if ph not in ("forward", "backward")}
    given.update(shares)
    rest = max(0.0, 100 - sum(v for k, v in given.items() if k not in ("forward", "backward")))
    given.setdefault("forward", rest / 3)
    given.setdefault("backward", 2 * rest / 3)
    return [_row("E05", f"sync/{ph}", "phase_share", v) for ph, v in given.items()]


def sync_tax(pct, resolved=True):
    return [_row("E13", "controlled/tax", "tax_rel", pct),
            _row("E13", "controlled/tax", "difference_resolved", float(resolved))]


def events(wall, submit, gap, device="cuda:0"):
    """E06 medians: wall clock, host submission and host-exposed (wall - device time)."""
    return [_row("E06", v, m, x, "median", device)
            for (v, m), x in ((e06.WALL, wall), (e06.SUBMISSION, submit),
                              (e06.HOST_EXPOSED, gap))]


def backlog(n, backlog_ms, real_ms, device="cuda:0"):
    return [_row("E01", f"naive_loop_{n}", "backlog_at_final_sync", backlog_ms, device=device),
            _row("E01", f"naive_loop_{n}", "real_ms_per_step", real_ms, device=device)]


def roofline(intensity, ridge, flops_pct, bw_pct, roof_pct):
    v = "phase/forward_backward"
    return [_row("R01", v, "arithmetic_intensity", intensity, "median"),
            _row("R01", "ceiling/ridge_point", "arithmetic_intensity", ridge),
            _row("R01", v, "flops_fraction", flops_pct, "median"),
            _row("R01", v, "bandwidth_fraction", bw_pct, "median"),
            _row("R01", v, "roofline_fraction", roof_pct, "median")]


def frame(*parts):
    f = pd.DataFrame([r for part in parts for r in part], columns=io.COLUMNS)
    io.validate_rows(f)  # synthetic evidence obeys the same contract as measured rows
    return f


#: a compute-bound device that is busy (CUDA evidence says the host keeps up)
BUSY = events(wall=10.0, submit=2.0, gap=0.1) + backlog(400, 80.0, 10.0)  # 8 steps queued


@pytest.mark.parametrize("evidence, verdict, cited", [
    (frame(phases(input_wait=40.0), sync_tax(1.0), BUSY, roofline(50, 20, 60, 10, 60)),
     "input_pipeline", "E05 sync/input_wait phase_share"),
    (frame(phases(), sync_tax(25.0), BUSY, roofline(50, 20, 60, 10, 60)),
     "synchronization", "E13 controlled/tax tax_rel"),
    (frame(phases(), sync_tax(1.0), events(wall=10.0, submit=9.5, gap=0.2),
           roofline(50, 20, 60, 10, 60)),
     "host_overhead", "E06 host_submission step_latency median"),
    (frame(phases(), sync_tax(1.0), backlog(400, 4.0, 10.0),  # under a step queued, no E06
           roofline(50, 20, 60, 10, 60)),
     "host_overhead", "E01 naive_loop_400 backlog_at_final_sync value"),
    # the H200 transformer block: submission as long as the step because the launch queue is
    # full (7 steps queued) — the device runs behind, so the roofline decides
    (frame(phases(), sync_tax(1.0), events(wall=13.9, submit=13.3, gap=0.06)
           + backlog(400, 92.5, 13.3), roofline(78, 12, 79, 10, 79)),
     "device_compute", "R01 phase/forward_backward arithmetic_intensity median"),
    (frame(phases(), sync_tax(1.0), roofline(50, 20, 2.0, 0.5, 2.0)),  # a CPU: no queue
     "host_overhead", "R01 phase/forward_backward roofline_fraction median"),
    (frame(phases(optimizer=51.0, forward=16.0, backward=31.0), sync_tax(1.0), BUSY,
           roofline(50, 20, 60, 10, 60)),
     "optimizer", "E05 sync/optimizer phase_share"),
    (frame(phases(), sync_tax(1.0), BUSY, roofline(50, 20, 70, 10, 70)),
     "device_compute", "R01 phase/forward_backward arithmetic_intensity median"),
    (frame(phases(), sync_tax(1.0), BUSY, roofline(4, 20, 8, 80, 40)),
     "memory_bandwidth", "R01 ceiling/ridge_point arithmetic_intensity value"),
    (frame(phases(), sync_tax(1.0)), "undetermined", None),
])
def test_each_verdict(evidence, verdict, cited):
    d = diagnose.diagnose(evidence)
    assert d.verdict == verdict, [(f.bottleneck, f.outcome, f.because) for f in d.findings]
    assert d.intervention == diagnose.INTERVENTIONS[verdict]  # near the ceiling: the default
    sources = [e.source for e in d.evidence]
    if cited is None:
        assert not sources
    else:
        assert any(s.startswith(cited) for s in sources), sources
        # every cited number is a value of the frame (or a ratio of two of them)
        assert all(e.value is not None for e in d.evidence if e.source.startswith(cited))


def test_rivals_say_why_they_were_ruled_out():
    d = diagnose.diagnose(frame(phases(optimizer=51.0, forward=16.0, backward=31.0),
                                sync_tax(3.0, resolved=False), BUSY,
                                roofline(50, 20, 60, 10, 60)))
    outcome = {f.bottleneck: f for f in d.findings}
    assert outcome["input_pipeline"].outcome == diagnose.RULED_OUT
    assert outcome["synchronization"].outcome == diagnose.RULED_OUT
    assert "inside the noise" in outcome["synchronization"].because
    assert outcome["host_overhead"].outcome == diagnose.RULED_OUT
    assert "51.0%" in outcome["optimizer"].because


def test_a_small_resolved_tax_is_not_the_verdict_nor_a_large_unresolved_one():
    for tax, resolved in ((3.0, True), (40.0, False)):
        d = diagnose.diagnose(frame(phases(), sync_tax(tax, resolved), BUSY,
                                    roofline(50, 20, 60, 10, 60)))
        assert d.verdict == "device_compute"


def test_cpu_queue_evidence_is_not_read_as_host_bound():
    # on a CPU the loop's backlog is always ~0: E01 on a CPU must not vote host-bound
    d = diagnose.diagnose(frame(phases(), sync_tax(1.0), backlog(400, 0.0, 10.0, device="cpu"),
                                roofline(50, 20, 60, 10, 60)))
    assert d.verdict == "device_compute"


def test_missing_evidence_is_said_not_invented():
    d = diagnose.diagnose(frame(phases()))
    outcome = {f.bottleneck: f.outcome for f in d.findings}
    assert outcome["synchronization"] == diagnose.NOT_MEASURED
    assert outcome["host_overhead"] == diagnose.NOT_MEASURED
    assert outcome["device_compute"] == diagnose.NOT_MEASURED
    assert d.verdict == "undetermined"


def test_outputs_cite_the_rows(tmp_path):
    evidence = frame(phases(optimizer=51.0, forward=16.0, backward=31.0), sync_tax(1.0),
                     events(wall=10.0, submit=2.0, gap=0.1), roofline(50, 20, 60, 10, 60))
    csv = tmp_path / "evidence.csv"
    io.write_results(csv, evidence.to_dict("records"))
    rows, md, d = diagnose.build([csv])
    assert d.verdict == "optimizer"
    chosen = rows[rows.verdict]
    assert set(chosen.candidate) == {"optimizer"}
    assert "E05 sync/optimizer phase_share value" in set(chosen.source)
    assert "**Verdict: optimizer**" in md and "E05 sync/optimizer phase_share value" in md
    assert diagnose.INTERVENTIONS["optimizer"] in md
    # the ledger carries the same verdict, citing the same row
    led, led_md = ledger.build([csv])
    verdict = led[(led.section == "verdict") & (led.field == "waiting_for")]
    assert verdict.value.iloc[0] == "optimizer"
    assert "E05 sync/optimizer phase_share value" in verdict.source.iloc[0]
    assert "verdict     waiting for optimizer" in led_md


def test_compute_bound_far_from_the_ceiling_points_at_utilization():
    d = diagnose.diagnose(frame(phases(), sync_tax(1.0), BUSY, roofline(50, 20, 20, 5, 20)))
    assert d.verdict == "device_compute"
    assert "utilization" in d.intervention and "20%" in d.intervention
    assert d.intervention != diagnose.INTERVENTIONS["device_compute"]


def test_a_deciding_number_near_its_threshold_is_flagged():
    """The H200 MLP twice: sync tax 9.9% (floor 8.3%) then 14.5% (floor 12.8%) sit within the
    A/A floor of the 10% threshold, so each diagnosis says another run may decide it the
    other way and names what else fits; 40% against a 5% floor is not near."""
    floor = [_row("C00", *AA_FLOOR, 8.3, unit="%")]
    host = events(wall=10.0, submit=9.5, gap=0.2)

    near = diagnose.diagnose(frame(phases(), sync_tax(9.9), host, floor))
    assert near.verdict == "host_overhead"
    sync = next(f for f in near.findings if f.bottleneck == "synchronization")
    assert "within this run's A/A floor (8.3%" in sync.borderline
    md = diagnose.render_markdown(near)
    assert "**Near a threshold**" in md and "synchronization — the tax (+9.9%)" in md
    assert diagnose.to_frame(near).query("candidate == 'synchronization'").borderline.iloc[0]

    other = diagnose.diagnose(frame(phases(), sync_tax(14.5), host,
                                    [_row("C00", *AA_FLOOR, 12.8, unit="%")]))
    assert other.verdict == "synchronization"
    assert "Also fits, later in the order: host launch & Python overhead" in \
        diagnose.render_markdown(other)

    far = diagnose.diagnose(frame(phases(), sync_tax(40.0), host,
                                  [_row("C00", *AA_FLOOR, 5.0, unit="%")]))
    assert not any(f.borderline for f in far.findings)
    assert "Near a threshold" not in diagnose.render_markdown(far)
    # without C00 nothing is flagged: no floor to judge the margin by
    assert not any(f.borderline for f in diagnose.diagnose(
        frame(phases(), sync_tax(9.9), host)).findings)


# ------------------------------------------------------------------ a run with a failed job

FAILED_LINE = "AttributeError: 'NoneType' object has no attribute 'detach'"


def _half_run(tmp_path):
    """A run whose E07 failed: the others' rows (the shipped CPU reference's) and E07's log."""
    import shutil
    from pathlib import Path

    from perflab import config
    from perflab.catalogue import EXPERIMENTS

    root = Path(__file__).resolve().parents[1]
    cfg = config.load([root / "config" / "test.yaml"],
                      {"device": "cpu", "run": "E01,E05,E07,E13,R01"})
    results = tmp_path / config.result_dir(cfg)
    results.mkdir(parents=True)
    ran = ("E01", "E05", "E13", "R01")
    for eid in ran:
        name = f"{EXPERIMENTS[eid].slug}.csv"
        shutil.copy(root / "report" / "reference" / "cpu-2c" / "results" / name, results / name)
    logs = tmp_path / "logs" / cfg["resolved_tag"]
    logs.mkdir(parents=True)
    (logs / f"{EXPERIMENTS['E07'].slug}.log").write_text(
        "[E07 +0.1s] FAILED; no result written:\nTraceback (most recent call last):\n"
        f"  File \"optim.py\", line 60\n{FAILED_LINE}\n")
    return cfg, [results / f"{EXPERIMENTS[e].slug}.csv" for e in ran]


def test_a_failed_experiment_does_not_cost_the_verdict(tmp_path, monkeypatch):
    import time

    from perflab import partial

    cfg, present = _half_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    md = partial.diagnosis(cfg, cfg["resolved_experiments"], f"logs/{cfg['resolved_tag']}",
                           time.time() - 60).read_text()
    whole = diagnose.diagnose(io.read_results(present))  # the verdict of what ran
    assert f"**Verdict: {whole.label}**" in md
    assert "E07 (" in md and f"failed: {FAILED_LINE}" in md
    rows = pd.read_csv(tmp_path / present[0].parent / "diagnosis.csv", keep_default_na=False)
    gone = rows[rows.candidate == "missing"]
    assert list(gone.source) == ["E07"] and gone.because.iloc[0] == FAILED_LINE
    assert rows.verdict.astype(str).eq("True").any()


def test_diagnose_keeps_going_and_prints_the_verdict_of_what_ran(tmp_path, monkeypatch, capsys):
    """`perflab diagnose` asks Snakemake to keep going; when a job failed (so the diagnosis rule
    never ran) it prints the verdict drawn from the results that exist, naming the failure."""
    from perflab import cli

    calls = []

    def fake_call(cmd, env=None):
        calls.append(cmd)
        if "snakemake" in cmd:
            _half_run(tmp_path)  # the jobs that ran wrote their rows; E07 failed
            return 1
        return 0  # the pre-flight

    monkeypatch.setattr(cli.subprocess, "call", fake_call)
    rc = cli.main(["diagnose", "mlp", "--device", "cpu", "--run", "E01,E05,E07,E13,R01",
                   "--configfile", "config/test.yaml", "--directory", str(tmp_path)])
    assert rc == 1  # a job failed, and the exit status says so
    assert "--keep-going" in calls[-1]
    out = capsys.readouterr().out
    assert "**Verdict:" in out and FAILED_LINE in out
