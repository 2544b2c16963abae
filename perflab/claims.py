"""The chapter's findings as named predicates over result rows.

Each :class:`Claim` reads rows of one run (the long frame of
:func:`perflab.io.read_results`) and returns a :class:`Verdict`:

- ``REPRODUCED``: the predicate holds within its stated tolerance;
- ``DIFFERS``: it does not; ``measured`` gives the value and ``mechanism``
  what the data shows instead (e.g. which phase is the largest here);
- ``INCONCLUSIVE``: the effect the claim is about is inside the measured
  noise (:func:`resolved` decides, in one place);
- ``NOT RUN``: a row the claim needs is absent (its experiment did not run,
  or is not implemented yet);
- ``UNSUPPORTED``: the rows exist but this device cannot measure them (e.g.
  CUDA events on a CPU); ``measured`` carries the rows' reason.

A DIFFERS is a finding, not a failure: many verdicts flip on other hardware.

Adding a claim is a few lines::

    @claim("C99", "E05", "input wait is under 5% of the step", chapter="0.2%",
           tolerance="share < 5%")
    def _input_wait_small(ev):
        share = ev.value("E05", "sync/input_wait", "phase_share", "value")
        return holds(share < 5, f"{share:.1f}%")
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from perflab import ab
from perflab.rows import Absent, Rows, Unmeasured

REPRODUCED, DIFFERS, INCONCLUSIVE, NOT_RUN, UNSUPPORTED = (
    "REPRODUCED", "DIFFERS", "INCONCLUSIVE", "NOT RUN", "UNSUPPORTED")
VERDICTS = (REPRODUCED, DIFFERS, INCONCLUSIVE, NOT_RUN, UNSUPPORTED)
CLAIM_COLUMNS = ["claim", "experiment", "statement", "chapter", "tolerance", "verdict",
                 "measured", "mechanism", "evidence", "command"]
PHASES = ("input_wait", "host_to_device", "forward", "loss", "backward", "optimizer", "logging")


@dataclass
class Verdict:
    verdict: str
    measured: str = ""
    mechanism: str = ""


#: a claim's look-ups into one run's rows: the one row lookup, raising :class:`Absent` /
#: :class:`Unmeasured` where a row is missing (perflab.rows)
Evidence = Rows


# ------------------------------------------------------------------ the noise test

#: where the noise comes from, in order; a later A/A floor (issue 9) plugs in here
NoiseSource = Callable[[Evidence, str, str, float], "tuple[bool, str] | None"]
NOISE_SOURCES: list[NoiseSource] = []


def aa_floor(ev: Evidence, eid: str, variant: str, effect: float) -> tuple[bool, str] | None:
    """An A/B of this run re-judged against C00's A/A noise floor (perflab.calibration).

    None (the next noise test decides) when the run has no C00 rows or ``variant``
    is not an A/B difference with judgement rows.
    """
    from perflab import calibration

    if ev.rows.empty or not (ev.rows.experiment == "C00").any():
        return None
    table = calibration.ab_comparisons(ev.rows)
    hit = table[(table.experiment == eid) & (table.comparison == variant)]
    if hit.empty:
        return None
    r = hit.iloc[0]
    floor = "" if r.floor_pct is None or pd.isna(r.floor_pct) else f", A/A floor {r.floor_pct:.2g}%"
    return (r.verdict == "resolved",
            f"Wilcoxon p={r.p:.3g}, effect {r.effect_pct:+.2g}%{floor} (C00)")


NOISE_SOURCES.append(aa_floor)


def resolved(ev: Evidence, eid: str, variant: str, effect: float, *,
             noise: float | None = None, flag_metric: str | None = None) -> tuple[bool, str]:
    """Is ``effect`` (ms, or the claim's unit) outside the measured noise? (resolved?, how).

    The one place a claim decides INCONCLUSIVE. In order:
    1. any source registered in :data:`NOISE_SOURCES` (e.g. an A/A noise floor);
    2. the experiment's own significance flag on ``variant`` (``flag_metric``, or the
       ``difference_resolved`` / ``ab_resolved`` rows of the one A/B writer, perflab.ab);
    3. ``noise``: a spread the claim passes (block spread, IQR): resolved when
       ``|effect| > noise`` (:func:`perflab.stats.resolved`);
    4. no noise measure at all: resolved (the tolerance alone decides).
    """
    from perflab import stats

    for source in NOISE_SOURCES:
        got = source(ev, eid, variant, effect)
        if got is not None:
            return got
    for m in ([flag_metric] if flag_metric else []) + list(ab.VERDICT_METRICS):
        v = ev.maybe(eid, variant, m, "value")
        if v is not None:
            p = ev.maybe(eid, variant, ab.WILCOXON_P, "value")
            spread = ev.maybe(eid, variant, ab.BLOCK_SPREAD, "value")
            how = (f"Wilcoxon p={p:.3g}" if p is not None else
                   f"block spread {spread:.3g}" if spread is not None else m)
            return bool(v >= 0.5), how
    if noise is not None and math.isfinite(noise):
        return stats.resolved(effect, noise), f"noise {noise:.3g}"
    return True, "no noise measure in the rows"


#: the noise verdict of a comparison between separate processes (E08's batch sizes, E20's cold
#: and warm jobs): C00's A/A floor is measured within one process, so no floor of that kind
#: exists to tell a difference between processes from the processes' own spread
SEPARATE_PROCESSES = (False, "not resolved: separate processes, no between-process floor")


def judge(holds_: bool, measured: str, *, is_resolved: tuple[bool, str] | None = None,
          mechanism: str = "") -> Verdict:
    """The verdict of a predicate, INCONCLUSIVE when its effect is inside the noise."""
    if is_resolved is not None and not is_resolved[0]:
        why = is_resolved[1]
        return Verdict(INCONCLUSIVE, f"{measured} ("
                       + (why if why.startswith("not resolved") else f"inside the noise: {why}")
                       + ")")
    note = f" ({is_resolved[1]})" if is_resolved is not None else ""
    return Verdict(REPRODUCED if holds_ else DIFFERS, measured + note,
                   "" if holds_ else mechanism)


def against_floor(ev: "Evidence", rel_pct: float, tol_pct: float, *,
                  agree: bool) -> tuple[bool, str] | None:
    """Can this run decide a claim about a relative difference of two medians? (decided?, how)

    The scale is C00's A/A noise floor (the same step against itself, block to block): a
    difference inside it is not evidence either way. ``agree=True`` is a claim that two
    medians agree within ``tol_pct``: decided when they differ beyond both the tolerance and
    the floor (DIFFERS), or when the floor is no wider than the tolerance (so agreement can
    be seen). ``agree=False`` is a claim that they differ by more than ``tol_pct``: decided
    when the difference exceeds the floor. None when C00 did not run (the tolerance alone
    decides, as before the floor existed).
    """
    from perflab import calibration

    floor = calibration.noise_floor_pct(ev.rows) if not ev.rows.empty else None
    if floor is None:
        return None
    how = f"A/A floor {floor:.2g}% (C00)"
    size = abs(rel_pct)
    if agree:
        return (size > tol_pct and size > floor) or (size <= tol_pct and floor <= tol_pct), how
    return size > floor, how


def holds(ok: bool, measured: str, mechanism: str = "") -> Verdict:
    """A predicate with no noise question (orderings, equalities, shapes)."""
    return judge(ok, measured, mechanism=mechanism)


# ------------------------------------------------------------------ the registry


@dataclass(frozen=True)
class Claim:
    cid: str
    eid: str
    statement: str
    chapter: str
    tolerance: str
    check: Callable[[Evidence], Verdict]

    @property
    def target(self) -> str:
        """The Snakemake rule that reruns this claim's experiment alone."""
        from perflab.catalogue import EXPERIMENTS

        if self.eid in EXPERIMENTS:
            return EXPERIMENTS[self.eid].slug
        return ""

    @property
    def command(self) -> str:
        t = self.target
        return f"snakemake --cores 1 {t}" if t else f"({self.eid} is not in this workflow yet)"

    def evaluate(self, ev: Evidence) -> Verdict:
        try:
            return self.check(ev)
        except Absent as exc:
            return Verdict(NOT_RUN, str(exc))
        except Unmeasured as exc:
            if exc.status == "unsupported":
                return Verdict(UNSUPPORTED, exc.reason)
            return Verdict(DIFFERS, f"{exc.status}: {exc.reason}")
        except ZeroDivisionError:
            return Verdict(INCONCLUSIVE, "a baseline of zero: no ratio")


CLAIMS: dict[str, Claim] = {}


def claim(cid: str, eid: str, statement: str, *, chapter: str, tolerance: str):
    """Register a predicate ``f(ev: Evidence) -> Verdict`` as claim ``cid`` of experiment ``eid``."""
    def wrap(fn: Callable[[Evidence], Verdict]) -> Callable[[Evidence], Verdict]:
        if cid in CLAIMS:
            raise ValueError(f"claim {cid} registered twice")
        CLAIMS[cid] = Claim(cid, eid, statement, chapter, tolerance, fn)
        return fn
    return wrap


def registry() -> dict[str, Claim]:
    """Every claim, by id in numeric order: each experiment module registers its own on import."""
    from perflab.experiments import modules

    modules()
    return dict(sorted(CLAIMS.items(), key=lambda kv: int(kv[0].lstrip("C"))))


def evaluate(rows: pd.DataFrame, claims: dict[str, Claim] | None = None) -> pd.DataFrame:
    """claims.csv: one line per claim, in the order of their ids."""
    ev = Evidence(rows)
    out = []
    for c in (claims or registry()).values():
        v = c.evaluate(ev)
        out.append({"claim": c.cid, "experiment": c.eid, "statement": c.statement,
                    "chapter": c.chapter, "tolerance": c.tolerance, "verdict": v.verdict,
                    "measured": v.measured, "mechanism": v.mechanism,
                    "evidence": f"#{c.eid.lower()}", "command": c.command})
    return pd.DataFrame(out, columns=CLAIM_COLUMNS)


def pct(x: float) -> str:
    return f"{x:+.1f}%"


# ================================================================== E01 lying benchmark


# ================================================================== E02 four questions


# ================================================================== E03 warmup and spread


# ================================================================== E04 Timer vs helper


# ================================================================== E05 phases


def phase_shares(ev: Evidence, eid: str, prefix: str) -> dict[str, float]:
    got = {v.removeprefix(prefix): x for v, x in ev.variants(eid, prefix, "phase_share", "value").items()}
    if not got:
        raise Absent("no phase shares" + ("" if ev.has(eid) else f" ({eid} not run)"))
    return got


# ================================================================== E06 events vs wall


# ================================================================== E07 optimizers


# ================================================================== E08 batch sweep


# ================================================================== E09-E12 memory


# ================================================================== E13 sync tax


# ================================================================== E14 profiler


# ================================================================== E15-E20 interventions


# ================================================================== E21, E24 (the article)


# ================================================================== E23, E25


def verdict_counts(claims_frame: pd.DataFrame) -> dict[str, int]:
    return {v: int((claims_frame.verdict == v).sum()) for v in VERDICTS}
