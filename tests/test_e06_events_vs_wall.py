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
