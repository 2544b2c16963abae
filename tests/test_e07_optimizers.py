"""The cases of E07's claims (C15, C16, C17, C18): rows where each finding holds, fails, and sits
inside the noise, registered with claims_rows.case and run by tests/test_claim_cases.py."""

from __future__ import annotations

from claims_rows import ab_rows, case, rows, with_floor

from perflab.experiments import e07_optimizers as e07

# ------------------------------------------------------------------ the claims' cases
# C15, C16, C17, C18: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def e07_steps(sgd=1.407, momentum=3.605, foreach=8.969, fused=5.49, iqr=0.1):
    return rows(*[spec for v, m in ((e07.SGD, sgd), (e07.SGD_MOMENTUM, momentum),
                                    (e07.FOREACH, foreach), (e07.FUSED, fused))
                  for spec in (("E07", v, e07.OPTIMIZER_STEP, "median", m),
                               ("E07", v, e07.OPTIMIZER_STEP, "iqr", iqr))])


case("C15", e07_steps, lambda: e07_steps(fused=9.5), lambda: e07_steps(fused=8.95, iqr=0.2))
case("C17", e07_steps, lambda: e07_steps(momentum=9.5),  # momentum slower than AdamW
     lambda: e07_steps(momentum=1.45))  # 0.04 ms above SGD inside a 0.1 ms IQR


def e07_agreement(diff=3.7e-9):
    return rows(("E07", *e07.agreement_row(e07.MAX_ABS_DIFF)[1:3], "value", diff),
                ("E07", *e07.agreement_row(e07.PARAMETER_SCALE)[1:3], "value", 2.6e-2))


case("C16", e07_agreement, lambda: e07_agreement(diff=1e-3))


def e07_pair(rel=-20.0, floor_pct=2.0, p=0.001):
    return with_floor(floor_pct, *ab_rows("E07", e07.STEP_FUSED_MINUS_FOREACH, rel, base_ms=16.4,
                                          p=p))


case("C18", e07_pair, lambda: e07_pair(rel=3.0), lambda: e07_pair(rel=-1.0))
