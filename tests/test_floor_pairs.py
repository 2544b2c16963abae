"""An A/B is held to C00's A/A floor for its own block pairs.

C00 bounds the median paired block difference of an A/A for several pair counts (the
run's floor is the one for 12); an A/B of n pairs is judged against the bound for the
largest count not above n. Pure rows: no experiment runs.
"""

from __future__ import annotations

import pytest
from claims_rows import ab_rows, rows

from perflab import experiments
from perflab.experiments import floors as calibration
from perflab.experiments.c00_calibration import AA_FLOOR, FLOOR_PAIRS_VARIANT
from perflab.kit import claims

#: C00's bounds by pair count (%), and the run's floor (the 12-pair one)
BOUNDS = {4: 10.0, 12: 6.0, 24: 3.5}


def c00(bounds: dict[int, float] = BOUNDS) -> list[tuple]:
    return [("C00", *AA_FLOOR, "value", bounds.get(12, 6.0))] + [
        ("C00", FLOOR_PAIRS_VARIANT.format(m), AA_FLOOR[1], "value", v)
        for m, v in bounds.items()]


def tax_ab(rel_pct: float, pairs: int, bounds: dict[int, float] = BOUNDS):
    """C00's bounds and an E13 tax A/B of ``pairs`` block pairs, ``rel_pct`` % of A."""
    frame = rows(*c00(bounds), *ab_rows("E13", "small/tax", rel_pct, ci_pct=0.5))
    frame.loc[frame.experiment == "E13", "n"] = pairs
    return frame


@pytest.mark.parametrize("pairs, floor", [(None, 6.0), (24, 3.5), (30, 3.5), (12, 6.0),
                                          (13, 6.0), (8, 10.0), (2, 10.0)])
def test_the_floor_for_a_pair_count_is_the_bound_of_the_largest_count_not_above(pairs, floor):
    # below every count written (2 pairs): the fewest's bound, the widest, never a narrower one
    assert calibration.noise_floor_pct(rows(*c00()), pairs) == floor


def test_a_run_from_before_the_bounds_per_count_keeps_its_one_floor():
    only = rows(("C00", *AA_FLOOR, "value", 6.0))
    assert calibration.noise_floor_pct(only, 24) == 6.0
    assert calibration.noise_floor_pct(rows(("E13", "x", "m", "value", 1.0)), 24) is None


def test_an_ab_is_judged_against_the_floor_of_its_own_pairs():
    # +5%: beyond the 24-pair bound (3.5%), inside the 12-pair one (6%)
    assert calibration.verdict_of(tax_ab(5.0, 24), "E13", "small/tax") == "resolved"
    assert calibration.verdict_of(tax_ab(5.0, 12), "E13", "small/tax") == "inconclusive"
    # the listing carries the floor each A/B was held to
    table = calibration.ab_comparisons(tax_ab(5.0, 24))
    assert table.floor_pct.tolist() == [3.5]
    # an explicit floor still overrides every count
    assert calibration.verdict_of(tax_ab(5.0, 24), "E13", "small/tax",
                                  floor_pct=9.0) == "inconclusive"


@pytest.mark.parametrize("pairs, decided", [(24, True), (12, False)])
def test_the_claims_read_the_floor_of_the_abs_own_pairs(pairs, decided):
    # against 0 (claims.resolved) and against a 5% bound (claims.ab_against): +1% is 4
    # points from 5%, beyond 3.5 but not 6
    ev = experiments.evidence(tax_ab(5.0, pairs), None)
    assert claims.resolved(ev, "E13", "small/tax", 0.5)[0] is decided
    ev = experiments.evidence(tax_ab(1.0, pairs), None)
    assert claims.ab_against(ev, "E13", "small/tax", 5.0)[0] is decided


def test_e20s_36_pairs_are_held_to_their_own_bound():
    # C00 bounds 36 pairs too (E20's cache-loaded pair runs 36): an A/B of 36 reads that
    # bound, not the wider one for 32; one of 48 reads 48's when C00 ran that many
    bounds = {12: 6.0, 32: 3.0, 36: 2.8, 48: 2.4}
    assert calibration.noise_floor_pct(rows(*c00(bounds)), 36) == 2.8
    assert calibration.noise_floor_pct(rows(*c00(bounds)), 47) == 2.8
    assert calibration.noise_floor_pct(rows(*c00(bounds)), 48) == 2.4
