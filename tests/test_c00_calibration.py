"""C00 (calibration) and the one A/B judgement: floors, A/A vs a planted 2x, the GPU-state gate.

The A/A-versus-planted check runs twice: once through the real interleaving
machinery on a fake clock (deterministic, so the A/A verdict cannot be a 5%
accident), once on the real step in the C00 job, where only properties that
hold under any load are asserted.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from experiments import assert_cpu_scale_sets, one_value, run_tiny

from perflab import experiments
from perflab.core import env, io
from perflab.experiments import floors as calibration
from perflab.experiments.c00_calibration import (
    AA_BLOCK,
    AA_FLOOR,
    AA_FLOOR_SHORT,
    FLOOR_PAIRS,
    FLOOR_PAIRS_VARIANT,
    FLOOR_REFERENCE_PAIRS,
)
from perflab.instruments import stats, timing
from perflab.kit import tables
from perflab.pipeline import config
from perflab.views import ledger

#: experiments.C00.peer_repeats of the module's run (null would be timing.repeats, 30 here)
PEER_REPEATS = 7
#: experiments.C00.planted_blocks of the module's run (null would be its 8 A/A blocks); 6
#: all-positive pairs are the fewest whose signed-rank p is below 0.05
PLANTED_BLOCKS = 6


@pytest.fixture(scope="module")
def c00(tiny_cfg, tmp_path_factory):
    """One C00 run on the tiny contract (8 A/A blocks, the helper's 7 calls against the peers):
    (rows, samples, contract, outputs)."""
    cfg = copy.deepcopy(tiny_cfg)
    # its own run, not the shared pipeline's: more A/A blocks (8 of 5) than the tiny contract
    cfg["experiments"]["C00"].update(aa_blocks=8, aa_inner=5, peer_repeats=PEER_REPEATS,
                                     planted_blocks=PLANTED_BLOCKS)
    contract, out = run_tiny(cfg, "C00", tmp_path_factory.mktemp("c00"))
    return io.read_results([out["csv"]]), pd.read_csv(out["samples"]), contract, out


# ------------------------------------------------------------------ the job


def test_outputs_obey_the_contract(c00):
    rows, samples, _, out = c00
    assert set(rows.experiment) == {"C00"}
    assert list(samples.columns) == io.SAMPLE_COLUMNS
    assert Path(out["provenance"]).is_file()
    # on the CPU exactly the CUDA-only instruments are unsupported, each with its reason
    bad = rows[rows.status != "ok"]
    assert set(bad.variant) == {"events/empty_pair", "events/record_pair", "peer/do_bench",
                                "peer/do_bench_over_helper"}
    assert bad.reason.str.contains("CUDA").all()


def test_floors_sit_below_the_step(c00):
    rows, *_ = c00
    step = one_value(rows, "peer/helper", "step_latency", "median")
    empty = one_value(rows, "floor/empty_call", "call_latency", "median")
    sync = one_value(rows, "sync/idle", "sync_cost", "median")
    tick = one_value(rows, "clock/perf_counter", "tick", "median")
    assert 0 < tick <= empty < step
    assert 0 < sync < step
    # a tick is at least the clock's declared resolution
    assert tick >= one_value(rows, "clock/perf_counter", "resolution_declared") * 0.999


def test_process_floor_grows_with_each_stage(c00):
    rows, samples, contract, _ = c00
    bare = one_value(rows, "process/interpreter", "process_wall", "median")
    torch_ = one_value(rows, "process/import_torch", "process_wall", "median")
    dev = one_value(rows, "process/device_init", "process_wall", "median")
    # importing torch costs far more than starting an interpreter; device init includes it
    assert torch_ > 2 * bare and dev > 2 * bare
    n = contract["params"]["process_repeats"]
    assert (samples[samples.metric == "process_wall"].groupby("variant").size() == n).all()


def test_aa_floor_and_planted_slowdown(c00):
    rows, samples, contract, _ = c00
    blocks = contract["params"]["aa_blocks"]
    calls = samples[samples.metric == "step_latency"]
    a = calls[calls.variant == "aa_a"].groupby("block").value.median()
    b = calls[calls.variant == "aa_b"].groupby("block").value.median()
    assert len(a) == len(b) == blocks
    floor = one_value(rows, *AA_FLOOR)
    # the floor bounds the statistic the A/Bs are judged by, from these very blocks: for a
    # median of 12 pairs, or of the A/A's own if fewer (this config's 6)
    ref = min(FLOOR_REFERENCE_PAIRS, blocks)
    assert floor == pytest.approx(stats.aa_floor_pct(a.tolist(), b.tolist(), pairs=ref))
    # and one bound per pair count up to the A/A's own, for the A/Bs of that many pairs;
    # none for more pairs than were measured
    for m in FLOOR_PAIRS:
        got = rows[(rows.variant == FLOOR_PAIRS_VARIANT.format(m))]
        if m > blocks:
            assert got.empty, m
        else:
            assert one_value(rows, FLOOR_PAIRS_VARIANT.format(m), AA_FLOOR[1]) == \
                pytest.approx(stats.aa_floor_pct(a.tolist(), b.tolist(), pairs=m))
    assert floor >= abs(one_value(rows, "aa_b_minus_aa_a", "ab_effect_rel"))
    assert one_value(rows, *AA_FLOOR_SHORT) >= 0
    inner = contract["params"]["aa_inner"]
    a_calls = calls[calls.variant == "aa_a"].value
    assert one_value(rows, *AA_BLOCK) == pytest.approx(inner * a_calls.median())
    # the planted 2x: significant on the real step, and its verdict follows the floor rule
    dv = "planted_2x_minus_planted_a"
    assert one_value(rows, dv, "ab_effect") > 0
    assert one_value(rows, dv, "ab_ci_low") > 0
    assert one_value(rows, dv, "ab_p") < 0.05
    rel = one_value(rows, dv, "ab_effect_rel")
    assert one_value(rows, dv, "ab_exceeds_floor") == float(abs(rel) > floor)
    assert one_value(rows, dv, "ab_resolved") == float(abs(rel) > floor)
    # the A/A pair is judged without a floor (it defines it) and moves far less than 2x
    aa = "aa_b_minus_aa_a"
    assert not ((rows.variant == aa) & (rows.metric == "ab_exceeds_floor")).any()
    assert abs(one_value(rows, aa, "ab_effect")) < one_value(rows, dv, "ab_effect")


def test_peer_ratio_is_the_ratio_of_the_rows(c00):
    rows, *_ = c00
    ratio = one_value(rows, "peer/timer_over_helper", "ratio")
    assert ratio == pytest.approx(one_value(rows, "peer/timer", "step_latency", "median")
                                  / one_value(rows, "peer/helper", "step_latency", "median"))


def test_the_planted_pair_takes_planted_blocks(c00):
    """experiments.C00.planted_blocks (the CPU scale's 6) sets the planted 2x's block pairs;
    the A/A floor it is judged against keeps aa_blocks."""
    rows, samples, contract, _ = c00
    assert contract["params"]["aa_blocks"] != PLANTED_BLOCKS
    for variant, blocks in (("planted_a", PLANTED_BLOCKS), ("planted_2x", PLANTED_BLOCKS),
                            ("aa_a", contract["params"]["aa_blocks"])):
        assert samples[samples.variant == variant].block.nunique() == blocks, variant
    planted = rows[rows.variant == "planted_2x_minus_planted_a"]
    assert planted.window.str.contains(f"{PLANTED_BLOCKS} blocks per side").all()
    # the CPU scale's 6 beneath the user's value; the chapter's 12, fewer than its A/A's 48
    # pairs (a 2x effect needs fewer than the floor it is told from)
    assert config.load([], {"device": "cpu"})["experiments"]["C00"]["planted_blocks"] == 6
    chapter = config.load([], {"device": "cpu", "scale": "chapter"})["experiments"]["C00"]
    assert (chapter["planted_blocks"], chapter["aa_blocks"]) == (12, 48)
    mine = config.load([], {"device": "cpu", "experiments": {"C00": {"planted_blocks": 8}}})
    assert mine["experiments"]["C00"]["planted_blocks"] == 8


def test_the_helper_against_the_peers_takes_peer_repeats(c00):
    """experiments.C00.peer_repeats (the CPU scale's 200) replaces timing.repeats for the
    helper's calls beside the peer timers, and its rows say so."""
    rows, samples, contract, _ = c00
    assert contract["timing"]["repeats"] != PEER_REPEATS
    helper = rows[rows.variant == "peer/helper"]
    assert (helper.n == PEER_REPEATS).all()
    assert helper.window.str.endswith(f"repeats {PEER_REPEATS}").all()
    assert (samples.variant == "peer/helper").sum() == PEER_REPEATS
    assert_cpu_scale_sets("C00", "peer_repeats", 200, 400)


def test_profiler_overhead_row_matches_its_samples(c00):
    rows, samples, *_ = c00
    base = samples[samples.variant == "profiler/unprofiled"].value
    prof = samples[samples.variant == "profiler/profiled"].value
    j = stats.judge(base.tolist(), prof.tolist(), paired=False)
    assert one_value(rows, "profiler/overhead", "overhead_rel") == pytest.approx(j.relative_pct)
    assert one_value(rows, "profiler/overhead", "ab_p") == pytest.approx(j.p)


def test_table_figure_ledger_and_note(c00, tmp_path):
    rows, _, _, out = c00
    t = experiments.table("C00", rows)
    label = "A/A floor: 95% bound of |median paired block difference|"
    assert label in t.measurement.tolist()
    floor_cell = t[t.measurement == label].value.iloc[0]
    assert floor_cell == pytest.approx(one_value(rows, *AA_FLOOR))
    assert not tables.format_table(t).empty
    png = experiments.make_figure("C00", out["csv"], out["samples"], tmp_path / "c00.png")
    assert png.stat().st_size > 1000
    led, md = ledger.build([out["csv"]])
    assert "harness     timer floor" in md
    assert "A/A floor" in md and "95% bound of |median paired block difference|" in md
    f = led[(led.section == "harness") & (led.field == "aa_floor_pct")]
    assert float(f.value.iloc[0]) == pytest.approx(one_value(rows, *AA_FLOOR))
    note = calibration.floor_note(rows)
    assert "empty call through the helper" in note and "A/A floor" in note
    # a run from before this floor (C00 wrote the old statistic) has no floor: not a default
    old = rows.copy()
    old.loc[old.metric == AA_FLOOR[1], "metric"] = "aa_noise_floor"
    assert calibration.noise_floor_pct(old) is None
    assert "did not run" in calibration.floor_note(rows[rows.experiment == "none"])
    comp = calibration.ab_comparisons(rows)
    assert {"aa_b_minus_aa_a", "planted_2x_minus_planted_a"} <= set(comp.comparison)
    planted = comp[comp.comparison == "planted_2x_minus_planted_a"].iloc[0]
    assert calibration.verdict_of(rows, "C00", "planted_2x_minus_planted_a") == planted.verdict
    # an impossible floor makes the same effect inconclusive; an unknown comparison is None
    assert calibration.verdict_of(rows, "C00", "planted_2x_minus_planted_a",
                                  floor_pct=1e9) == "inconclusive"
    assert calibration.verdict_of(rows, "C00", "nothing") is None


# ------------------------------------------------------------------ A/A vs planted 2x, deterministic


class FakeClock:
    """A host clock that steps call by call: each step advances it by its own cost."""

    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_aa_not_significant_and_planted_2x_significant_in_one_run(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(timing, "_clock", clock)
    rng = np.random.default_rng(7)

    def step():  # 10 ms with 3% noise
        clock.t += 0.010 * (1 + 0.03 * rng.standard_normal())

    def twice():
        step()
        step()

    kw = dict(blocks=12, inner=10, warmup=2, sync=lambda: None)
    aa = timing.interleaved_ab(step, step, **kw)
    planted = timing.interleaved_ab(step, twice, **kw)
    floor = stats.aa_floor_pct(aa.a_blocks, aa.b_blocks)
    j_aa = stats.judge(aa.a_blocks, aa.b_blocks)
    j_2x = stats.judge(planted.a_blocks, planted.b_blocks, noise_floor_pct=floor)
    assert not j_aa.significant and not j_aa.resolved and j_aa.verdict == "inconclusive"
    assert j_aa.ci_low < 0 < j_aa.ci_high
    assert j_2x.significant and j_2x.exceeds_floor and j_2x.resolved
    assert j_2x.relative_pct == pytest.approx(100, abs=10)
    assert 0 < floor < 20


def test_judge_rules():
    a = [10.0, 10.2, 9.9, 10.1, 10.0, 10.3, 9.8, 10.1]
    b = [x * 1.05 for x in a]
    j = stats.judge(a, b)
    assert j.significant and j.resolved and j.exceeds_floor is None
    # the same effect inside a larger A/A floor is inconclusive
    inside = stats.judge(a, b, noise_floor_pct=10.0)
    assert inside.significant and inside.exceeds_floor is False and not inside.resolved
    assert stats.judge(a, b, noise_floor_pct=1.0).resolved
    # independent samples go to Mann-Whitney U
    ind = stats.judge(a, [x * 2 for x in a] + [20.0], paired=False)
    assert ind.test.startswith("mann-whitney") and ind.resolved
    # given differences replace b - a; all-zero differences are never resolved
    assert not stats.judge(a, b, diffs=[0.0] * 8).resolved
    with pytest.raises(ValueError):
        stats.judge(a, b[:3])
    with pytest.raises(ValueError):
        stats.judge([], b)
    # decide() is the rule judge() applied
    assert stats.decide(p=j.p, ci_low=j.ci_low, ci_high=j.ci_high, relative_pct=j.relative_pct,
                        noise_floor_pct=None) == (True, None, True)
    assert stats.decide(p=0.01, ci_low=-0.1, ci_high=0.5, relative_pct=5,
                        noise_floor_pct=None)[2] is False


def test_aa_runs_on_two_independent_copies(tiny_contract, monkeypatch):
    """The A/A's sides are two copies of the step (model, optimizer, batch), not one object."""
    from experiments import load_script

    from perflab.pipeline import runner

    sides = []

    def capture(fa, fb, **kw):
        sides.append((fa, fb))
        raise StopIteration  # stop after the first A/B: only its sides are looked at

    mod = load_script("c00_calibration")
    monkeypatch.setattr(mod.timing, "interleaved_ab", capture)
    ctx = runner.Context("C00", tiny_contract("C00"), lambda m: None)
    step = ctx.training_step()
    with pytest.raises(StopIteration):
        mod._noise_floor(ctx, step, ctx.training_step())
    (fa, fb), = sides
    assert fa is not fb
    parts = [{id(f.model), id(f.optimizer), id(f.batches), *map(id, f.model.parameters())}
             for f in (fa, fb)]
    assert not parts[0] & parts[1]  # no object (model, optimizer, batch stream) is shared
    assert fa.next_batch() is not fb.next_batch()


# ------------------------------------------------------------------ GPU-state validity gate


def _state(**kw):
    base = {"available": True, "sm_clock_mhz": 1980, "temperature_c": 40, "power_w": 120.0,
            "throttle_reasons": 0, "process_pids": [4242], "own_pid": 4242,
            "cuda_initialized": True}
    return {**base, **kw}


def test_gate_passes_a_clean_state():
    prov = {"gpu_state_before": _state(), "gpu_state_after": _state()}
    assert env.judge_gpu_state(prov) == {"status": "valid", "reasons": []}
    # idle and application-clock reasons are not throttling
    idle = {"gpu_state_before": _state(throttle_reasons=0x1 | 0x2), "gpu_state_after": _state()}
    assert env.judge_gpu_state(idle)["status"] == "valid"


def test_gate_flags_a_synthetic_throttled_state():
    prov = {"gpu_state_before": _state(),
            "gpu_state_after": _state(throttle_reasons=0x4 | 0x40, temperature_c=91)}
    v = env.judge_gpu_state(prov)
    assert v["status"] == "flagged"
    text = " ".join(v["reasons"])
    assert "sw_power_cap" in text and "hw_thermal_slowdown" in text and "after" in text
    assert "91 C" in text


def test_gate_flags_a_shared_device():
    shared = {"gpu_state_before": _state(process_pids=[4242, 777]), "gpu_state_after": _state()}
    v = env.judge_gpu_state(shared)
    assert v["status"] == "flagged" and "1 other process" in v["reasons"][0]
    # in a PID namespace our own PID is not listed: the one listed process is this job
    ns = {"gpu_state_before": _state(process_pids=[99]), "gpu_state_after": _state(
        process_pids=[99])}
    assert env.judge_gpu_state(ns)["status"] == "valid"
    two = {"gpu_state_before": _state(process_pids=[99, 100]), "gpu_state_after": _state()}
    assert env.judge_gpu_state(two)["status"] == "flagged"


def test_gate_unknown_without_nvml_and_on_cpu():
    assert env.judge_gpu_state({"gpu_state_before": None, "gpu_state_after": None})[
        "status"] == "unknown"
    no = {"available": False, "reason": "nvidia-ml-py is not installed"}
    v = env.judge_gpu_state({"gpu_state_before": no, "gpu_state_after": no})
    assert v["status"] == "unknown" and "nvidia-ml-py" in v["reasons"][0]


def test_throttle_reason_names():
    assert env.throttle_reason_names(0x4 | 0x40) == ["sw_power_cap", "hw_thermal_slowdown"]
    assert env.throttle_reason_names(0) == []


def test_ledger_flags_a_throttled_job(c00, tmp_path):
    rows, _, _, out = c00
    import json
    import shutil

    csv = tmp_path / "c00_calibration.csv"
    shutil.copy(out["csv"], csv)
    prov = json.loads(Path(out["provenance"]).read_text())
    prov["gpu_state_before"] = _state()
    prov["gpu_state_after"] = _state(throttle_reasons=0x20)
    (tmp_path / "c00_calibration.json").write_text(json.dumps(prov))
    led, md = ledger.build([csv])
    assert "validity    C00: throttled after the job (sw_thermal_slowdown)" in md


# ------------------------------------------------------------------ host-CPU validity gate


def _cpu(busy=0.0, idle=0.0, steal=0.0, own=0.0, clock=0.0, gone=0.0):
    """A snapshot: ``own`` CPU seconds of this process, ``gone`` of a child that leaves."""
    return {"busy_s": busy, "idle_s": idle, "steal_s": steal,
            "own_tree_s": {1: own, **({2: gone} if gone else {})}, "clock_s": clock}


def test_host_gate_flags_steal_and_other_work():
    start = _cpu()
    alone = env.host_contention(start, _cpu(busy=10, idle=10, own=9.8, clock=10))
    assert alone["status"] == "valid" and alone["own_busy_cores"] == pytest.approx(0.98)
    stolen = env.host_contention(start, _cpu(busy=10, idle=9, steal=1, own=10, clock=10))
    assert stolen["status"] == "flagged" and "5.0% of the CPU time" in stolen["reasons"][0]
    shared = env.host_contention(start, _cpu(busy=20, idle=0, own=10, clock=10))
    assert shared["status"] == "flagged" and "1.00 cores busy" in shared["reasons"][0]
    assert env.host_contention(None, start) is None
    assert env.host_contention(start, start) is None  # no time passed: nothing to say
    # a child with 5 s at the start leaves the tree: its past does not make ours negative
    left = env.host_contention(_cpu(gone=5.0), _cpu(busy=10, idle=10, own=9.8, clock=10))
    assert left["own_busy_cores"] == pytest.approx(0.98)
    # one that we reap moves its whole life (5 s before, 1 s since) into our reaped time:
    # counted once, not twice (a second on 2 cores once read 3.5 cores of the job's own)
    reaped = env.host_contention({**_cpu(own=2.0, gone=5.0), "own_tree_ppid": {1: 0, 2: 1}},
                                 _cpu(busy=10, idle=10, own=2.0 + 1.0 + 6.0, clock=10))
    assert reaped["own_busy_cores"] == pytest.approx(0.2)  # 1 s ours, 1 s the child's


# in the background session: the main session's own descendants include that session and
# every child it spawns (the patch tests' observed runs: 4.1 cores of "own" work in one
# second on 2 cores), where a real job's descendants are only its own
@pytest.mark.background
def test_host_gate_sees_a_process_spinning_beside_the_job():
    """Measured in one run: a second beside a process spinning that is not the job's, and
    one beside the job's own; and the page faults of memory the job touches first."""
    import os
    import shlex
    import signal
    import subprocess
    import sys
    import time

    if env.host_cpu_times() is None:
        pytest.skip("no /proc/stat on this machine")

    def over_a_second():
        before = env.host_cpu_times()
        time.sleep(1.0)
        return env.host_contention(before, env.host_cpu_times())

    spin = [sys.executable, "-c", "import time\nt = time.time() + 30\nwhile time.time() < t: pass"]
    # a spinning process that is not ours: started by a shell that exits at once (it is
    # re-parented), then one that is (a compile worker, a DataLoader worker): the same load,
    # counted as other work once and as the job's own once
    pid = int(subprocess.run(["sh", "-c", f"{shlex.join(spin)} >/dev/null 2>&1 & echo $!"],
                             capture_output=True, text=True, check=True).stdout)
    try:
        time.sleep(0.3)  # the interpreter is up and spinning
        other = over_a_second()
    finally:
        os.kill(pid, signal.SIGKILL)
    child = subprocess.Popen(spin)
    try:
        time.sleep(0.3)
        mine = over_a_second()
    finally:
        child.kill()
        child.wait()
    # the spinner counted as other work once, as the job's own once: other minus own moves
    # by the spinner's share in each second (about 2 cores on an idle host). Judged as that
    # one shift, since background load common to both seconds cancels in it: CI's other
    # tests on the same two cores left the child's second at 0.67 cores of other work
    # (against 1.00 with the spinner not ours), and a child that got 0.41 of a core before
    shift = ((other["other_busy_cores"] - other["own_busy_cores"])
             - (mine["other_busy_cores"] - mine["own_busy_cores"]))
    assert shift > 0.4, (other, mine)

    before = env.host_cpu_times()
    touched = bytearray(256 << 20)  # 256 MiB, each 4 KiB page written once
    touched[::4096] = b"\x01" * len(touched[::4096])
    h = env.host_contention(before, env.host_cpu_times())
    # at least one fault per 2 MiB (transparent huge pages), 128 for the 256 MiB
    assert h["own_page_faults_per_s"] * h["seconds"] >= 100, h


def test_every_job_records_its_host_and_the_ledger_names_the_worst(c00, tmp_path):
    rows, _, _, out = c00
    import json
    import shutil

    prov = json.loads(Path(out["provenance"]).read_text())
    if env.host_cpu_times() is None:
        pytest.skip("no /proc/stat on this machine")
    host = prov["host_cpu"]
    assert host["own_busy_cores"] > 0 and host["seconds"] > 0 and host["status"] in (
        "valid", "flagged")
    csv = tmp_path / "c00_calibration.csv"
    shutil.copy(out["csv"], csv)
    prov["host_cpu"] = {**host, "status": "flagged", "steal_pct": 7.5,
                        "reasons": ["the hypervisor took 7.5% of the CPU time"]}
    (tmp_path / "c00_calibration.json").write_text(json.dumps(prov))
    led, _ = ledger.build([csv])
    line = led[led.field == "host_cpu"].iloc[0]
    assert line.unit == "flagged" and line.value == "C00: the hypervisor took 7.5% of the CPU time"


def test_the_diagnose_parts_are_the_clock_and_the_aa_floor(tiny_cfg, tmp_path):
    """`perflab diagnose` runs C00 with parts [clock, aa] (config/diagnose.yaml): the A/A floor
    the verdict's near-threshold notes read, and none of the rest (process floor, planted 2x,
    profiler, peers), whose views then say not run."""
    from perflab import cli
    from perflab.pipeline import config

    parts = config.load([cli.DIAGNOSE_CONFIG], {"device": "cpu"})["experiments"]["C00"]["parts"]
    cfg = copy.deepcopy(tiny_cfg)
    cfg["experiments"]["C00"]["parts"] = parts
    _, out = run_tiny(cfg, "C00", tmp_path)
    rows = io.read_results([out["csv"]])
    assert calibration.noise_floor_pct(rows) is not None
    variants = set(rows.variant)
    assert "clock/perf_counter" in variants and "aa_b_minus_aa_a" in variants
    assert not {v for v in variants if v.startswith(("process/", "peer/", "profiler/",
                                                     "planted"))}


@pytest.mark.parametrize("share_s, stop", [(0.01, "budget spent"), (600.0, None)])
def test_the_aa_under_a_share_says_what_stopped_it(tiny_cfg, tmp_path, share_s, stop):
    """Under a budget C00's A/A row names what stopped it in words that agree: "undecided
    within budget" only where the budget did (a newcomer read "undecided within budget
    [stopped: max_n reached ...]" as a contradiction), and the share it had beside what it
    took, saying where its first rounds ran past the share."""
    import copy

    from experiments import run_tiny

    from perflab.core import io
    from perflab.core.names import SAMPLING_DECISION

    cfg = copy.deepcopy(tiny_cfg)
    cfg["experiments"]["C00"]["parts"] = ["clock", "aa"]
    cfg["sampling"] = {"rule": "adaptive", "budget_s": 60.0, "job_budget_s": {"C00": share_s}}
    _, out = run_tiny(cfg, "C00", tmp_path)
    rows = io.read_results([out["csv"]])
    reason = str(rows[rows.metric == SAMPLING_DECISION].reason.iloc[0])
    assert f"the A/A had {share_s:.1f} s of C00's share and took" in reason, reason
    if stop == "budget spent":  # past its share at its first look: decided there, or not
        assert "(its first rounds run whatever the share)" in reason, reason
        assert (reason.startswith("undecided within budget") and "[stopped: budget spent"
                in reason) or (reason.startswith("decided") and "precise enough" in reason), \
            reason
    elif reason.startswith("undecided"):  # not precise by its most pairs: never "budget"
        assert reason.startswith("undecided at its most block pairs") and "max_n" in reason
    else:
        assert reason.startswith("decided") and "precise enough" in reason, reason
