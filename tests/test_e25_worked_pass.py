"""The cases of E25's claims (C43): rows where each finding holds, fails, and sits
inside the noise, registered with claims_rows.case and run by tests/test_claim_cases.py."""

from __future__ import annotations

from claims_rows import ab_rows, case, with_floor

from perflab.experiments import e25_worked_pass as e25

# ------------------------------------------------------------------ the claims' cases
# C43: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def e25_rows(rel=-24.0, floor_pct=2.0, p=0.001, thr=True, agree=3.7e-9):
    """E25's pair (its two sides and their difference), the throughput change (``thr``), and
    the one-step agreement (``agree``: max |diff| at parameter scale 2.6e-2; None: absent)."""
    specs = [(e25.FOREACH, "step_latency", "median", 19.1),
             (e25.FUSED, "step_latency", "median", 19.1 * (1 + rel / 100))]
    if thr:
        specs.append((e25.DIFFERENCE, e25.THROUGHPUT_REL, "value", -rel))
    if agree is not None:
        specs += [(e25.FUSED_VS_FOREACH, e25.MAX_ABS_DIFF, "value", agree),
                  (e25.FUSED_VS_FOREACH, e25.PARAMETER_SCALE, "value", 2.6e-2)]
    return with_floor(floor_pct, *(("E25", *x) for x in specs),
                      *ab_rows("E25", e25.DIFFERENCE, rel, base_ms=19.1, p=p))


case("C43", e25_rows, lambda: e25_rows(rel=5.0), lambda: e25_rows(rel=-1.0))
