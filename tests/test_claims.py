"""Claims: each verdict from synthetic rows, the chapter's own numbers, the registry."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest
from claims_rows import (
    PEER_SHAPE,
    ab_rows,
    rows,
    sample_series,
    verdict,
    with_floor,
    with_process_floor,
    with_samples,
)

from perflab import experiments
from perflab.core import io
from perflab.core.names import SAMPLING_DECISION, SAMPLING_FIXED_PAIRS
from perflab.experiments import e06_events_vs_wall as e06
from perflab.experiments.c00_calibration import AA_FLOOR, FLOOR_PAIRS_VARIANT
from perflab.experiments.catalogue import EXPERIMENTS
from perflab.instruments import ab
from perflab.kit import claims
from perflab.views import reference

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workflow_rules import rule_names


def shares(**pct: float) -> list[tuple]:
    return [("E05", f"sync/{p}", "phase_share", "value", v) for p, v in pct.items()]


# ------------------------------------------------------------------ each verdict


def test_largest_phase_reproduced_and_differs_with_mechanism():
    def phases(samples=True, **ms):
        frame = rows(*shares(**{p: 100 * m / sum(ms.values()) for p, m in ms.items()}),
                     *[("E05", f"sync/{p}", "phase_time", s, x) for p, m in ms.items()
                       for s, x in (("median", m), ("iqr", 0.1))])
        return with_samples(frame, *[("E05", f"sync/{p}", "phase_time",
                                      sample_series(m, 0.1 / 1.349, 400, k))
                                     for k, (p, m) in enumerate(ms.items())]) if samples \
            else frame

    ok = verdict("C10", phases(forward=2.9, backward=4.7, optimizer=8.4))
    assert ok.verdict == claims.REPRODUCED
    assert "interval" in ok.measured or "interval" in ok.tolerance
    # the same medians without E05's samples: the lead is not judged by a step's IQR
    assert verdict("C10", phases(False, forward=2.9, backward=4.7, optimizer=8.4)).verdict \
        == claims.INCONCLUSIVE
    differs = verdict("C10", phases(forward=2.0, backward=5.5, optimizer=2.5))
    assert differs.verdict == claims.DIFFERS
    assert "backward, not the optimizer, is the largest phase here" in differs.mechanism
    assert "25.0%" in differs.measured
    # shares alone (no phase times, no IQR): the order is not decided
    assert verdict("C10", rows(*shares(forward=17, backward=28, optimizer=51))).verdict \
        == claims.INCONCLUSIVE


def tax(tax_ms: float, rel: float, resolved: float | None = None, spread: float | None = None):
    specs = [("E13", "controlled/tax", "tax", "value", tax_ms),
             ("E13", "controlled/tax", "tax_rel", "value", rel)]
    if resolved is not None:
        specs.append(("E13", "controlled/tax", "difference_resolved", "value", resolved))
    if spread is not None:
        specs.append(("E13", "controlled/tax", "block_spread", "value", spread))
    return rows(*specs)


def test_an_ab_is_decided_only_against_the_aa_floor():
    """The job's own flag (significance alone, judged without a floor) never decides: with
    no C00 the tax is not resolved, with C00 but no floor of today's statistic neither, and
    with the floor the A/B's judgement rows are re-judged against it."""
    flagged = tax(0.43, 2.7, resolved=1, spread=0.1)
    v = verdict("C30", flagged)
    assert v.verdict == claims.INCONCLUSIVE and "no A/A floor (C00 did not run)" in v.measured
    old_c00 = pd.concat([flagged, rows(("C00", "aa", "aa_noise_floor", "value", 8.3))])
    v = verdict("C30", old_c00)
    assert v.verdict == claims.INCONCLUSIVE and "C00 predates it" in v.measured
    judged = with_floor(0.5, *ab_rows("E13", "controlled/tax", 2.7, metric="tax", base_ms=16))
    assert verdict("C30", judged).verdict == claims.REPRODUCED
    big = verdict("C30", with_floor(0.5, *ab_rows("E13", "controlled/tax", 18.0, metric="tax",
                                                   base_ms=16)))
    assert big.verdict == claims.DIFFERS and "+18.0%" in big.measured and big.mechanism
    inside = verdict("C30", with_floor(4.0, *ab_rows("E13", "controlled/tax", 2.7, metric="tax",
                                                      base_ms=16)))
    assert inside.verdict == claims.INCONCLUSIVE and "A/A floor 4%" in inside.measured


def _stopped(line: str) -> list[tuple]:
    """An adaptive A/B's sampling_decision row under E13's tax (its window: the rule's line)."""
    return [("E13", "controlled/tax", SAMPLING_DECISION, "value", 24.0)], line


def test_an_ab_the_stopping_rule_left_undecided_supports_nothing():
    """Rows that a fixed-count judgement would call resolved, but the adaptive A/B's stopping
    rule ran out of budget undecided: the claim is undecided, and says so; a decided stop
    leaves the judgement to the A/A floor as before."""
    base = ab_rows("E13", "controlled/tax", 2.7, metric="tax", base_ms=16)
    for line, want in (("undecided within budget (24 blocks, 95% anytime interval -0.4..5 % "
                        "against the floor)", claims.INCONCLUSIVE),
                       ("decided: higher (95% anytime interval 1.2..4 %, 12 blocks)",
                        claims.REPRODUCED),
                       # stopped on the claim's thresholds: only 0's own state gates the
                       # "real" part (the 5 % bound is judged by its own interval)
                       ("undecided within budget (24 blocks, 95% anytime interval 1.2..4 % "
                        "against 0 % (higher), 5 % (undecided))", claims.REPRODUCED),
                       ("undecided within budget (24 blocks, 95% anytime interval -0.4..5 % "
                        "against 0 % (undecided), 5 % (lower))", claims.INCONCLUSIVE)):
        specs, window = _stopped(line)
        frame = with_floor(0.5, *base, *specs)
        frame.loc[frame.metric == SAMPLING_DECISION, "window"] = \
            window + ab.DECISION_SEP + " change against the A/A floor"
        v = verdict("C30", frame)
        assert v.verdict == want, v
        if want == claims.INCONCLUSIVE:
            assert "undecided within budget (24 blocks" in v.measured


def test_an_adaptive_abs_short_blocks_are_held_to_the_floor_of_the_pairs_they_fill():
    """An adaptive A/B of 10 short block pairs that fill 4 of the fixed contract's: C00's
    floor for 4 pairs (wider) judges it, not the floor for 10."""
    c00 = [("C00", FLOOR_PAIRS_VARIANT.format(m), AA_FLOOR[1], "value", pct)
           for m, pct in ((4, 4.0), (8, 1.0))]
    base = [*ab_rows("E13", "controlled/tax", 2.7, metric="tax", base_ms=16), *c00]
    assert verdict("C30", with_floor(1.0, *base)).verdict == claims.REPRODUCED
    filled = ("E13", "controlled/tax", SAMPLING_FIXED_PAIRS, "value", 4.0)
    v = verdict("C30", with_floor(1.0, *base, filled))
    assert v.verdict == claims.INCONCLUSIVE and "A/A floor 4%" in v.measured, v


def optimizer_steps(foreach: float, fused: float, iqr: float):
    return rows(("E07", "adamw_foreach", "optimizer_step", "median", foreach),
                ("E07", "adamw_foreach", "optimizer_step", "iqr", iqr),
                ("E07", "adamw_fused", "optimizer_step", "median", fused),
                ("E07", "adamw_fused", "optimizer_step", "iqr", iqr))


def test_fused_step_judged_against_the_iqr_when_no_flag_is_written():
    assert verdict("C15", optimizer_steps(9.0, 5.5, 0.1)).verdict == claims.REPRODUCED
    assert verdict("C15", optimizer_steps(5.5, 9.0, 0.1)).verdict == claims.DIFFERS
    inside = verdict("C15", optimizer_steps(9.0, 8.95, 0.2))
    assert inside.verdict == claims.INCONCLUSIVE


def test_paired_difference_is_rejudged_against_the_floor():
    def pair(rel, p, floor=2.0):
        from test_e25_worked_pass import e25_rows

        return e25_rows(rel=rel, p=p, floor_pct=floor)

    assert verdict("C43", pair(-24, 0.001)).verdict == claims.REPRODUCED
    inside = verdict("C43", pair(-3, 0.4))
    assert inside.verdict == claims.INCONCLUSIVE and "p=0.4" in inside.measured
    assert verdict("C43", pair(+5, 0.001)).verdict == claims.DIFFERS
    # significant, but no larger than two copies of the same step differ
    assert verdict("C43", pair(-3, 0.001, floor=4.0)).verdict == claims.INCONCLUSIVE


def test_c43_is_not_reproduced_on_latency_alone():
    """The claim is latency down, throughput up, one contract, the same result: a faster step
    without its throughput or agreement rows is undecided, one whose result differs fails."""
    from test_e25_worked_pass import e25_rows

    for rows_ in (e25_rows(thr=False), e25_rows(agree=None)):
        v = verdict("C43", rows_)
        assert v.verdict == claims.INCONCLUSIVE and "not measured" in v.measured, v
    wrong = verdict("C43", e25_rows(agree=1e-3))
    assert wrong.verdict == claims.DIFFERS and "same result fails" in wrong.mechanism


def test_not_run_and_unsupported():
    empty = rows(("E01", "first_step", "step_latency", "value", 1.0))
    v = verdict("C23", empty)
    assert v.verdict == claims.NOT_RUN and "E09 not run" in v.measured
    cpu = rows(("E06", *e06.WALL, "median", 16.0),
               ("E06", *e06.DEVICE, "value", None, "unsupported",
                "CUDA events need a CUDA device"),
               ("E06", *e06.HOST_EXPOSED, "value", None, "unsupported",
                "CUDA events need a CUDA device"))
    v = verdict("C14", cpu)
    assert v.verdict == claims.UNSUPPORTED and "CUDA" in v.measured


def test_an_oom_row_is_a_finding_not_a_crash():
    frame = rows(("E09", "persistent", "bytes", "value", None, "oom", "out of memory"))
    v = verdict("C23", frame)
    assert v.verdict == claims.DIFFERS and "oom" in v.measured


def test_an_error_row_is_its_own_verdict():
    """An instrument that failed says nothing about the finding: ERROR, naming the row."""
    frame = rows(("E09", "persistent", "bytes", "value", None, "error", "counter read failed"))
    v = verdict("C23", frame)
    assert v.verdict == claims.ERROR
    assert "E09 persistent bytes" in v.measured and "counter read failed" in v.measured
    # an error inside a series the claim reads by prefix is no evidence of its shape either
    series = rows(*shares(forward=17, backward=28),
                  ("E05", "sync/optimizer", "phase_share", "value", None, "error", "no sync"))
    assert verdict("C10", series).verdict == claims.ERROR
    assert claims.ERROR in claims.VERDICTS and claims.ERROR not in claims.DECIDED


def test_a_registered_noise_source_decides_first():
    """The hook a noise source plugs into: one place, consulted before the rows' spreads."""
    frame = with_floor(0.5, *ab_rows("E13", "controlled/tax", 2.7, metric="tax", base_ms=16))

    def floor(ev, eid, variant, effect):
        return (abs(effect) > 1.0, "a wider floor of 1.0 ms") if eid == "E13" else None

    claims.NOISE_SOURCES.insert(0, floor)
    try:
        v = verdict("C30", frame)
    finally:
        claims.NOISE_SOURCES.remove(floor)
    assert v.verdict == claims.INCONCLUSIVE and "a wider floor" in v.measured


def test_no_noise_measure_is_not_support():
    """A claim judged by its own interval, in a run without the samples it reads, is not
    decided; one judged as an A/B without the judgement rows is not either."""
    frame = rows(("E14", "profiler_overhead", "overhead", "value", 9.6),
                 ("E14", "profiler_overhead", "overhead_rel", "value", 58.0))
    v = verdict("C33", frame)
    assert v.verdict == claims.INCONCLUSIVE
    assert "not resolved: no noise measure in the rows" in v.measured
    assert "as measured it holds" in v.measured
    frame = rows(("E03", "warmup_0", "step_latency", "mean", 17.3),
                 ("E03", "warmup_0", "step_latency", "median", 16.4))
    v = verdict("C07", frame)
    assert v.verdict == claims.INCONCLUSIVE and "no raw samples of E03 warmup_0" in v.measured


# ------------------------------------------------------------------ the chapter's own numbers


def test_the_chapter_reproduces_itself():
    """Every predicate holds on the chapter's published rows, or lacks a row the chapter never
    gave. The chapter publishes no A/A floor and few spreads, so a claim that needs one is
    INCONCLUSIVE on its rows; every such part holds as measured."""
    frame = experiments.evaluate_claims(reference.load_chapter().rows)
    # comparisons between separate processes are judged by the spread of the chapter's own
    # medians of the controlled step in its separate sections (E01, E03, E04, E08; E14's
    # unprofiled calls follow profiling sessions, so it is no peer);
    # C41's floor is not shown to carry over to E20's step (the chapter gives no eager one)
    across = frame.set_index("claim").loc[["C19", "C20", "C21", "C41"]]
    assert across.measured.iloc[:3].str.contains(
        r"between-process floor 0.67% \(4 processes: E01, E03, E04, E08\)").all()
    assert across.verdict.iloc[:3].eq(claims.REPRODUCED).all()
    assert across.verdict["C41"] == claims.INCONCLUSIVE
    assert "no eager steady state" in across.measured["C41"]
    bad = frame[~frame.verdict.isin([claims.REPRODUCED, claims.NOT_RUN, claims.INCONCLUSIVE])]
    assert bad.empty, bad[["claim", "verdict", "measured"]].to_string()
    undecided = frame[frame.verdict == claims.INCONCLUSIVE]
    leans = undecided[undecided.measured.str.contains("as measured it fails")]
    assert leans.empty, leans[["claim", "measured"]].to_string()
    assert undecided.measured.str.contains("as measured it holds").all()
    # the chapter publishes no interleaved E07 pair (only "roughly 13 ms"), no tensor
    # accounting of the retained graph (C28), and no numbers for the companion article's
    # findings (recompilation, input pipeline): those are NOT RUN
    article = {c.cid for c in experiments.claim_registry().values() if c.chapter.startswith("article:")}
    assert article == {"C44", "C45", "C46", "C47"}
    # nor for the findings beyond both texts (D01: data parallel)
    beyond = {c.cid for c in experiments.claim_registry().values() if c.chapter.startswith("extension:")}
    assert beyond == {"C48", "C49", "C50", "C51", "C52"}
    assert set(frame[frame.verdict == claims.NOT_RUN].claim) == {"C18", "C28"} | article | beyond


def test_every_claim_is_not_run_on_an_empty_run():
    frame = experiments.evaluate_claims(pd.DataFrame(columns=io.COLUMNS))
    assert set(frame.verdict) == {claims.NOT_RUN}
    assert list(frame.columns) == claims.CLAIM_COLUMNS


# ------------------------------------------------------------------ the registry


def test_every_claim_names_a_target_that_exists():
    rules = rule_names()
    for c in experiments.claim_registry().values():
        assert c.eid in EXPERIMENTS, c.cid
        if c.eid in EXPERIMENTS:
            assert c.target in rules, f"{c.cid}: no rule {c.target}"
            assert c.command == f"snakemake --cores 1 {c.target}"
        else:
            assert "not in this workflow yet" in c.command


def test_every_implemented_experiment_with_a_chapter_finding_has_a_claim():
    claimed = {c.eid for c in experiments.claim_registry().values()}
    for eid in ("E01", "E02", "E03", "E04", "E05", "E06", "E07", "E08", "E13", "E14", "E23", "E25"):
        assert eid in claimed, eid


def test_a_claim_id_cannot_be_registered_twice():
    with pytest.raises(ValueError):
        claims.claim("C01", "E01", "again", chapter="", tolerance="")(lambda ev: None)


def leak(retained: list[float], metric: str = "retained_graph_bytes") -> pd.DataFrame:
    specs = []
    for variant, series in (("retained_graph", retained), ("no_grad", [0.0] * len(retained)),
                            ("item", [0.0] * len(retained))):
        specs += [("E11", f"{variant}/i{10 * i:02d}", metric, "value", v) for i, v in enumerate(series)]
    return rows(*specs)


def test_leak_claim_on_a_cpu_reads_the_retained_graph_bytes():
    assert verdict("C27", leak([1.5, 16.5, 31.5, 46.5])).verdict == claims.REPRODUCED
    flat = verdict("C27", leak([1.5, 1.5, 1.6, 1.5]))
    assert flat.verdict == claims.DIFFERS and "does not grow" in flat.mechanism
    # on CUDA the allocator counter is read first
    assert verdict("C27", leak([164.1, 542.8, 922.1], "allocated")).verdict == claims.REPRODUCED


def test_agreement_claims_are_undecided_inside_the_aa_floor():
    """C05 (medians within 10%) is decided when the difference lies farther from the 10%
    threshold than C00's floor, either way: 1.5% apart agree under a floor of 8% (8.5 points
    from the threshold), not under 31%; 18% apart differ under a floor of 5, not of 13; no
    C00 row: no floor, not decided."""
    def e02(inf, grad, floor=None):
        return with_floor(floor, ("E02", "forward_inference", "step_latency", "median", inf),
                          ("E02", "forward_grad", "step_latency", "median", grad))

    assert verdict("C05", e02(1.015, 1.0, floor=8)).verdict == claims.REPRODUCED
    assert verdict("C05", e02(1.015, 1.0, floor=31)).verdict == claims.INCONCLUSIVE
    assert verdict("C05", e02(1.18, 1.0, floor=5)).verdict == claims.DIFFERS
    assert verdict("C05", e02(1.18, 1.0, floor=13)).verdict == claims.INCONCLUSIVE
    v = verdict("C05", e02(1.015, 1.0))
    assert v.verdict == claims.INCONCLUSIVE and "no A/A floor (C00 did not run)" in v.measured


def test_comparisons_across_processes_are_judged_by_the_between_process_floor():
    """C20 compares batch sizes that each ran in a fresh process, C41 the steady states of the
    cold and warm processes. C00's A/A floor is measured within one process (the same helper on
    the same step read 2.95-3.45 ms across jobs of one H200 run), so it does not decide them,
    however small: the run's between-process floor does (the jobs that time the controlled
    step, each its own process), and without it they say so."""
    def e08(m32, m128, floor=None, process=None):
        return with_process_floor(with_floor(floor, *[
            ("E08", f"batch_{b}", "step_latency", "median", m)
            for b, m in ((32, m32), (64, (m32 + m128) / 2), (128, m128))]), process)

    for frame in (e08(3.342, 3.625, floor=8.3), e08(4.000, 6.000, floor=1.0), e08(4.0, 4.45)):
        v = verdict("C20", frame)
        assert v.verdict == claims.INCONCLUSIVE
        assert "not resolved: separate processes, no between-process floor (0 process" in \
            v.measured
    # +8.5% is 1.5 points inside the 10% threshold: decided under a floor of 1%, not of 8%
    assert verdict("C20", e08(3.342, 3.625, process=1.0)).verdict == claims.REPRODUCED
    assert verdict("C20", e08(3.342, 3.625, process=8.0)).verdict == claims.INCONCLUSIVE
    assert verdict("C20", e08(4.0, 6.0, process=8.0)).verdict == claims.DIFFERS
    # one job of the controlled step is no A/A: the floor needs two processes
    one = with_process_floor(e08(3.342, 3.625), 5.0)
    one = one[(one.input_shape != PEER_SHAPE) | (one.experiment == "C00")]
    v = verdict("C20", one)
    assert v.verdict == claims.INCONCLUSIVE and "1 process(es)" in v.measured
    # the floor's processes are named in the verdict
    v = verdict("C20", e08(3.342, 3.625, process=1.0))
    assert "(4 processes: C00, E01, E03, E04)" in v.measured

    def e20(cold_s, warm_s, steady_cold, steady_warm, eager=(1.9, 1.86), process=None):
        return with_process_floor(rows(
                    ("E20", "cold/compiled", "first_call", "value", cold_s),
                    ("E20", "warm/compiled", "first_call", "value", warm_s),
                    ("E20", "cold/compiled", "forward_latency", "median", steady_cold),
                    ("E20", "warm/compiled", "forward_latency", "median", steady_warm),
                    ("E20", "cold/eager", "forward_latency", "median", eager[0]),
                    ("E20", "warm/eager", "forward_latency", "median", eager[1])),
                    process)

    same = verdict("C41", e20(10.9, 2.5, 0.892, 0.885))
    assert same.verdict == claims.INCONCLUSIVE and "0 process(es)" in same.measured
    assert verdict("C41", e20(10.9, 2.5, 0.892, 0.885, process=3.0)).verdict == \
        claims.REPRODUCED
    assert verdict("C41", e20(10.9, 2.5, 0.892, 1.5, process=3.0)).verdict == claims.DIFFERS
    # E20's own eager A/A across its processes (-8%) beyond the floor: it does not carry over
    far = verdict("C41", e20(10.9, 2.5, 0.892, 0.885, eager=(1.9, 1.75), process=3.0))
    assert far.verdict == claims.INCONCLUSIVE and "does not carry over" in far.measured
    # the first call not shortened is a finding whatever the steady states do
    assert verdict("C41", e20(10.9, 9.0, 0.892, 0.885)).verdict == claims.DIFFERS


def test_c41_in_one_process_needs_a_cache_hit():
    """The cold job's pair compares the cold compile's code with what its cache serves: a
    second compile that Inductor did not serve from the cache compares the fresh code with
    itself, so however close the two, it decides nothing; the pair, when present, is what
    decides, not the processes' medians 30% apart."""
    from test_e20_compile_cache import e20_paired

    assert verdict("C41", e20_paired()).verdict == claims.REPRODUCED
    v = verdict("C41", e20_paired(hits=0))
    assert v.verdict == claims.INCONCLUSIVE and "not an Inductor cache hit" in v.measured
    # an interval reaching past -10% is not decided, however far the median from it
    assert verdict("C41", e20_paired(gap_pct=-5.0, ci_pct=6.0)).verdict == claims.INCONCLUSIVE
    assert verdict("C41", e20_paired(gap_pct=-30.0)).verdict == claims.DIFFERS



def test_the_claims_job_hands_the_run_samples_to_the_claims(tmp_path):
    """build_claims reads the samples CSVs beside the rows: C13 is decided by its share's own
    interval with them, and not resolved from the rows alone."""
    import runpy

    from test_e05_phases import e05_sampled

    frame = e05_sampled()
    csv, samples = tmp_path / "e05_phases.csv", tmp_path / "e05_phases_samples.csv"
    io.write_results(csv, frame.to_dict("records"))
    io.write_samples(samples, frame.attrs["samples"].to_dict("records"))
    main = runpy.run_path(str(Path(__file__).resolve().parents[1] / "scripts"
                              / "build_claims.py"))["main"]
    out = {}
    for name, given in (("with", [samples]), ("without", [])):
        main([csv], tmp_path / f"claims_{name}.csv", given)
        got = pd.read_csv(tmp_path / f"claims_{name}.csv").set_index("claim")
        out[name] = got.loc["C13"]
    assert out["with"].verdict == claims.REPRODUCED and "95% interval" in out["with"].measured
    assert out["without"].verdict == claims.INCONCLUSIVE
    assert "no raw samples" in out["without"].measured


def test_c09_gap_near_its_bound_is_judged_by_the_rounds_not_the_series():
    """The H200's second run: Timer 2.772 vs helper 2.894 ms (-4.2%), each series tight, so
    the interval of two series measured apart cleared -5%, while the run before read -19%:
    a flip. As the A/B of the rounds, -4.2% lies 0.8 points from -5% under a 3% A/A floor:
    INCONCLUSIVE, and the -19% of the other run is DIFFERS."""
    from test_e04_timer_vs_helper import e04_sampled

    near = dict(timer=2.772, helper=2.894, timer_sd=0.013, helper_sd=0.065)
    apart = verdict("C09", e04_sampled(**near, rounds=False))
    assert apart.verdict == claims.REPRODUCED, apart.measured
    frame = e04_sampled(**near)
    frame.loc[frame.metric == "aa_median_diff_bound", "value"] = 3.0
    turns = verdict("C09", frame)
    assert turns.verdict == claims.INCONCLUSIVE, turns.measured
    assert "A/A floor 3% (C00)" in turns.measured and "Timer - helper -4.2%" in turns.measured
    frame = e04_sampled(timer=2.996, helper=3.698, timer_sd=0.28, helper_sd=0.34)
    assert verdict("C09", frame).verdict == claims.DIFFERS


def test_c09_orders_the_two_iqrs_by_the_interval_of_their_ratio():
    """The Timer's IQR against the helper's is an estimate against an estimate: a Timer
    spread twice the helper's is decided against the claim, two close spreads are not
    decided (one CPU run read 4.49 vs 4.10 ms from 64 block means and 400 calls)."""
    from test_e04_timer_vs_helper import e04_sampled

    wide = verdict("C09", e04_sampled(timer_sd=0.3, helper_sd=0.14))
    assert wide.verdict == claims.DIFFERS, wide.measured
    close = verdict("C09", e04_sampled(timer_sd=0.15, helper_sd=0.14))
    assert close.verdict == claims.INCONCLUSIVE, close.measured
    assert "IQR" in close.measured and "straddles the 0% bound" in close.measured


def test_c39_reads_no_oom_row_as_not_measured_not_as_fitting():
    """SDPA "never runs out" only where it was measured at the length manual ran out at."""
    from test_e18_attention_seq import e18_rows

    from perflab.experiments import e18_attention_seq as e18

    full = e18_rows()
    assert verdict("C39", full).verdict == claims.REPRODUCED
    gone = full[~((full.variant == e18.seq_variant(4096, e18.SDPA)))]
    v = verdict("C39", gone)
    assert v.verdict == claims.INCONCLUSIVE and "no peak measured" in v.measured, v
