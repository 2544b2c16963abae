"""The cases of E06's claims (C14): rows where each finding holds, fails, and sits
inside the noise, registered with claims_rows.case and run by tests/test_claim_cases.py."""

from __future__ import annotations

from claims_rows import case, sample_series, with_floor, with_samples

from perflab.experiments import e06_events_vs_wall as e06

# ------------------------------------------------------------------ the claims' cases
# C14: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def e06_rows(wall=16.281, device=15.945, submission=4.9, floor_pct=1.0, sd=0.05):
    """E06's medians and its paired per-call series of wall and host-exposed time (``sd``
    the host-exposed spread)."""
    frame = with_floor(floor_pct, ("E06", *e06.WALL, "median", wall),
                       ("E06", *e06.DEVICE, "median", device),
                       ("E06", *e06.HOST_EXPOSED, "median", wall - device),
                       ("E06", *e06.SUBMISSION, "median", submission))
    return with_samples(frame, ("E06", *e06.WALL, sample_series(wall, 0.05, 400, 6)),
                        ("E06", *e06.HOST_EXPOSED, sample_series(wall - device, sd, 400, 7)))


case("C14", e06_rows,
     lambda: e06_rows(wall=3.261, device=2.750, submission=2.673),  # the host-bound H200 MLP
     lambda: e06_rows(wall=10.0, device=9.55, sd=0.8))  # 4.5% of wall, its interval 3.7..5.3


def test_under_a_share_the_repeats_fit_it_at_five_step_times_each_on_cuda():
    """A repeat on CUDA is a wall call, a device-ahead call (after a device sleep of twice
    the host's submission) and a free-running host call: about five step times. Sized at
    three, E06 ran 2.4-2.5 s of 1.5-1.8 s shares on an H100."""
    import time
    from types import SimpleNamespace

    from experiments import load_script

    e06_script = load_script(e06.ENTRY.slug)
    step_s = 0.002

    def ctx(is_cuda):
        return SimpleNamespace(
            timing={"warmup": 2, "repeats": 400}, is_cuda=is_cuda, sync=lambda: None,
            contract={"sampling": {"rule": "adaptive", "job_budget_s": {"E06": 1.0}}},
            log=lambda msg: None)

    got = {}
    for cuda in (True, False):
        t, _ = e06_script._timing(ctx(cuda), lambda: time.sleep(step_s), time.perf_counter())
        got[cuda] = t["repeats"]
    # about 1 s / (5 x 2 ms) on CUDA, 1 s / 2 ms on a CPU (its 400 the cap); the sleep
    # overruns its 2 ms on a loaded host, so only the bounds and the ratio are asserted
    assert e06_script.MIN_REPEATS <= got[True] <= 1.0 / (4 * step_s)  # three: ~160
    assert got[False] >= 4 * got[True] or got[False] == 400
