"""Every claim can fail: for each, rows where its finding holds, rows where it does not, and
rows inside the noise — or, for a claim with no noise question, its stated reason and a check
that no noise test takes part in its verdict.

The cases are a few synthetic rows each, built with tests/claims_rows.py; each experiment's
live in its own test module, tests/test_<slug>.py, which registers them with
``claims_rows.case`` when imported. Nothing runs an experiment.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pandas as pd
import pytest
from claims_rows import CASES, as_error, floor, rows, verdict, without_process_floor
from test_e01_lying_benchmark import e01_loops, e01_rounds, e01_sampled
from test_e04_timer_vs_helper import e04_sampled
from test_e05_phases import e05_rows, e05_sampled
from test_e06_events_vs_wall import e06_rows
from test_e08_batch_sweep import e08_rows
from test_e13_sync_tax import e13_rows
from test_e14_profiler import e14_ranges
from test_e21_recompile import e21_rows
from test_e23_instrument_cost import e23_rows
from test_e24_input_pipeline import e24_workers

from perflab import experiments
from perflab.experiments import e05_phases as e05
from perflab.experiments import e13_sync_tax as e13
from perflab.experiments import e24_input_pipeline as e24
from perflab.kit import claims

TESTS = Path(__file__).resolve().parent

#: each experiment's test module, by experiment id: importing it registers its claims' cases
#: (the module pytest collects: tests/ is on sys.path under pytest's default import mode)
OWN_TESTS = {eid: importlib.import_module(f"test_{m.ENTRY.slug}")
             for eid, m in experiments.modules().items()}

# ------------------------------------------------------------------ the tests

IDS = sorted(CASES, key=lambda c: int(c[1:]))
EXACT = [c for c in IDS if experiments.claim_registry()[c].exact]


def test_every_claim_has_its_cases():
    assert set(CASES) == set(experiments.claim_registry())


def test_a_claims_cases_live_with_its_experiment():
    """Registered by the test module of the claim's own experiment, tests/test_<slug>.py."""
    slugs = {eid: m.ENTRY.slug for eid, m in experiments.modules().items()}
    for cid, c in CASES.items():
        assert c.module == f"test_{slugs[experiments.claim_registry()[cid].eid]}", (cid, c.module)


def test_each_experiments_test_module_is_imported_once():
    """The module imported here is the one pytest collects: one module object per file, so
    its cases are registered once and its tests run once."""
    for eid, mod in OWN_TESTS.items():
        path = TESTS / f"test_{experiments.module(eid).ENTRY.slug}.py"
        assert Path(mod.__file__).resolve() == path, (eid, mod.__file__)
        same = [name for name, m in list(sys.modules.items())
                if (getattr(m, "__file__", None) or "").endswith(path.name)
                and Path(m.__file__).resolve() == path]
        assert same == [mod.__name__], (eid, same)


def test_a_claim_without_an_inside_case_says_why():
    """No inside case: the claim declares why it has no noise question (``exact``)."""
    for cid, c in CASES.items():
        assert (c.inside is None) == bool(experiments.claim_registry()[cid].exact), cid


@pytest.mark.parametrize("cid", IDS)
def test_finding_holds(cid):
    v = verdict(cid, CASES[cid].holds())
    assert v.verdict == CASES[cid].holds_gives, (cid, v)


@pytest.mark.parametrize("cid", IDS)
def test_finding_fails(cid):
    v = verdict(cid, CASES[cid].fails())
    assert v.verdict == CASES[cid].fails_gives, (cid, v)
    if v.verdict == claims.DIFFERS:
        assert v.mechanism, f"{cid}: a DIFFERS names what the data shows instead"


@pytest.mark.parametrize("cid", [c for c in IDS if CASES[c].inside is not None])
def test_inside_the_noise(cid):
    v = verdict(cid, CASES[cid].inside())
    assert v.verdict == claims.INCONCLUSIVE, (cid, v)
    assert "inside the noise" in v.measured or "not resolved" in v.measured, (cid, v)
    assert v.noise_tested


@pytest.mark.parametrize("cid", EXACT)
def test_an_exact_claim_takes_no_noise_input(cid):
    """INCONCLUSIVE cannot arise: no noise test takes part in its verdict, and an A/A floor
    wider than any effect, added to its rows, changes nothing."""
    for make in (CASES[cid].holds, CASES[cid].fails):
        frame = make()
        v = verdict(cid, frame)
        assert not v.noise_tested, (cid, v)
        wide = verdict(cid, pd.concat([frame, rows(*floor(1e6))], ignore_index=True))
        assert (wide.verdict, wide.measured) == (v.verdict, v.measured), cid


@pytest.mark.parametrize("cid", IDS)
def test_missing_noise_evidence_is_never_support(cid):
    """The holding rows without C00's floor and the run's between-process floor: a claim
    that needs one is not decided."""
    frame = without_process_floor(CASES[cid].holds())
    frame = frame[frame.experiment != "C00"]
    v = verdict(cid, frame)
    if experiments.claim_registry()[cid].exact:
        assert v.verdict == claims.REPRODUCED, (cid, v)
    else:
        assert v.verdict in (claims.REPRODUCED, claims.INCONCLUSIVE), (cid, v)
        if v.verdict == claims.REPRODUCED:  # decided by a spread of its own series
            assert v.noise_tested and "(C00)" not in v.measured, (cid, v)
            assert "between-process floor" not in v.measured, (cid, v)


@pytest.mark.parametrize("cid", IDS)
def test_an_instrument_error_is_never_a_finding(cid):
    """Each row of the claim's experiment in turn an error: the verdict is ERROR, or (a row
    the claim does not need, or only its noise) what it was; never DIFFERS."""
    frame = CASES[cid].holds()
    before = verdict(cid, frame).verdict
    own = [i for i, e in enumerate(frame.experiment) if e == experiments.claim_registry()[cid].eid
           and frame.status.iloc[i] == "ok"]
    got = {verdict(cid, as_error(frame, i)).verdict for i in own}
    assert claims.ERROR in got, cid
    assert got <= {claims.ERROR, before, claims.INCONCLUSIVE}, (cid, got)


# ------------------------------------------------------------------ mixed predicates


def test_one_parts_noise_never_hides_another_parts_failure():
    """C09: the medians inside the floor, the Timer's IQR decided wider: DIFFERS. C42: per-phase sync decided above its 10% bound while the profiler's lead over it is
    inside the floor: DIFFERS, naming the part that failed; C46: workers shorten the step
    beyond the floor but input wait is decided not to dominate: DIFFERS."""
    v = verdict("C09", e04_sampled(timer=15.8, timer_sd=1.5, helper_sd=0.5))
    assert v.verdict == claims.DIFFERS and "the Timer's IQR tighter fails" in v.mechanism
    v = verdict("C42", e23_rows(phase_sync=20.0, profiler=21.0, floor_pct=2.0))
    assert v.verdict == claims.DIFFERS
    assert "phase sync below 10% fails" in v.mechanism and "profiler" not in v.mechanism
    v = verdict("C46", e24_workers(share=10.0, s0=20.0, s4=19.9))
    assert v.verdict == claims.DIFFERS and "input wait dominates fails" in v.mechanism


def test_a_part_inside_the_noise_is_named():
    v = verdict("C30", e13_rows(e13.CONTROLLED, 5.3, floor_pct=1.0))
    assert v.verdict == claims.INCONCLUSIVE
    assert "the tax is below 5%" in v.mechanism and "other parts hold" in v.mechanism


def test_workers_pair_judgement_decides_where_e24_wrote_one():
    assert verdict("C46", e24_workers(pair_p=0.001)).verdict == claims.REPRODUCED
    inside = verdict("C46", e24_workers(pair_p=0.4))
    assert inside.verdict == claims.INCONCLUSIVE and "workers shorten" in inside.mechanism


def test_e05_absent_leaves_c34_not_run():
    """No fallback to the chapter's answer: without E05 there is nothing to compare with."""
    frame = e14_ranges()
    v = verdict("C34", frame[frame.experiment != "E05"])
    assert v.verdict == claims.NOT_RUN and "E05" in v.measured


def test_article_claims_say_what_they_measured():
    ok = verdict("C44", e21_rows())
    assert "1995 ms" in ok.measured
    assert verdict("C44", e21_rows(static=2, dynamic=1)).mechanism == "dynamic=True still recompiled"
    split = verdict("C45", e21_rows(breaks=0, graphs=1))
    assert split.verdict == claims.DIFFERS and "did not break the graph" in split.mechanism
    assert verdict("C45", e21_rows(diff=0.1)).verdict == claims.DIFFERS
    assert "with 4 (" in verdict("C46", e24_workers()).measured  # the /pinned variant is no count
    cpu = rows(*[("E24", v, e24.HOST_TO_DEVICE, "value", None, "unsupported",
                  "CPU device: there is no host-to-device copy")
                 for v in (e24.COPY_PINNED, e24.COPY_PAGEABLE)])
    assert verdict("C47", cpu).verdict == claims.UNSUPPORTED


def test_c01_reads_the_loops_own_real_time():
    """The loop against itself: a synchronized median far above the loop's clock is not the
    loop lying, when the loop's own real time (read after its final sync) is what it said."""
    loops = e01_loops(short=(2.914, 2.92))
    frame = pd.concat([loops,
                       rows(("E01", "synchronized_warmed", "step_latency", "median", 3.447))])
    frame.attrs["samples"] = loops.attrs["samples"]
    v = verdict("C01", frame)
    assert v.verdict == claims.DIFFERS and "2.920 ms real" in v.measured


def test_an_interval_needs_three_samples():
    """Two rounds of loops: one resampled pair is no interval, so C01 is not decided, however
    far its ratio lies from the bound."""
    v = verdict("C01", e01_loops(short=(2.914, 2.92), rounds=2))
    assert v.verdict == claims.INCONCLUSIVE and "needs at least 3" in v.measured, v


def test_c04_sets_each_call_against_its_own_completion():
    """The calls' own completion is the reference: a synchronized series that drifted
    (measured later, 30% slower) does not make the host's clock look like it lies; a run
    without the paired completions is judged against the synchronized series as before."""
    v = verdict("C04", e01_sampled(host=16.4, med=16.43))
    assert v.verdict == claims.DIFFERS and "when the same calls completed" in v.measured
    drifted = e01_sampled(host=16.4, med=16.43)
    rows_ = drifted.copy()
    sel = (rows_.variant == "synchronized_warmed") & (rows_.statistic == "median")
    rows_.loc[sel, "value"] = 16.43 * 1.3
    rows_.attrs["samples"] = drifted.attrs["samples"]
    assert verdict("C04", rows_).verdict == claims.DIFFERS
    old = verdict("C04", e01_sampled(host=4.866, paired=False))
    assert old.verdict == claims.REPRODUCED and "synchronized (30%)" in old.measured


def test_c04_judges_the_ratio_over_the_rounds():
    """With the host-return calls spread over E01's rounds, the ratio is judged round by
    round: a host whose speed drifts through the job (one H200 run's calls returned at 95%
    of completion, the next run's at 76%) is not decided however tight each round is, and
    the verdict names the rounds; rounds that agree decide it."""
    v = verdict("C04", e01_rounds((0.76, 0.99, 0.80, 0.97, 0.85, 0.95)))
    assert v.verdict == claims.INCONCLUSIVE and "median of 6 rounds" in v.measured, v
    assert verdict("C04", e01_rounds((0.75, 0.76, 0.77, 0.76, 0.75, 0.77))).verdict == \
        claims.REPRODUCED
    assert verdict("C04", e01_rounds((0.95, 0.94, 0.96, 0.95, 0.95, 0.96))).verdict == \
        claims.DIFFERS


def test_c11_resamples_the_interleaved_series_together():
    """A machine that slows to half its speed over the job, the phased and the uninstrumented
    steps measured in turn: the drift lands on both, and resampled together their gap stays
    decided; the same samples read as one series after the other are not."""
    base = e05_sampled(gap_pct=4.8, total_sd=0.01)
    smp = base.attrs["samples"].copy()
    smp["value"] = smp.value * (1 + smp["index"] / smp["index"].max())
    inter = pd.concat([base, rows(("E05", e05.UNINSTRUMENTED_TOTAL, e05.INTERLEAVED_BLOCKS,
                                   "value", 10))], ignore_index=True)
    inter.attrs["samples"] = smp
    together = verdict("C11", inter)
    assert together.verdict == claims.REPRODUCED and "+4.8%" in together.measured, together
    apart = base.copy()
    apart.attrs["samples"] = smp
    assert verdict("C11", apart).verdict == claims.INCONCLUSIVE


def test_c13_says_what_fed_the_step():
    served = verdict("C13", e05_rows())
    assert "one batch served from host memory, no loader" in served.measured
    fed = verdict("C13", e05_sampled(loader=True))
    assert fed.verdict == claims.REPRODUCED and "fed by the workload's loader" in fed.measured


def test_c14_names_a_host_bound_step():
    v = verdict("C14", e06_rows(wall=3.261, device=2.750, submission=2.673))
    assert v.verdict == claims.DIFFERS and "host-bound, not device-bound" in v.mechanism
    assert "2.673 ms" in v.mechanism and "16%" in v.mechanism


def test_a_tax_of_zero_is_small_but_not_real():
    """A tax inside the noise (+0.08%, p 0.28: the H200's small step in one run, any CPU):
    C31 claims only that it is small, decided 4.9 points below 5%; C30 claims it real too,
    which the noise leaves open."""
    v = verdict("C31", e13_rows(e13.SMALL, 0.08, floor_pct=2.8, p=0.28))
    assert v.verdict == claims.REPRODUCED, v.measured
    v = verdict("C30", e13_rows(e13.CONTROLLED, 0.08, floor_pct=2.8, p=0.28))
    assert v.verdict == claims.INCONCLUSIVE and "the tax is real" in v.mechanism


def test_c22_never_compares_a_peak_with_itself():
    """Three batch sizes: the second-smallest is the second-largest, so the smallest is read."""
    frame = e08_rows(peaks=(600.0, 800.0, 810.0), latency=(3.3, 3.4, 10.0),
                     batches=(32, 256, 2048))
    v = verdict("C22", frame)
    assert v.verdict == claims.DIFFERS and "at 32 vs" in v.measured and "at 256" in v.measured


# ------------------------------------------------------------------ a statistic's own interval

# C09 of a run from before E04's instruments took turns (no A/B of rounds): both parts by
# their own intervals
OWN_INTERVAL = {"C04": e01_sampled, "C09": lambda: e04_sampled(rounds=False),
                "C11": e05_sampled, "C12": e05_sampled, "C13": e05_sampled}


@pytest.mark.parametrize("cid", sorted(OWN_INTERVAL))
def test_own_interval_says_which_noise_decided(cid):
    """A share, a ratio or a gap of medians is decided by its own 95% interval over the run's
    samples, and says so; C00's A/A floor (a paired block difference) plays no part."""
    v = verdict(cid, OWN_INTERVAL[cid]())
    assert v.verdict in claims.DECIDED, (cid, v)
    assert "95% interval" in v.measured and "clear of the" in v.measured, (cid, v)
    assert "block bootstrap" in v.measured and "A/A floor" not in v.measured, (cid, v)


@pytest.mark.parametrize("cid", sorted(OWN_INTERVAL))
def test_own_interval_without_samples_is_not_resolved(cid):
    """The rows alone (a run without its samples CSV, as the shipped reference runs are):
    INCONCLUSIVE with the reason, however far the rows' value lies from the bound."""
    frame = OWN_INTERVAL[cid]()
    frame.attrs.pop("samples")
    v = verdict(cid, frame)
    assert v.verdict == claims.INCONCLUSIVE and "no raw samples" in v.measured, (cid, v)


def test_c13_share_straddling_its_bound_is_named():
    v = verdict("C13", e05_sampled({"input_wait": (0.75, 1.2), "forward": (2.9, 0.1),
                                    "backward": (4.7, 0.2), "optimizer": (8.4, 0.2),
                                    "logging": (0.064, 0.01)}))
    assert v.verdict == claims.INCONCLUSIVE and "straddles the 5% bound" in v.measured


def test_c12_logging_that_absorbs_nothing_differs_by_its_own_interval():
    """The host-bound H200: unsynchronized logging no longer than synchronized, decided by the
    interval of the two medians' difference (not the IQR of single steps)."""
    nosync = {"forward": (0.8, 0.14), "backward": (1.656, 0.418), "logging": (0.060, 0.01)}
    v = verdict("C12", e05_sampled(nosync=nosync))
    assert v.verdict == claims.DIFFERS and "logging absorbs queued work fails" in v.mechanism
    assert "clear of the 0 ms bound" in v.measured
    wide = {**nosync, "logging": (0.066, 0.2)}
    v = verdict("C12", e05_sampled(nosync=wide))
    assert "straddles the 0 ms bound" in v.measured
