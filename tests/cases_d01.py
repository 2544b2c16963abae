"""The cases of D01's claims (C48-C52, data parallel): rows where each finding holds, fails,
and is inside the noise, registered in claims_rows.CASES."""

from __future__ import annotations

from claims_rows import case, rows

from perflab.experiments import d01_data_parallel as d01

# ------------------------------------------------------------------ D01 (data parallel)


def d01_judged(config, metric, rel, *, base=10.0, aa_pct=5.0, p=0.001, ci=0.05):
    """D01's judgement of ``config`` against the baseline on ``metric`` (rel % of ``base``),
    held to D01's own A/A floor ``aa_pct`` of that metric, and that floor's row."""
    effect, half = rel * base / 100, ci * base
    resolved = p < 0.05 and not (effect - half <= 0 <= effect + half) and abs(rel) > aa_pct
    v = d01.diff_variant(config, d01.BASELINE, metric)
    return [("D01", v, "ab_effect", "value", effect), ("D01", v, "ab_effect_rel", "value", rel),
            ("D01", v, "ab_ci_low", "value", effect - half),
            ("D01", v, "ab_ci_high", "value", effect + half), ("D01", v, "ab_p", "value", p),
            ("D01", v, "ab_resolved", "value", float(resolved)),
            ("D01", d01.diff_variant(d01.AA, d01.BASELINE, metric), d01.AA_FLOOR, "value",
             aa_pct)]


def d01_exposed(config, per_batch, rel, p=0.001, **extra):
    """The baseline's exposed communication, ``config``'s, and their judgement."""
    job = d01.job_variant
    return [("D01", job(d01.BASELINE), d01.EXPOSED_PER_BATCH, "median", 10.0),
            ("D01", job(config), d01.EXPOSED_PER_BATCH, "median", per_batch),
            ("D01", d01.rank_variant(d01.BASELINE, 0), "comm_time", "median", 14.0),
            ("D01", d01.rank_variant(d01.BASELINE, 0), "hidden_comm", "median", 4.0),
            *[("D01", job(c), d01.BUCKETS, "value", n) for c, n in extra.items()],
            *d01_judged(config, d01.EXPOSED_PER_BATCH, rel, p=p)]


case("C48", lambda: rows(*d01_exposed(d01.OVERLAP_OFF, 14.0, 40.0)),
     lambda: rows(*d01_exposed(d01.OVERLAP_OFF, 6.0, -40.0)),
     lambda: rows(*d01_exposed(d01.OVERLAP_OFF, 10.3, 3.0)))
case("C49", lambda: rows(*d01_exposed("bucket_1000mb", 14.0, 40.0, baseline=4, bucket_1000mb=1)),
     lambda: rows(*d01_exposed("bucket_1000mb", 6.0, -40.0, baseline=4, bucket_1000mb=1)),
     lambda: rows(*d01_exposed("bucket_1000mb", 10.3, 3.0, p=0.3, baseline=4,
                               bucket_1000mb=1)))
case("C52", lambda: rows(*d01_exposed("accum_k4", 2.5, -75.0)),
     lambda: rows(*d01_exposed("accum_k4", 14.0, 40.0)),
     lambda: rows(*d01_exposed("accum_k4", 9.7, -3.0, p=0.3)))


def d01_straggler(late=1, late_p=0.001, excess="forward", lateness=30.0, rel=2000.0,
                  transfer=(-0.5, 0.7), wait=29.0):
    """A planted straggler (rank 1, 30 ms in forward) and what D01 measured of it."""
    job = d01.job_variant(d01.STRAGGLER)
    t = d01.diff_variant(d01.STRAGGLER, d01.BASELINE, "allreduce_transfer")
    return rows(("D01", d01.planted_variant("forward"), d01.PLANTED_RANK, "value", 1),
                ("D01", d01.planted_variant("forward"), d01.PLANTED_SLEEP, "value", 30.0),
                ("D01", job, d01.LATE_RANK, "value", late),
                ("D01", job, d01.LATE_P, "value", late_p),
                ("D01", job, "arrival_lateness", "median", lateness),
                *[("D01", d01.phase_variant(d01.STRAGGLER, ph), d01.EXCESS, "value",
                   lateness if ph == excess else 0.1) for ph in d01.PHASES],
                *d01_judged(d01.STRAGGLER, "arrival_lateness", rel, base=1.5),
                ("D01", t, "ab_effect", "value", sum(transfer) / 2),
                ("D01", t, "ab_ci_low", "value", transfer[0]),
                ("D01", t, "ab_ci_high", "value", transfer[1]),
                ("D01", d01.rank_variant(d01.STRAGGLER, 0), "allreduce_wait", "median", wait),
                ("D01", d01.rank_variant(d01.STRAGGLER, 1), "allreduce_wait", "median", 0.0))


case("C50", d01_straggler, lambda: d01_straggler(late=0),
     lambda: d01_straggler(late_p=0.4, lateness=1.6, rel=3.0))
case("C51", d01_straggler, lambda: d01_straggler(transfer=(10.0, 14.0)),
     lambda: d01_straggler(transfer=(-5.0, 6.0)))
