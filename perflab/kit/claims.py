"""The chapter's findings as named predicates over result rows.

Each :class:`Claim` reads rows of one run (the long frame of
:func:`perflab.core.io.read_results`) and returns a :class:`Verdict`:

- ``REPRODUCED``: every part of the predicate holds, each beyond its noise;
- ``DIFFERS``: some part fails beyond its noise; ``measured`` gives the values and
  ``mechanism`` what the data shows instead (e.g. which phase is the largest here);
- ``INCONCLUSIVE``: no part fails beyond its noise, but a part is inside it — or there is
  no noise evidence to decide it by (no A/A floor, no spread in the rows): missing
  evidence is never support;
- ``ERROR``: a row the claim needs is an instrument error (status ``error``): the
  instrument failed, which says nothing about the finding;
- ``NOT RUN``: a row the claim needs is absent (its experiment did not run);
- ``UNSUPPORTED``: the rows exist but this device cannot measure them (e.g.
  CUDA events on a CPU); ``measured`` carries the rows' reason.

A DIFFERS is a finding, not a failure: many verdicts flip on other hardware.

A predicate is one or more :class:`Part`: what it measured, whether it holds, and its
noise test (``decided``: outside the noise?, how), or none for a part with no noise
question (an ordering of counts, an exact equality, a byte count). :func:`judge_parts`
combines them so that one part's noise never hides another part's failure. A claim with
no noise question at all says why at registration (``exact=``), and its verdict records
that no noise test took part (``Verdict.noise_tested``).

Adding a claim is a few lines::

    @claim("C99", "E99", "B is faster than A", chapter="-10%",
           tolerance="(B - A) / A < 0, two medians of one process, beyond the A/A floor")
    def _b_faster(ev):
        rel = ev.value("E99", "b_minus_a", "step_latency_rel", "value")
        return judge(rel < 0, f"{rel:+.1f}%", is_resolved=against_floor(ev, rel))

A statistic that is not a difference of two medians of one process (a share, a ratio of two
series' medians) is judged by its own interval over the run's samples instead
(:func:`interval_part`, as C13 judges the input-wait share): the A/A floor bounds another
statistic.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from perflab.core.names import SAMPLING_DECISION
from perflab.core.rows import Absent, Rows, Unmeasured
from perflab.instruments import ab

REPRODUCED, DIFFERS, INCONCLUSIVE, ERROR, NOT_RUN, UNSUPPORTED = (
    "REPRODUCED", "DIFFERS", "INCONCLUSIVE", "ERROR", "NOT RUN", "UNSUPPORTED")
VERDICTS = (REPRODUCED, DIFFERS, INCONCLUSIVE, ERROR, NOT_RUN, UNSUPPORTED)
#: the verdicts that decide a claim (its effect outside the noise, one way or the other)
DECIDED = (REPRODUCED, DIFFERS)
CLAIM_COLUMNS = ["claim", "experiment", "statement", "chapter", "tolerance", "verdict",
                 "measured", "mechanism", "evidence", "command"]


@dataclass
class Verdict:
    verdict: str
    measured: str = ""
    mechanism: str = ""
    #: whether a noise test took part in it (False: orderings, counts, exact equalities)
    noise_tested: bool = False


class Floors(Protocol):
    """The run-wide noise floors a claim is judged by, handed in as data: the kit knows no
    experiment (perflab.experiments.floors is the one implementation)."""

    #: the experiment whose rows are the A/A floor
    AA_SOURCE: str

    def noise_floor_pct(self, frame: pd.DataFrame, pairs: float | None = None) -> float | None:
        """The A/A floor (%) from the source's rows, for an A/B of ``pairs`` block pairs."""

    def ab_pairs(self, rows: pd.DataFrame) -> float | None:
        """The block pairs of the A/B whose rows these are."""

    def ab_comparisons(self, frame: pd.DataFrame, floor_pct: float | None = None) -> pd.DataFrame:
        """Every A/B of ``frame`` re-judged against ``floor_pct``."""

    def run_process_floor(self, frame: pd.DataFrame) -> tuple[float | None, str]:
        """The run's between-process floor (%) and the processes it came from, or None, why."""


class Evidence(Rows):
    """A claim's look-ups into one run's rows (the one row lookup, raising :class:`Absent` /
    :class:`Unmeasured` where a row is missing: perflab.core.rows), with the run's noise
    floors. ``floors`` None: nothing is resolved against a floor (missing evidence is never
    support)."""

    def __init__(self, rows: pd.DataFrame, samples: pd.DataFrame | None = None,
                 floors: Floors | None = None):
        super().__init__(rows, samples)
        self.floors = floors

    @property
    def aa_source(self) -> str:
        return self.floors.AA_SOURCE if self.floors is not None else "C00"

#: a noise test's answer: (outside the noise?, how it was decided)
Decision = tuple[bool, str]


# ------------------------------------------------------------------ the noise tests


def no_floor(ev: Evidence) -> str:
    """Why this run has no A/A floor to decide by (the reason an INCONCLUSIVE carries)."""
    if ev.floors is None:
        return "not resolved: no A/A floor (no floors were handed to the claims)"
    if ev.rows.empty or not (ev.rows.experiment == ev.aa_source).any():
        return "not resolved: no A/A floor (C00 did not run)"
    return "not resolved: no A/A floor (this run's C00 predates it)"


def _floor(ev: Evidence, eid: str | None = None, variant: str | None = None) -> float | None:
    """C00's A/A floor (%); for the A/B ``variant`` of ``eid``, the floor for its own block
    pairs (:meth:`Floors.noise_floor_pct`)."""
    if ev.floors is None or not ev.has(ev.aa_source):
        return None
    pairs = None
    if eid is not None and ev.has(eid):
        own = ev.of(eid)
        # an adaptive A/B's shorter blocks count as the fixed contract's pairs they fill
        pairs = ev.floors.ab_pairs(own[own.variant == variant])
    # C00's rows, split off once per run (Rows.of), not the whole frame on every claim
    return ev.floors.noise_floor_pct(ev.of(ev.aa_source), pairs)


#: where the noise of an A/B comes from, in order; each returns None when it does not apply
NoiseSource = Callable[[Evidence, str, str, float], "Decision | None"]
NOISE_SOURCES: list[NoiseSource] = []


def aa_floor(ev: Evidence, eid: str, variant: str, effect: float) -> Decision | None:
    """An A/B of this run re-judged against C00's A/A floor (perflab.experiments.floors).

    None (not an A/B: the next noise test decides) when ``variant`` has no judgement
    rows. An A/B is resolved only against the floor: significance alone (the job's own
    ``difference_resolved``, judged without one) cannot tell it from two copies of the
    same step, so without a floor it is not resolved, with the reason.
    """
    if ev.rows.empty or not any(ev.maybe(eid, variant, m, "value") is not None
                                for m in (*ab.VERDICT_METRICS, "ab_p")):
        return None
    p = next((x for x in (ev.maybe(eid, variant, m, "value") for m in (ab.WILCOXON_P, "ab_p"))
              if x is not None), None)
    alone = f"the A/B alone: p={p:.3g}" if p is not None else "the A/B's own flag"
    if (stopped := sampling_undecided(ev, eid, variant)) is not None:
        return False, f"not resolved: {stopped}; {alone}"
    floor = _floor(ev, eid, variant)
    if floor is None:
        return False, f"{no_floor(ev)}; {alone}"
    own = ev.of(eid)
    hit = ev.floors.ab_comparisons(own[own.variant == variant], floor)
    if hit.empty:
        return False, (f"not resolved: the A/B wrote no judgement rows to set against the "
                       f"A/A floor {floor:.2g}%; {alone}")
    r = hit.iloc[0]
    return (r.verdict == "resolved",
            f"Wilcoxon p={r.p:.3g}, effect {r.effect_pct:+.2g}%, A/A floor {floor:.2g}% (C00)")


NOISE_SOURCES.append(aa_floor)


def sampling_undecided(ev: Evidence, eid: str, variant: str, threshold_pct: float = 0.0
                       ) -> str | None:
    """The stopping rule's line where an adaptive A/B ran out of budget undecided on
    ``threshold_pct`` (0: any change; its ``sampling_decision`` row,
    perflab.instruments.ab.decision_row), else None: an undecided comparison supports
    nothing, whatever its medians say. An A/B stopped on other thresholds only (a claim's
    own) was not asked about this one: None."""
    if ev.maybe(eid, variant, SAMPLING_DECISION, "value") is None:
        return None
    window = str(ev.row(eid, variant, SAMPLING_DECISION, "value")["window"])
    return ab.decision_line(window) if ab.undecided(window, threshold_pct) else None


def resolved(ev: Evidence, eid: str, variant: str, effect: float, *,
             noise: float | None = None) -> Decision:
    """Is ``effect`` (ms, or the claim's unit) outside the measured noise? (resolved?, how).

    The one place a claim's effect is set against its noise. In order:
    1. any source registered in :data:`NOISE_SOURCES`: for an A/B (``variant`` has the
       one A/B writer's judgement rows, perflab.instruments.ab), C00's A/A floor;
    2. ``noise``: a spread of the same series the claim passes (IQR): resolved when
       ``|effect| > noise`` (:func:`perflab.instruments.stats.resolved`);
    3. no noise measure at all: not resolved (missing evidence is never support).
    """
    from perflab.instruments import stats

    for source in NOISE_SOURCES:
        got = source(ev, eid, variant, effect)
        if got is not None:
            return got
    if noise is not None and math.isfinite(noise):
        return stats.resolved(effect, noise), f"noise {noise:.3g}"
    return False, "not resolved: no noise measure in the rows"


def against_floor(ev: Evidence, value_pct: float, threshold_pct: float = 0.0, *,
                  agree: bool = False) -> Decision:
    """Is a relative difference decided against the claim's threshold? (decided?, how)

    ``value_pct`` is a difference of two medians of one process, relative (%); the claim
    sets it against ``threshold_pct`` (e.g. "faster": 0; "within 10%": 10). The scale is
    C00's A/A floor, the 95% bound of how far the same statistic moves when both sides run
    the same step: the claim is decided when the value lies farther from its threshold than
    the floor, either way. ``agree=True``: the claim is that two medians agree within the
    threshold, so the size ``|value_pct|`` is set against it. No floor: not resolved.
    """
    floor = _floor(ev)
    if floor is None:
        return False, no_floor(ev)
    return beyond_floor(value_pct, threshold_pct, floor, agree=agree)


def beyond_floor(value_pct: float, threshold_pct: float, floor_pct: float, *,
                 agree: bool = False, floor_name: str = "A/A floor (C00)") -> Decision:
    """Does ``value_pct`` lie farther from ``threshold_pct`` than ``floor_pct``? (decided?, how)

    The rule :func:`against_floor` and :func:`against_process_floor` share; ``floor_name``
    says which floor it was ("A/A floor (C00)").
    """
    x = abs(value_pct) if agree else value_pct
    gap = abs(x - threshold_pct)
    name, _, where = floor_name.partition(" (")
    return gap > floor_pct, (f"{gap:.3g} points from the {threshold_pct:g}% threshold, "
                             f"{name} {floor_pct:.2g}% ({where}")


def process_floor(ev: Evidence) -> tuple[float | None, str]:
    """The run's between-process floor (%) and the processes it came from — or None and why
    not (:meth:`Floors.run_process_floor`).

    The floor of a comparison between two separate processes (E08's batch sizes, E20's
    cold and warm jobs): C00's A/A is within one process and does not bound it. It is of
    the median step latency; a throughput (examples/s of one batch) is judged by it too,
    the process's offset being one factor on both.
    """
    why = "not resolved: separate processes, no between-process floor"
    if ev.rows.empty:
        return None, f"{why} (no rows)"
    if ev.floors is None:
        return None, f"{why} (no floors were handed to the claims)"
    floor, how = ev.floors.run_process_floor(ev.rows)
    return (floor, how) if floor is not None else (None, f"{why} ({how})")


def against_process_floor(ev: Evidence, value_pct: float, threshold_pct: float = 0.0, *,
                          agree: bool = False,
                          floor: tuple[float | None, str] | None = None) -> Decision:
    """:func:`against_floor` for a relative difference between two separate processes: the
    scale is the run's between-process floor (:func:`process_floor`), the 95% bound of how
    far two fresh processes of the same step land apart, or ``floor`` ((%, which processes)
    or (None, why not)) when the comparison has one measured where it compares. No floor:
    not resolved, with the reason."""
    floor, how = process_floor(ev) if floor is None else floor
    if floor is None:
        return False, how
    return beyond_floor(value_pct, threshold_pct, floor, agree=agree,
                        floor_name=f"between-process floor ({how})")


def ab_against(ev: Evidence, eid: str, variant: str, threshold_pct: float, *,
               agree: bool = False) -> Decision:
    """Is an A/B's relative effect decided against a threshold other than 0? (decided?, how)

    For a claim such as "costs less than 5%": the A/B's bootstrap interval of the effect
    (``ab_ci_low``..``ab_ci_high``, as % of A) must exclude the threshold, and its effect
    (``ab_effect_rel``) lie farther from it than C00's A/A floor, as :func:`resolved`
    requires of an effect against 0. ``agree=True``: the claim is that the two sides agree
    within the threshold, so the interval must exclude both -threshold and +threshold, and
    ``|effect|`` lie farther from the threshold than the floor. No floor, or no judgement
    rows: not resolved.
    """
    floor = _floor(ev, eid, variant)
    if floor is None:
        return False, no_floor(ev)
    eff, rel, lo, hi = (ev.maybe(eid, variant, m, "value")
                        for m in ("ab_effect", "ab_effect_rel", "ab_ci_low", "ab_ci_high"))
    if None in (eff, rel, lo, hi) or not eff:
        return False, f"not resolved: no A/B judgement rows under {eid} {variant}"
    lo_pct, hi_pct = sorted((lo * rel / eff, hi * rel / eff))  # ms -> % of A's median
    edges = (-threshold_pct, threshold_pct) if agree else (threshold_pct,)
    outside = not any(lo_pct <= e <= hi_pct for e in edges)
    gap = abs((abs(rel) if agree else rel) - threshold_pct)
    return outside and gap > floor, (
        f"effect {rel:+.2g}%, 95% interval {lo_pct:+.2g}..{hi_pct:+.2g}%, {gap:.3g} points "
        f"from {'+-' if agree else ''}{threshold_pct:g}%, A/A floor {floor:.2g}% (C00)")


#: one series of raw samples: (experiment, variant, metric)
Series = tuple[str, str, str]
#: the claim's region of a statistic, (low, high), open at both ends: (-inf, 5) "below 5"
Region = tuple[float, float]


def medians(group: np.ndarray) -> np.ndarray:
    """The median of each series of a resampled group (resamples, series, samples)."""
    return np.median(group, axis=-1)


def _region_text(region: Region, unit: str) -> str:
    lo, hi = region
    if math.isinf(lo) and math.isinf(hi):
        raise ValueError("a claim's region needs at least one finite bound")
    if lo == -hi:
        return f"+-{hi:g}{unit} bound"
    ends = [f"{x:g}{unit}" for x in region if math.isfinite(x)]
    return f"{' and '.join(ends)} bound" + ("s" if len(ends) > 1 else "")


#: the fewest samples of a series :func:`own_interval` draws an interval from
MIN_INTERVAL_SAMPLES = 3


def own_interval(ev: Evidence, groups: list[list[Series]], statistic,
                 region: Region, *, unit: str = "%") -> tuple[bool | None, Decision]:
    """Is a statistic of this run's samples decided against the claim's region by its own
    95% interval? (holds, (decided?, how)); holds None when the samples are not there.

    For a statistic that is not an A/B effect (a share, a ratio of two series' medians, a
    sum of medians against another median): C00's A/A floor bounds a paired block
    difference of step times, not it. The interval is the moving-block bootstrap of
    :func:`perflab.instruments.stats.block_bootstrap_ci` over the raw samples of ``groups`` (each group
    a list of series measured together, sample i of each in the same step; groups measured
    one after the other are resampled apart): blocks, since a step series is
    autocorrelated. It decides for the claim (holds) when it lies inside ``region``, against
    it when it lies outside, and not at all when it straddles a bound. No samples of a
    series (a run without its samples CSV: the shipped reference runs carry none): not
    resolved, with the reason; never decided.
    """
    from perflab.instruments import stats

    data = []
    for group in groups:
        got = [ev.series(*key) for key in group]
        missing = [" ".join(k) for k, x in zip(group, got) if x is None]
        if missing:
            return None, (False, f"not resolved: no raw samples of {missing[0]} (the "
                                 "statistic's own interval needs the run's samples CSV)")
        n = min(len(x) for x in got)
        if n < MIN_INTERVAL_SAMPLES:  # one sample resamples to itself: a zero-width interval
            return None, (False, f"not resolved: {n} sample(s) of {' '.join(group[0])} (an "
                                 f"interval needs at least {MIN_INTERVAL_SAMPLES})")
        data.append(np.vstack([x[:n] for x in got]))
    point, lo, hi = stats.block_bootstrap_ci(data, statistic)
    low, high = region
    inside, outside = low < lo and hi < high, hi <= low or lo >= high
    counts = " and ".join(str(g.shape[1]) for g in data)
    how = (f"95% interval {lo:.3g}..{hi:.3g}{unit} "
           f"{'clear of' if inside or outside else 'straddles'} the {_region_text(region, unit)}"
           f" (block bootstrap of {counts} samples)")
    return (inside if inside or outside else low < point < high), (inside or outside, how)


def interval_part(ev: Evidence, value: float, measured: str, groups: list[list[Series]],
                  statistic, region: Region, *, unit: str = "%", mechanism: str = "",
                  name: str = "") -> Part:
    """A :class:`Part` judged by :func:`own_interval`: ``value`` is the rows' statistic (what
    "as measured" reads when the samples are not there to decide it)."""
    holds_, decided = own_interval(ev, groups, statistic, region, unit=unit)
    if holds_ is None:
        holds_ = region[0] < value < region[1]
    return Part(holds_, measured, decided, mechanism, name)


def leader(values: dict[str, float]) -> tuple[str, str]:
    """The largest and the second-largest key of ``values`` ("" when there is one key)."""
    ranked = sorted(values, key=values.get, reverse=True)
    return ranked[0], (ranked[1] if len(ranked) > 1 else "")


def lead_against_floor(ev: Evidence, values: dict[str, float]) -> Decision:
    """Is the largest of ``values`` ahead of the next by more than the A/A floor (% of it)?

    For an ordering of medians (or totals) of one process with no spread of their own in
    the rows: two within the floor of each other cannot be told apart.
    """
    top, second = leader(values)
    if not second:
        return True, "nothing to order against"
    floor = _floor(ev)
    if floor is None:
        return False, no_floor(ev)
    gap = 100 * (values[top] - values[second]) / values[top] if values[top] else 0.0
    return gap > floor, f"{top} leads {second} by {gap:.2g}%, A/A floor {floor:.2g}% (C00)"


# ------------------------------------------------------------------ the verdict of a predicate


@dataclass(frozen=True)
class Part:
    """One part of a claim's predicate: does it hold, is it decided, what was measured.

    ``decided`` is the part's noise test (outside the noise?, how); None for a part with
    no noise question. ``mechanism`` is what the data shows when the part fails; ``name``
    says which part it is when a claim has several ("medians agree", "Timer tighter").
    """

    holds: bool | None  # None: not measured (its ``decided`` says why it is undecided)
    measured: str
    decided: Decision | None = None
    mechanism: str = ""
    name: str = ""


def _part_text(p: Part) -> str:
    if p.decided is None:
        return p.measured
    ok, how = p.decided
    if ok or p.holds is None:  # decided; or not measured, so neither holds nor fails
        return f"{p.measured} ({how})"
    why = how if "not resolved" in how else f"inside the noise: {how}"
    return f"{p.measured} ({why}; as measured it {'holds' if p.holds else 'fails'})"


def judge_parts(*parts: Part) -> Verdict:
    """The verdict of a predicate of one or more parts.

    DIFFERS when some part fails beyond its noise (or fails and has no noise question),
    whatever the other parts' noise; else INCONCLUSIVE when some part is inside its noise;
    else REPRODUCED. ``measured`` lists every part with its noise; ``mechanism`` names
    each failed part (DIFFERS) or each undecided one (INCONCLUSIVE, several parts).
    """
    if not parts:
        raise ValueError("a predicate needs at least one part")
    failed = [p for p in parts if p.holds is not None and not p.holds
              and (p.decided is None or p.decided[0])]
    if any(p.holds is None and (p.decided is None or p.decided[0]) for p in parts):
        raise ValueError("a part not measured (holds None) must be undecided")
    undecided = [p for p in parts if p.decided is not None and not p.decided[0]]
    noise = any(p.decided is not None for p in parts)
    measured = "; ".join(_part_text(p) for p in parts)
    several = len(parts) > 1
    if failed:
        why = [(f"{p.name} fails" + (f": {p.mechanism}" if p.mechanism else "")
                if several and p.name else p.mechanism) for p in failed]
        return Verdict(DIFFERS, measured, "; ".join(w for w in why if w), noise)
    if undecided:
        names = ", ".join(p.name or "a part" for p in undecided)
        rest = "; the other parts hold" if len(undecided) < len(parts) else ""
        return Verdict(INCONCLUSIVE, measured,
                       f"undecided: {names} (inside the noise){rest}" if several else "", noise)
    return Verdict(REPRODUCED, measured, "", noise)


def judge(holds_: bool, measured: str, *, is_resolved: Decision | None = None,
          mechanism: str = "") -> Verdict:
    """The verdict of a one-part predicate, INCONCLUSIVE when its effect is inside the noise."""
    return judge_parts(Part(holds_, measured, is_resolved, mechanism))


def holds(ok: bool, measured: str, mechanism: str = "") -> Verdict:
    """A predicate with no noise question (orderings of counts, equalities, shapes)."""
    return judge(ok, measured, mechanism=mechanism)


#: the reasons a claim has no noise question (``exact=`` of :func:`claim`)
BYTES_EXACT = ("memory is counted, not sampled: allocator counters and tensor accounting "
               "give the same bytes on every run of the same program (a CPU's peak RSS is "
               "one reading of a fresh process, set against margins of whole MiB)")
NUMERICS_EXACT = ("a numerical difference of deterministic arithmetic on identical inputs "
                  "and state: no sampling noise")
COUNTS_EXACT = ("counts the compiler reports (recompiles, graphs, graph breaks) and whether "
                "a call raised: no sampling noise")


# ------------------------------------------------------------------ the registry


@dataclass(frozen=True)
class Claim:
    cid: str
    eid: str
    statement: str
    chapter: str
    tolerance: str
    check: Callable[[Evidence], Verdict]
    #: why no noise question arises (a count, an exact equality, bytes); "" when it does
    exact: str = ""

    @property
    def target(self) -> str:
        """The Snakemake rule that reruns this claim's experiment alone: the slug of the
        experiment module that registered it (its rule's name), "" for a claim registered
        elsewhere."""
        leaf = self.check.__module__.rsplit(".", 1)[-1]
        return leaf if leaf.startswith(f"{self.eid.lower()}_") else ""

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
            where = f" ({exc.where})" if exc.where else ""
            if exc.status == "error":  # the instrument failed: no evidence either way
                return Verdict(ERROR, f"instrument error{where}: {exc.reason}")
            return Verdict(DIFFERS, f"{exc.status}{where}: {exc.reason}")
        except ZeroDivisionError:
            return Verdict(INCONCLUSIVE, "a baseline of zero: no ratio")


CLAIMS: dict[str, Claim] = {}


def claim(cid: str, eid: str, statement: str, *, chapter: str, tolerance: str,
          exact: str = ""):
    """Register a predicate ``f(ev: Evidence) -> Verdict`` as claim ``cid`` of experiment ``eid``.

    ``exact``: why the claim has no noise question (it reads counts, bytes, exact
    equalities), so INCONCLUSIVE cannot arise; "" for a claim judged against its noise.
    """
    def wrap(fn: Callable[[Evidence], Verdict]) -> Callable[[Evidence], Verdict]:
        if cid in CLAIMS:
            raise ValueError(f"claim {cid} registered twice")
        CLAIMS[cid] = Claim(cid, eid, statement, chapter, tolerance, fn, exact)
        return fn
    return wrap


def registered() -> dict[str, Claim]:
    """The claims registered so far, by id in numeric order (each experiment module registers
    its own on import: :func:`perflab.experiments.claim_registry` imports them all)."""
    return dict(sorted(CLAIMS.items(), key=lambda kv: int(kv[0].lstrip("C"))))


#: one further process of an experiment: its rows and its raw samples (None: none)
Process = tuple[pd.DataFrame, "pd.DataFrame | None"]


def evaluate(rows: pd.DataFrame, claims: dict[str, Claim],
             samples: pd.DataFrame | None = None,
             processes: dict[str, list[Process]] | None = None,
             floors: Floors | None = None) -> pd.DataFrame:
    """claims.csv: one line per claim, in the order of their ids. ``samples``: the run's raw
    samples (:func:`perflab.core.io.read_samples`), which the claims judged by a statistic's own
    interval (:func:`own_interval`) need; without them those claims are not resolved.
    ``processes``: for an experiment, the further fresh processes of it the run made
    (``claim_processes``); its claims are judged in each and combined by :func:`agree`."""
    ev = Evidence(rows, samples, floors)
    further = processes or {}
    out = []
    for c in claims.values():
        v, tolerance = c.evaluate(ev), c.tolerance
        if further.get(c.eid):
            v = agree([v, *(c.evaluate(in_process(ev, c.eid, *p)) for p in further[c.eid])])
            tolerance += (f"; decided only where all {len(further[c.eid]) + 1} fresh processes "
                          f"of {c.eid} decide it alike (claim_processes)")
        out.append({"claim": c.cid, "experiment": c.eid, "statement": c.statement,
                    "chapter": c.chapter, "tolerance": tolerance, "verdict": v.verdict,
                    "measured": v.measured, "mechanism": v.mechanism,
                    "evidence": f"#{c.eid.lower()}", "command": c.command})
    return pd.DataFrame(out, columns=CLAIM_COLUMNS)


def in_process(ev: Evidence, eid: str, rows: pd.DataFrame,
               samples: pd.DataFrame | None) -> Evidence:
    """``ev`` with experiment ``eid``'s rows and samples those of another process of it (the
    rest of the run, C00's floor among it, as they are)."""
    frames = [f for f in (ev.samples, samples) if f is not None and not f.empty]
    rest = [f[f.experiment != eid] if f is ev.samples else f for f in frames]
    return Evidence(pd.concat([ev.rows[ev.rows.experiment != eid], rows], ignore_index=True),
                    pd.concat(rest, ignore_index=True) if rest else None, ev.floors)


def agree(verdicts: list[Verdict]) -> Verdict:
    """One claim judged in each fresh process of its experiment -> the run's verdict; the
    first is the experiment's own job's.

    A verdict one process decides can rest on that process's host: which core it found, how
    fast that core ran (a host-bound step's sync costs, its launch gaps). Every interval is
    drawn inside one process and cannot see that, so the run decides a claim only where every
    process decides it the same way. The first not run or unsupported: its verdict (nothing
    was measured here). Any instrument error: ERROR. Otherwise a process that decides it the
    other way, or not at all, or did not run, leaves it INCONCLUSIVE, with each process's
    reading.
    """
    first = verdicts[0]
    if first.verdict in (NOT_RUN, UNSUPPORTED) or len(verdicts) == 1:
        return first
    tested = any(v.noise_tested for v in verdicts)
    readings = "; ".join(f"process {k}: {v.verdict} ({v.measured})"
                         for k, v in enumerate(verdicts, start=1))
    errors = [k for k, v in enumerate(verdicts, start=1) if v.verdict == ERROR]
    if errors:
        return Verdict(ERROR, readings, f"an instrument failed in process {errors[0]}", tested)
    said = [v.verdict for v in verdicts]
    if said[0] in DECIDED and len(set(said)) == 1:
        others = "; ".join(f"process {k}: {v.measured}"
                           for k, v in enumerate(verdicts[1:], start=2))
        return Verdict(first.verdict, f"{first.measured} (the same in {len(verdicts) - 1} "
                                      f"further process(es): {others})", first.mechanism,
                       tested)
    why = ("the processes decide it differently: the verdict moves with the process"
           if len(set(said) & set(DECIDED)) > 1 else "not every process decides it")
    return Verdict(INCONCLUSIVE, readings, f"undecided: {why} ({', '.join(said)})", tested)


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
