"""The verdict rules on synthetic evidence: each verdict, its cited rows, its ruled-out rivals."""

from __future__ import annotations

import pandas as pd
import pytest

from perflab.core import io
from perflab.core.names import PHASES
from perflab.experiments import e06_events_vs_wall as e06
from perflab.experiments import r02_step_trace as r02
from perflab.experiments.c00_calibration import AA_FLOOR
from perflab.pipeline import config
from perflab.views import diagnose, ledger


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


SITE = ("loss", "aten::item > aten::_local_scalar_dense",
        "mypkg/losses.py:31 in loss_fn: if torch.isnan(loss).item():")


def traced(*, data=0.0, sync=0.0, launch=0.0, other=0.0, copy=0.0, syncs=0.0, cost=0.0,
           own=1.0, spread=1.0, launch_in="forward", sites=(SITE,), device="cuda:0",
           free_cost=None):
    """R02 on a device with a queue: idle shares (% of the step), syncs per step, the sync
    cost bound (% of the window; ``free_cost``: of the unprofiled step, where R02 timed it),
    each share's per-step p25..p75 as +-``spread``."""
    rows = [_row("R02", r02.STEP, r02.OWN_LOADER, own, device=device, unit="bool"),
            _row("R02", r02.BUSY, r02.DEVICE_TIME, 1.0, "mean", device, "ms"),
            _row("R02", r02.H2D_COPY, r02.WINDOW_SHARE, copy, device=device, unit="%"),
            _row("R02", r02.SYNCS, r02.SYNCS_PER_STEP, syncs, device=device, unit="count"),
            _row("R02", r02.SYNCS, r02.BLOCKED_TIME, cost / 10, "mean", device, "ms")]
    for variant, share in ((r02.idle_variant("data"), data), (r02.idle_variant("sync"), sync),
                           (r02.idle_variant("launch"), launch),
                           (r02.idle_variant("other"), other), (r02.SYNC_COST_BOUND, cost)):
        rows += [_row("R02", variant, r02.WINDOW_SHARE, share, device=device, unit="%"),
                 _row("R02", variant, r02.WINDOW_SHARE, max(0.0, share - spread), "p25",
                      device, "%"),
                 _row("R02", variant, r02.WINDOW_SHARE, share + spread, "p75", device, "%")]
    rows.append(_row("R02", r02.phase_variant(launch_in, "launch"), r02.IDLE_TIME, launch / 10,
                     "mean", device, "ms"))
    if free_cost is not None:
        rows.append(_row("R02", r02.SYNC_COST_BOUND, r02.FREE_STEP_SHARE, free_cost,
                         device=device, unit="%"))
    if syncs:
        for phase, op, frame in sites:
            v = r02.site_variant(phase, op, frame)
            rows += [_row("R02", v, r02.SYNCS_PER_STEP, syncs, device=device, unit="count"),
                     _row("R02", v, r02.BLOCKED_TIME, cost / 10, device=device, unit="ms"),
                     _row("R02", v, r02.IDLE_TIME, sync / 10, device=device, unit="ms")]
    return rows


def no_queue():
    """R02 on a CPU: its device rows unsupported, saying why."""
    def gone(variant, metric, unit):
        r = _row("R02", variant, metric, None, unit=unit)
        r.update(status="unsupported", reason=r02.NO_QUEUE)
        return r

    return [_row("R02", r02.STEP, r02.OWN_LOADER, 0.0, unit="bool"),
            gone(r02.BUSY, r02.DEVICE_TIME, "ms"), gone(r02.SYNCS, r02.SYNCS_PER_STEP, "count"),
            gone(r02.idle_variant("launch"), r02.IDLE_TIME, "ms")]


def frame(*parts):
    f = pd.DataFrame([r for part in parts for r in part], columns=io.COLUMNS)
    io.validate_rows(f)  # synthetic evidence obeys the same contract as measured rows
    return f


#: a compute-bound device that is busy (the trace shows it waiting on nothing)
BUSY = traced(launch=2.0, other=1.0)
ROOF = roofline(50, 20, 60, 10, 60)


def _why(d):
    return [(f.bottleneck, f.outcome, f.because) for f in d.findings]


@pytest.mark.parametrize("evidence, verdict, cited", [
    # a CPU: the loader's wait with the host doing both (E05)
    (frame(phases(input_wait=40.0), no_queue(), ROOF),
     "input_pipeline", "E05 sync/input_wait phase_share"),
    # a device with a queue: the device idles while the loader works (R02)
    (frame(phases(input_wait=40.0), traced(data=30.0, launch=2.0), ROOF),
     "input_pipeline", "R02 idle/data window_share"),
    (frame(phases(), traced(sync=8.0, launch=12.0, syncs=4.0, cost=18.0), ROOF),
     "synchronization", "R02 sync/cost_bound window_share"),
    (frame(phases(), traced(launch=40.0), events(wall=10.0, submit=9.5, gap=3.0), ROOF),
     "host_overhead", "R02 idle/launch window_share"),
    # no trace: E06's host-exposed time, the free-running loop queueing under a step
    (frame(phases(), events(wall=10.0, submit=9.5, gap=3.0) + backlog(400, 4.0, 10.0), ROOF),
     "host_overhead", "E06 wall_minus_device host_exposed median"),
    # the H200 transformer block: submission as long as the step because the launch queue is
    # full (7 steps queued) — the device runs behind, so the roofline decides
    (frame(phases(), events(wall=13.9, submit=13.3, gap=0.06) + backlog(400, 92.5, 13.3),
           roofline(78, 12, 79, 10, 79)),
     "device_compute", "R01 phase/forward_backward arithmetic_intensity median"),
    (frame(phases(), no_queue(), roofline(50, 20, 2.0, 0.5, 2.0)),  # a CPU: no queue
     "host_overhead", "R01 phase/forward_backward roofline_fraction median"),
    (frame(phases(optimizer=51.0, forward=16.0, backward=31.0), BUSY, ROOF),
     "optimizer", "E05 sync/optimizer phase_share"),
    (frame(phases(), BUSY, roofline(50, 20, 70, 10, 70)),
     "device_compute", "R01 phase/forward_backward arithmetic_intensity median"),
    (frame(phases(), BUSY, roofline(4, 20, 8, 80, 40)),
     "memory_bandwidth", "R01 ceiling/ridge_point arithmetic_intensity value"),
    (frame(phases(), sync_tax(1.0)), "undetermined", None),
])
def test_each_verdict(evidence, verdict, cited):
    d = diagnose.diagnose(evidence)
    assert d.verdict == verdict, _why(d)
    sources = [e.source for e in d.evidence]
    if cited is None:
        assert not sources
    else:
        assert any(s.startswith(cited) for s in sources), sources
        # every cited number is a value of the frame (or a ratio of two of them)
        assert all(e.value is not None for e in d.evidence if e.source.startswith(cited))


def test_a_sync_verdict_names_its_site_and_gives_no_graph_advice():
    d = diagnose.diagnose(frame(phases(), traced(sync=8.0, launch=30.0, syncs=4.0, cost=18.0),
                                ROOF))
    assert d.verdict == "synchronization"
    assert "4x per step" in d.because and "aten::item" in d.because and "loss_fn" in d.because
    assert "device-side accumulator" in d.intervention and "losses.py:31" in d.intervention
    assert "Not CUDA graphs" in d.intervention and "reduce-overhead" not in d.intervention
    # a boolean-mask select is told to keep its shape fixed
    mask = ("loss", "aten::index > aten::nonzero", "mypkg/losses.py:12 in loss_fn: out[keep]")
    d = diagnose.diagnose(frame(phases(), traced(syncs=1.0, cost=20.0, sites=(mask,)), ROOF))
    assert "torch.where" in d.intervention and "losses.py:12" in d.intervention


def test_only_a_step_that_syncs_and_pays_for_it_is_sync_bound():
    # E13's tax of *adding* a read says nothing about the step's own syncs
    d = diagnose.diagnose(frame(phases(), sync_tax(25.0), BUSY, ROOF))
    sync = next(f for f in d.findings if f.bottleneck == "synchronization")
    assert d.verdict == "device_compute" and sync.outcome == diagnose.RULED_OUT
    assert "never synchronizes" in sync.because
    # a device-bound step reading its loss each step: the host blocks, the device stays busy
    d = diagnose.diagnose(frame(phases(), traced(sync=0.3, launch=1.0, syncs=1.0, cost=1.3),
                                ROOF))
    assert d.verdict == "device_compute", _why(d)


def test_the_sync_cost_is_a_share_of_the_unprofiled_step_where_r02_timed_it():
    # measured on an H200: 97 syncs per step blocking the host 2.0 ms, a 42 ms profiled
    # window (4.8%) against a 16.5 ms unprofiled step (12%): the profiler's slower host
    # dilutes a device-side wait, so the unprofiled share decides
    seen = dict(launch=77.6, sync=9.0, syncs=97.0, cost=4.8)
    d = diagnose.diagnose(frame(phases(), traced(**seen, free_cost=12.1), ROOF))
    assert d.verdict == "synchronization", _why(d)
    assert "12.1% of the step" in d.because
    # the same window, the syncs cheap in the real step too: the launch wait decides
    d = diagnose.diagnose(frame(phases(), traced(**seen, free_cost=5.0), ROOF))
    sync = next(f for f in d.findings if f.bottleneck == "synchronization")
    assert d.verdict == "host_overhead" and sync.outcome == diagnose.RULED_OUT, _why(d)
    # a run from before R02 timed the unprofiled step: the window's share, as then
    d = diagnose.diagnose(frame(phases(), traced(**seen), ROOF))
    assert d.verdict == "host_overhead", _why(d)


def test_host_overhead_follows_the_launch_wait_not_submission():
    # the device busy (R02), although the host's submission is as long as the step (E06)
    d = diagnose.diagnose(frame(phases(), BUSY, events(wall=10.0, submit=9.5, gap=0.2), ROOF))
    assert d.verdict == "device_compute", _why(d)
    host = next(f for f in d.findings if f.bottleneck == "host_overhead")
    assert host.outcome == diagnose.RULED_OUT and "E06 agrees" in host.because
    # launch-bound, the trace and E06 agreeing; no syncs: the default advice (graphs allowed)
    d = diagnose.diagnose(frame(phases(), traced(launch=40.0), ROOF,
                                events(wall=10.0, submit=9.5, gap=4.0)))
    assert d.verdict == "host_overhead" and "most of it in forward" in d.because
    assert "E06 agrees" in d.because and d.intervention == diagnose.INTERVENTIONS["host_overhead"]
    # launch-bound and syncing (below the sync threshold): no CUDA graphs
    d = diagnose.diagnose(frame(phases(), traced(launch=40.0, syncs=2.0, cost=4.0), ROOF))
    assert d.verdict == "host_overhead"
    assert "without CUDA graphs" in d.intervention and "aten::item" in d.intervention
    # the one sync of the profiled window, outside every phase (the harness's drain, seen on
    # the H200 as 0.1 per step "between_steps"), is not the step's: graphs stay allowed
    d = diagnose.diagnose(frame(phases(), traced(launch=40.0, syncs=0.1, cost=0.0,
                                                 sites=((r02.BETWEEN, "", ""),)), ROOF))
    assert d.verdict == "host_overhead"
    assert d.intervention == diagnose.INTERVENTIONS["host_overhead"], d.intervention
    # without a trace, submission / wall alone never makes it host-bound
    d = diagnose.diagnose(frame(phases(), events(wall=10.0, submit=9.5, gap=0.2), ROOF))
    assert d.verdict == "device_compute", _why(d)


def test_the_loader_wait_decides_only_where_it_leaves_the_device_idle():
    # E05's drained wait is 40%, but free-running the device stays busy meanwhile (R02)
    d = diagnose.diagnose(frame(phases(input_wait=40.0), traced(data=3.0), ROOF))
    assert d.verdict == "device_compute", _why(d)
    # no loader of its own: said, not read as a measured input pipeline
    d = diagnose.diagnose(frame(phases(), traced(own=0.0), ROOF))
    inp = next(f for f in d.findings if f.bottleneck == "input_pipeline")
    assert inp.outcome == diagnose.RULED_OUT and "no loader of its own" in inp.because


def test_the_optimizer_is_named_before_generic_host_overhead():
    d = diagnose.diagnose(frame(phases(optimizer=51.0, forward=16.0, backward=31.0),
                                traced(launch=40.0, launch_in="optimizer"), ROOF))
    assert d.verdict == "optimizer"
    assert "Also fits, later in the order: host launch" in diagnose.render_markdown(d)


def test_the_optimizer_finding_cites_e07s_isolated_step():
    """E07's rows as its script writes them (a shipped run's): the optimizer finding cites its
    isolated optimizer step beside E05's share (E07 writes it as OPTIMIZER_STEP, not as the
    step_latency of a whole step)."""
    from perflab.experiments import e07_optimizers as e07

    shipped = config.ROOT / "report" / "reference" / "cpu-2c" / "results" / "e07_optimizers.csv"
    rows = pd.concat([frame(phases(optimizer=51.0, forward=16.0, backward=31.0), BUSY, ROOF),
                      io.read_results([shipped])], ignore_index=True)
    opt = next(f for f in diagnose.diagnose(rows).findings if f.bottleneck == "optimizer")
    cited = {e.source: e.value for e in opt.evidence}
    for variant in (e07.FOREACH, e07.FUSED):
        source = f"E07 {variant} {e07.OPTIMIZER_STEP} median"
        assert cited.get(source) is not None and cited[source] > 0, cited


def test_a_cpu_says_there_is_no_device_queue():
    d = diagnose.diagnose(frame(phases(), no_queue(), ROOF))
    sync = next(f for f in d.findings if f.bottleneck == "synchronization")
    assert sync.outcome == diagnose.RULED_OUT and "no device queue" in sync.because
    host = next(f for f in d.findings if f.bottleneck == "host_overhead")
    assert "no device queue observable here" in host.because


def test_cpu_queue_evidence_is_not_read_as_host_bound():
    # on a CPU the loop's backlog is always ~0: E01 on a CPU must not vote host-bound
    d = diagnose.diagnose(frame(phases(), backlog(400, 0.0, 10.0, device="cpu"), ROOF))
    assert d.verdict == "device_compute"


def test_missing_evidence_is_said_not_invented():
    d = diagnose.diagnose(frame(phases()))
    outcome = {f.bottleneck: f.outcome for f in d.findings}
    assert outcome["synchronization"] == diagnose.NOT_MEASURED
    assert outcome["host_overhead"] == diagnose.NOT_MEASURED
    assert outcome["device_compute"] == diagnose.NOT_MEASURED
    assert d.verdict == "undetermined"


def test_rivals_say_why_they_were_ruled_out():
    d = diagnose.diagnose(frame(phases(optimizer=51.0, forward=16.0, backward=31.0),
                                traced(launch=2.0, syncs=1.0, cost=2.0), ROOF))
    outcome = {f.bottleneck: f for f in d.findings}
    assert outcome["input_pipeline"].outcome == diagnose.RULED_OUT
    assert outcome["synchronization"].outcome == diagnose.RULED_OUT
    assert "could save up to 2.0%" in outcome["synchronization"].because
    assert outcome["host_overhead"].outcome == diagnose.RULED_OUT
    assert "51.0%" in outcome["optimizer"].because


def test_outputs_cite_the_rows(tmp_path):
    evidence = frame(phases(optimizer=51.0, forward=16.0, backward=31.0), BUSY, ROOF)
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
    d = diagnose.diagnose(frame(phases(), BUSY, roofline(50, 20, 20, 5, 20)))
    assert d.verdict == "device_compute"
    assert "utilization" in d.intervention and "20%" in d.intervention
    assert d.intervention != diagnose.INTERVENTIONS["device_compute"]


def test_a_deciding_number_near_its_threshold_is_flagged():
    """A sync cost of 9.9% with an A/A floor of 8.3%, then 14.5% against 12.8%, sit within the
    floor of the 10% threshold: each diagnosis says another run may decide it the other way;
    40% against 5% is not near; the threshold inside the per-step spread is near too."""
    floor = [_row("C00", *AA_FLOOR, 8.3, unit="%")]
    host = traced(launch=40.0, syncs=2.0, cost=9.9, spread=0.1)

    near = diagnose.diagnose(frame(phases(), host, floor))
    assert near.verdict == "host_overhead"
    sync = next(f for f in near.findings if f.bottleneck == "synchronization")
    assert "within this run's A/A floor (8.3%" in sync.borderline
    md = diagnose.render_markdown(near)
    assert "**Near a threshold**" in md and "synchronization — the sync cost (9.9%)" in md
    assert diagnose.to_frame(near).query("candidate == 'synchronization'").borderline.iloc[0]

    other = diagnose.diagnose(frame(phases(), traced(launch=40.0, syncs=2.0, cost=14.5,
                                                     spread=0.1),
                                    [_row("C00", *AA_FLOOR, 12.8, unit="%")]))
    assert other.verdict == "synchronization"
    assert "Also fits, later in the order: host launch & Python overhead" in \
        diagnose.render_markdown(other)

    far = diagnose.diagnose(frame(phases(), traced(launch=40.0, syncs=2.0, cost=40.0,
                                                   spread=0.1),
                                  [_row("C00", *AA_FLOOR, 5.0, unit="%")]))
    assert not any(f.borderline for f in far.findings)
    assert "Near a threshold" not in diagnose.render_markdown(far)
    # without C00, a threshold inside the steps' own spread is still flagged
    spread = diagnose.diagnose(frame(phases(), traced(launch=40.0, syncs=2.0, cost=9.0,
                                                      spread=2.0)))
    sync = next(f for f in spread.findings if f.bottleneck == "synchronization")
    assert "inside the sync cost's spread" in sync.borderline


def test_a_share_is_near_where_a_step_time_difference_of_the_floor_can_carry_it_across():
    """The floor is a difference of step time: a share moves at most f (1 - t) points toward
    a threshold t. A 0.1% input share is 24.9 points from 25%: a floor of 26% cannot carry it
    there (it read "too close to call" on an H100), one of 34% can; a 30% share is 5 points
    above: a floor of 6% moves it 4.5 (not near), one of 7% 5.25 (near)."""
    def input_near(share, floor_pct):
        d = diagnose.diagnose(frame(phases(), traced(launch=60.0, data=share, spread=0.0),
                                    [_row("C00", *AA_FLOOR, floor_pct, unit="%")]))
        return next(f for f in d.findings if f.bottleneck == "input_pipeline").borderline

    assert not input_near(0.1, 26.0)
    assert "within this run's A/A floor (34%" in input_near(0.1, 34.0)
    assert not input_near(30.0, 6.0)
    assert "moves it up to 5.2 points" in input_near(30.0, 7.0)
    assert diagnose.floor_reach_pts(10.0, 25.0) == pytest.approx(7.5)


# ------------------------------------------------------------------ a run with a failed job

FAILED_LINE = "AttributeError: 'NoneType' object has no attribute 'detach'"


def _half_run(tmp_path):
    """A run whose E07 failed: the others' rows (the shipped CPU reference's) and E07's log."""
    import json
    import shutil
    from pathlib import Path

    from perflab.experiments.catalogue import EXPERIMENTS
    from perflab.pipeline import config

    root = Path(__file__).resolve().parents[1]
    cfg = config.load([root / "config" / "test.yaml"],
                      {"device": "cpu", "run": "E01,E05,E07,E13,R01"})
    results = tmp_path / config.result_dir(cfg)
    results.mkdir(parents=True)
    ran = ("E01", "E05", "E13", "R01")
    for eid in ran:
        name = f"{EXPERIMENTS[eid].slug}.csv"
        shutil.copy(root / "report" / "reference" / "cpu-2c" / "results" / name, results / name)
        # its provenance, as its job writes it: measured under this contract (else the
        # verdict refuses the row as another code's or parameters', perflab/views/current.py)
        (results / f"{EXPERIMENTS[eid].slug}.json").write_text(
            json.dumps({"contract": config.contract(cfg, eid)}))
    logs = tmp_path / "logs" / cfg["resolved_tag"]
    logs.mkdir(parents=True, exist_ok=True)  # the fork server may have made it
    (logs / f"{EXPERIMENTS['E07'].slug}.log").write_text(
        "[E07 +0.1s] FAILED; no result written:\nTraceback (most recent call last):\n"
        f"  File \"optim.py\", line 60\n{FAILED_LINE}\n")
    return cfg, [results / f"{EXPERIMENTS[e].slug}.csv" for e in ran]


def test_a_failed_experiment_does_not_cost_the_verdict(tmp_path, monkeypatch):
    import time

    from perflab.views import partial

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
    # Snakemake itself runs through perflab.views.console (its compact view)
    monkeypatch.setattr(cli.console, "run", lambda cmd, env=None, verbose=False:
                        fake_call(cmd, env))
    rc = cli.main(["diagnose", "mlp", "--device", "cpu", "--run", "E01,E05,E07,E13,R01",
                   "--configfile", "config/test.yaml", "--directory", str(tmp_path)])
    assert rc == 1  # a job failed, and the exit status says so
    assert "--keep-going" in calls[-1]
    out = capsys.readouterr().out
    assert "**Verdict:" in out and FAILED_LINE in out


def test_the_verdict_is_printed_before_the_what_if_measures(monkeypatch, tmp_path, capsys):
    """`perflab diagnose` (what-if on): one pre-flight, then Snakemake on the evidence alone
    and the verdict printed, then Snakemake again with W01 and the diagnosis printed with it;
    a failed first invocation prints what ran and measures no intervention."""
    from perflab import cli
    from perflab.pipeline import preflight

    tag = config.load([config.ROOT / "config" / "test.yaml"], {"device": "cpu"})["resolved_tag"]
    md = tmp_path / "results" / tag / "diagnosis.md"
    calls, status = [], {"rc": 0}

    def fake_call(cmd, env=None):
        calls.append(cmd)
        md.parent.mkdir(parents=True, exist_ok=True)
        run = next(a for a in cmd if a.startswith("run="))
        md.write_text(f"**Verdict: from {run}**\n")
        return status["rc"]

    answer = {"ok": True, "device": "cpu", "description": "d", "batch": 16, "step_ms": 1.0}
    preflights = []
    monkeypatch.setattr(preflight, "run_child", lambda *a, **k: preflights.append(1) or answer)
    monkeypatch.setattr(cli.subprocess, "call", fake_call)
    # Snakemake itself runs through perflab.views.console (its compact view)
    monkeypatch.setattr(cli.console, "run", lambda cmd, env=None, verbose=False:
                        fake_call(cmd, env))
    argv = ["diagnose", "mlp", "--device", "cpu", "--run", "C00,E05", "--configfile",
            "config/test.yaml", "--directory", str(tmp_path)]
    assert cli.main(argv) == 0
    assert [next(a for a in c if a.startswith("run=")) for c in calls] == [
        "run=C00,E05", "run=C00,E05,W01"]
    assert len(preflights) == 1
    out = capsys.readouterr()
    assert 0 <= out.out.index("from run=C00,E05**") < out.out.index("from run=C00,E05,W01")
    assert "W01 measures each intervention" in out.err
    # --no-whatif: the evidence alone, once
    calls.clear()
    assert cli.main([*argv, "--no-whatif"]) == 0 and len(calls) == 1
    # a job failed: the verdict from what ran, and no what-if
    calls.clear()
    status["rc"] = 1
    assert cli.main(argv) == 1 and len(calls) == 1
    assert "W01 not run: a job failed" in capsys.readouterr().err


def test_the_workflow_does_not_preflight_again_what_diagnose_did(monkeypatch, tmp_path):
    """`perflab diagnose` pre-flights the workload in a child and hands the answer to the
    workflow's onstart, which estimates the run from it instead of a second child; any other
    spec is pre-flighted as before."""
    from pathlib import Path

    from perflab.pipeline import config, preflight

    test_yaml = Path(__file__).resolve().parents[1] / "config" / "test.yaml"
    cfg = config.load([test_yaml], {"device": "cpu"})
    answer = {"ok": True, "device": "cpu", "description": "d", "batch": 16, "step_ms": 1.0}
    for k, v in preflight.done_env(preflight.workload_spec(cfg), answer).items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(preflight, "run_child", lambda *a, **k: pytest.fail("pre-flighted twice"))
    logs = []
    preflight.before_first_job(cfg, [config.contract(cfg, "E05")], str(tmp_path), logs.append)
    assert any("estimated measurement time" in m for m in logs)
    called = []
    monkeypatch.setattr(preflight, "run_child", lambda spec, **k: called.append(spec) or answer)
    other = config.load([test_yaml], {"device": "cpu", "workload": "convnet"})
    preflight.before_first_job(other, [config.contract(other, "E05")], str(tmp_path),
                               logs.append)
    assert called and called[0]["target"] == "convnet"


def test_a_verdict_near_its_threshold_names_both_candidates_in_its_headline():
    """The issue's case: the input share read 25.0% in one run and 24.8% in the next, with
    an A/A floor of 1%: one picked input pipeline, the other device compute, each printing a
    single verdict. Both headlines now name both, in the same words, with the measurement
    that would separate them; an input share far from the threshold names one."""
    floor = [_row("C00", *AA_FLOOR, 1.0, unit="%")]
    heads = []
    for wait in (24.5, 24.3):  # + 0.5% host-to-device: 25.0% and 24.8%
        d = diagnose.diagnose(frame(phases(input_wait=wait), ROOF, floor))
        assert d.rival and d.label == "input pipeline or device compute", (d.verdict, d.rival)
        md = diagnose.render_markdown(d)
        head = next(ln for ln in md.splitlines() if ln.startswith("**Verdict"))
        assert head.startswith("**Verdict: input pipeline or device compute — too close to call")
        assert "A/A floor" in head and "To separate them" in head and "loader_workers" in head
        heads.append(head.split("As measured")[0])
        # the ledger's verdict line says the same
        assert diagnose.to_frame(d).verdict.any()
    assert heads[0].split(":")[1] == heads[1].split(":")[1]
    far = diagnose.diagnose(frame(phases(input_wait=40.0), ROOF, floor))
    assert far.verdict == "input_pipeline" and not far.rival and far.label == "input pipeline"
    assert "**Verdict: input pipeline** —" in diagnose.render_markdown(far)


def test_a_missing_row_is_not_measured_never_zero():
    """R02 without the row a test decides on: that candidate is not measured (a missing share
    read as 0% would rule it out), the others still decided."""
    def without(rows, variant, metric):
        return [r for r in rows if not (r["variant"] == variant and r["metric"] == metric)]

    cases = {"input_pipeline": (r02.idle_variant("data"), r02.WINDOW_SHARE),
             "synchronization": (r02.SYNC_COST_BOUND, r02.WINDOW_SHARE),
             "host_overhead": (r02.idle_variant("launch"), r02.WINDOW_SHARE)}
    for bottleneck, (variant, metric) in cases.items():
        rows = without(traced(launch=2.0, syncs=1.0, cost=2.0), variant, metric)
        d = diagnose.diagnose(frame(phases(), rows, ROOF))
        got = {f.bottleneck: f for f in d.findings}
        assert got[bottleneck].outcome == diagnose.NOT_MEASURED, _why(d)
        assert variant in got[bottleneck].because
        # with the row, the same evidence rules it out
        full = diagnose.diagnose(frame(phases(), traced(launch=2.0, syncs=1.0, cost=2.0), ROOF))
        assert {f.bottleneck: f.outcome for f in full.findings}[bottleneck] == diagnose.RULED_OUT


def test_a_fraction_above_the_ceiling_is_an_instrument_error_not_a_finding():
    """The ViT under bf16 autocast judged against the fp32 ceiling read 544%: never printed
    as a finding, and the verdict does not lean on it."""
    d = diagnose.diagnose(frame(phases(), BUSY, roofline(169, 12, 544, 30, 544)))
    dev = next(f for f in d.findings if f.bottleneck in ("device_compute", "memory_bandwidth"))
    assert dev.outcome == diagnose.INSTRUMENT_ERROR and "544%" in dev.because
    assert d.verdict == "undetermined", _why(d)
    cached = roofline(4, 20, 8, 131, 131) + [_row("R01", "phase/forward_backward",
                                                   "cache_bandwidth_fraction", 40.0, "median")]
    d = diagnose.diagnose(frame(phases(), BUSY, cached))  # its data stays in cache
    because = " ".join(f.because for f in d.findings)
    assert d.verdict == "undetermined" and "131% of the measured memory bandwidth" in because
    assert "40% of the cache-resident roof" in because
    # at 100% it is a finding
    assert diagnose.diagnose(frame(phases(), BUSY, roofline(169, 12, 100, 30, 100))
                             ).verdict == "device_compute"


def test_the_device_candidate_can_be_ruled_out():
    """Busy with neither FLOPs nor bytes (2% of the attainable rate): not device-bound."""
    d = diagnose.diagnose(frame(phases(), BUSY, roofline(50, 20, 2.0, 0.5, 2.0)))
    dev = next(f for f in d.findings if f.bottleneck in ("device_compute", "memory_bandwidth"))
    assert dev.outcome == diagnose.RULED_OUT and "neither FLOPs nor bytes" in dev.because
    assert d.verdict != "device_compute"


def _compiler_rows(recompiles, share, fallback):
    from perflab.instruments import compiler_watch as cw

    return [_row("E05", cw.VARIANT, m, v) for m, v in (
        (cw.GRAPHS, recompiles + 1.0), (cw.RECOMPILES, recompiles), (cw.COMPILE_SHARE, share),
        (cw.EAGER_FALLBACK, fallback), (cw.COMPILE_TIME, 1.0), (cw.BREAKS, 0.0))]


def test_the_compiler_fits_on_recompiles_or_a_fallback_never_on_one_compile():
    def comp(*a):
        d = diagnose.diagnose(frame(phases(), BUSY, ROOF, _compiler_rows(*a)))
        return d, next(f for f in d.findings if f.bottleneck == "compiler")

    d, f = comp(6.0, 60.0, 0.0)  # recompiling, most of the job
    assert d.verdict == "compiler" and "60% of E05's job" in f.because
    d, f = comp(8.0, 5.0, 1.0)  # cheap compiles, but past the limit it runs eager
    assert d.verdict == "compiler" and "runs eager" in f.because
    d, f = comp(0.0, 60.0, 0.0)  # one compile in a short job: a one-time cost
    assert f.outcome == diagnose.RULED_OUT and d.verdict == "device_compute"
    d, f = comp(3.0, 10.0, 0.0)  # recompiles that cost little
    assert f.outcome == diagnose.RULED_OUT
    assert next(f for f in diagnose.diagnose(frame(phases(), BUSY, ROOF)).findings
                if f.bottleneck == "compiler").outcome == diagnose.NOT_MEASURED


def test_the_fork_server_starts_before_the_preflight_and_serves_the_run(monkeypatch, tmp_path):
    """perflab's command starts the run's fork server before its pre-flight (the imports
    overlap; the first job found it still importing when the workflow started it after) and
    hands its socket to Snakemake, whose onstart then starts none; it is stopped at the end.
    With fork_server false, or a dry run, none is started."""
    from perflab import cli
    from perflab.core import forkserver
    from perflab.pipeline import preflight

    order = []
    monkeypatch.setattr(forkserver, "start", lambda sock, log, dev, imports=(): order.append(("start", sock))
                        or "proc")
    monkeypatch.setattr(forkserver, "stop", lambda proc, sock: order.append(("stop", sock)))
    answer = {"ok": True, "device": "cpu", "description": "d", "batch": 16, "step_ms": 1.0}
    monkeypatch.setattr(preflight, "run_child",
                        lambda *a, **k: order.append(("preflight",)) or answer)
    monkeypatch.setattr(cli.console, "run", lambda cmd, env=None, verbose=False: order.append(
        ("snakemake", env.get(forkserver.ENV_SOCKET))) or 0)
    argv = ["diagnose", "mlp", "--device", "cpu", "--run", "C00", "--configfile",
            "config/test.yaml", "--directory", str(tmp_path)]
    cli.main(argv)
    sock = order[0][1]
    assert order[0][0] == "start" and order[1] == ("preflight",), order
    assert ("snakemake", sock) in order and order[-1] == ("stop", sock), order
    order.clear()
    (tmp_path / "off.yaml").write_text("fork_server: false\n")
    cli.main([*argv, "--configfile", str(tmp_path / "off.yaml")])
    assert not any(o[0] == "start" for o in order), order
    assert ("snakemake", None) in order, order
    order.clear()
    cli.main([*argv, "-n"])
    assert not any(o[0] == "start" for o in order), order


def test_under_a_budget_the_workflow_prints_no_second_estimate(monkeypatch, tmp_path):
    """Under --budget the split printed before Snakemake is the run's estimate; the fixed
    counts' estimate the onstart printed beside it read to a newcomer as a second, contrary
    one (C00 8 s where its share was 29 s). Without a budget it is printed as before."""
    from pathlib import Path

    from perflab.pipeline import config, preflight

    test_yaml = Path(__file__).resolve().parents[1] / "config" / "test.yaml"
    answer = {"ok": True, "device": "cpu", "description": "d", "batch": 16, "step_ms": 1.0}
    for budget, printed in ((None, True), (60.0, False)):
        extra = {"device": "cpu"}
        if budget is not None:
            extra["sampling"] = {"rule": "adaptive", "budget_s": budget,
                                 "job_budget_s": {"E05": 20.0}}
        cfg = config.load([test_yaml], extra)
        for k, v in preflight.done_env(preflight.workload_spec(cfg), answer).items():
            monkeypatch.setenv(k, v)
        logs = []
        preflight.before_first_job(cfg, [config.contract(cfg, "E05")], str(tmp_path),
                                   logs.append)
        assert any("estimated measurement time" in m for m in logs) == printed, logs
        assert any("pre-flight:" in m for m in logs)
