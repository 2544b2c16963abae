"""What the C00 calibration measured, for the ledger, the tables and the report.

Every timing in a run sits above floors the harness itself imposes: the
synchronize at each end of a sample, the clock, the process a job runs in.
C00 measures them on the machine at hand, with the A/A floor that every A/B
comparison is held to: the 95% upper bound of the statistic an A/B is judged
by (the median paired block difference, % of A) when both sides are
independent copies of the same step. This module reads those rows back through
:func:`perflab.experiments.c00_calibration.floors`: :func:`noise_floor_pct`,
:func:`floor_note` as the sentence a timing table carries, :func:`ab_comparisons`
as the list of every A/B in a run re-judged against the A/A floor by
:func:`perflab.instruments.stats.decide`.
"""

from __future__ import annotations

import pandas as pd

from perflab.core.names import SAMPLING_FIXED_PAIRS, STEP_LATENCY
from perflab.experiments.c00_calibration import (
    AA_DIFFERENCE,
    AA_FLOOR,
    EID,
    FLOOR_PAIRS,
    FLOOR_PAIRS_VARIANT,
    floors,
)
from perflab.instruments import stats
from perflab.kit import tables

#: the experiment whose rows are the A/A floor every A/B of the run is held to
AA_SOURCE = EID

# ------------------------------------------------------------------ between processes
#: E08, the batch sweep, times the controlled step in a fresh process per batch size: batch B
#: is its variant ``batch_<B>``; replicate k of batch B, a further fresh process of the same
#: contract, is ``replicate_<k>/batch_<B>`` (no ``batch_`` prefix, so the sweep, its answers
#: and its claims never read a replicate). E08 imports these names from here.
SWEEP_EID = "E08"
BATCH = "batch_"
REPLICATE = "replicate_"



def noise_floor_pct(frame: pd.DataFrame, pairs: float | None = None) -> float | None:
    """The A/A floor (%) of this run, or None when C00 did not measure it.

    ``pairs``: the block pairs of the A/B it gates; its floor is C00's bound for the
    largest pair count it wrote that is not above ``pairs`` (fewer pairs, a wider bound:
    the conservative side), or for the fewest it wrote when ``pairs`` is below them all.
    Without ``pairs``, or in a run from before C00 wrote one bound per count, the run's
    floor (:data:`AA_FLOOR`).

    A run from before the floor bounded the judged statistic (its C00 wrote
    ``aa_noise_floor``, the 95th percentile of single block-pair gaps) has none:
    that number gated another statistic and is not read as this one.
    """
    rows = frame[frame.experiment == EID]
    if pairs is not None and not pd.isna(pairs):
        written = {m: v for m in FLOOR_PAIRS if not isinstance(
            v := tables.pick(rows, FLOOR_PAIRS_VARIANT.format(m), AA_FLOOR[1], "value"),
            tables.Missing)}
        if written:
            fitting = [m for m in written if m <= pairs]
            # fewer pairs than any count written: the fewest's bound, the widest
            return float(written[max(fitting) if fitting else min(written)])
    v = tables.pick(rows, *AA_FLOOR, "value")
    return None if isinstance(v, tables.Missing) else float(v)


def floor_note(frame: pd.DataFrame) -> str:
    """One sentence: the floors every timing table of this run sits above."""
    f = floors(frame)
    if isinstance(f["empty_call_ms"], tables.Missing):
        return ("Harness floor unknown: the calibration (C00) did not run, so no timing here "
                "states what the instruments themselves cost.")
    parts = [f"an empty call through the helper takes {f['empty_call_ms'] * 1e3:.2f} µs"]
    if not isinstance(f["sync_ms"], tables.Missing):
        parts.append(f"one synchronize on an idle device {f['sync_ms'] * 1e3:.2f} µs")
    if not isinstance(f["event_pair_ms"], tables.Missing):
        parts.append(f"an empty CUDA-event pair {f['event_pair_ms'] * 1e3:.2f} µs")
    tail = ""
    if not isinstance(f["aa_floor_pct"], tables.Missing):
        blocks = ("" if isinstance(f["aa_block_ms"], tables.Missing)
                  else f", measured on blocks of {f['aa_block_ms']:.0f} ms")
        tail = (f" A/B effects (median paired block difference) below the A/A floor of "
                f"{f['aa_floor_pct']:.2f}% (its 95% bound between two copies of the step"
                f"{blocks}) are inconclusive.")
    return "Timings sit above the harness floor measured by C00: " + ", ".join(parts) + "." + tail


def ab_comparisons(frame: pd.DataFrame, floor_pct: float | None = None) -> pd.DataFrame:
    """Every A/B of the run (each variant with ``ab_*`` judgement rows), re-judged.

    ``floor_pct`` defaults to this run's A/A floor for each A/B's own block pairs
    (:func:`noise_floor_pct` with the ``n`` of its ``ab_effect`` row).
    Columns: experiment, comparison (the difference variant), effect_ms,
    effect_pct, ci_low_ms, ci_high_ms, p, in_job (the verdict written by the
    job), exceeds_floor, verdict (``resolved`` or ``inconclusive`` under the floor).
    """
    # with each adaptive A/B's pair count in the fixed contract's pairs (ab_pairs reads it)
    ok = frame[(frame.status == "ok") & (frame.metric.str.startswith("ab_")
                                         | (frame.metric == SAMPLING_FIXED_PAIRS))]
    out = []
    for (eid, variant), g in ok.groupby(["experiment", "variant"], sort=False):
        m = dict(zip(g.metric, g.value.astype(float)))
        if not {"ab_effect", "ab_effect_rel", "ab_ci_low", "ab_ci_high", "ab_p"} <= set(m):
            continue
        # the calibration's own A/A pair defines the floor: it is not judged against itself
        floor = (None if (eid, variant) == (EID, AA_DIFFERENCE)
                 else floor_pct if floor_pct is not None
                 else noise_floor_pct(frame, ab_pairs(g)))
        _, exceeds, resolved = stats.decide(p=m["ab_p"], ci_low=m["ab_ci_low"],
                                            ci_high=m["ab_ci_high"],
                                            relative_pct=m["ab_effect_rel"],
                                            noise_floor_pct=floor)
        out.append({
            "experiment": eid, "comparison": variant, "effect_ms": m["ab_effect"],
            "effect_pct": m["ab_effect_rel"], "ci_low_ms": m["ab_ci_low"],
            "ci_high_ms": m["ab_ci_high"], "p": m["ab_p"],
            "in_job": "resolved" if m.get("ab_resolved") else "inconclusive",
            "floor_pct": floor,
            "exceeds_floor": "" if exceeds is None else ("yes" if exceeds else "no"),
            "verdict": "resolved" if resolved else "inconclusive",
        })
    cols = ["experiment", "comparison", "effect_ms", "effect_pct", "ci_low_ms", "ci_high_ms",
            "p", "in_job", "floor_pct", "exceeds_floor", "verdict"]
    return pd.DataFrame(out, columns=cols)


def ab_pairs(rows: pd.DataFrame) -> float | None:
    """The block pairs of one A/B, in the fixed contract's pairs: an adaptive A/B's shorter
    blocks count as the pairs they fill (its ``sampling_fixed_pairs`` row; shorter blocks
    are noisier), any other's is the ``n`` of its ``ab_effect`` row. None if not written."""
    filled = rows[rows.metric == SAMPLING_FIXED_PAIRS]
    if not filled.empty and not pd.isna(filled.value.iloc[0]):
        return float(filled.value.iloc[0])
    hit = rows[rows.metric == "ab_effect"]
    if hit.empty or "n" not in hit or pd.isna(hit.n.iloc[0]):
        return None
    return float(hit.n.iloc[0])


def verdict_of(frame: pd.DataFrame, experiment: str, comparison: str,
               floor_pct: float | None = None) -> str | None:
    """``"resolved"`` or ``"inconclusive"`` for one A/B of a run, under the A/A floor.

    ``comparison`` is the A/B's difference variant (e.g. ``adamw_fused_minus_adamw_foreach``
    of E25, ``controlled/tax`` of E13); None when the run has no judgement rows for it.
    The claims' INCONCLUSIVE verdict is this returning ``"inconclusive"``.
    """
    table = ab_comparisons(frame, floor_pct)
    hit = table[(table.experiment == experiment) & (table.comparison == comparison)]
    return None if hit.empty else str(hit.verdict.iloc[0])


#: the run's between-process A/A: the jobs that time the controlled step with the chapter's
#: helper, each in a fresh process of its own, as each experiment declares
#: (``Experiment.process_peer``: perflab.experiments.process_peers gives the run's), with
#: E08's own jobs of that step's batch (and its replicates, if any)
#: the columns two rows must share to be the same step's contract
SAME_STEP = ("workload", "input_shape", "device", "mode")


Peers = tuple[tuple[str, str], ...]


def process_medians(frame: pd.DataFrame, peers: Peers) -> pd.DataFrame:
    """The run's medians of the controlled step, one per fresh process: the ``peers``'
    ((experiment, variant of its step_latency median)) and E08's jobs of that step's batch (its own and replicates),
    restricted to the contract most of them share (:data:`SAME_STEP`); empty if none."""
    ok = frame[(frame.metric == STEP_LATENCY) & (frame.statistic == "median")
               & (frame.status == "ok")]
    peers = pd.concat([ok[(ok.experiment == e) & (ok.variant == v)] for e, v in peers])
    if peers.empty:
        return peers
    step = peers[list(SAME_STEP)].astype(str).value_counts().index[0]
    e08 = ok[(ok.experiment == SWEEP_EID) & (ok.variant.str.startswith(BATCH)
                                       | ok.variant.str.startswith(REPLICATE))]
    both = pd.concat([peers, e08])
    same = pd.Series(True, index=both.index)
    for col, want in zip(SAME_STEP, step):
        same &= both[col].astype(str) == want
    return both[same]


def run_process_floor(frame: pd.DataFrame, peers: Peers) -> tuple[float | None, str]:
    """The between-process floor (%) of a run and which processes gave it, or None and why.

    :func:`perflab.instruments.stats.process_floor_pct` over :func:`process_medians`: the 95% bound of
    how far two fresh processes' medians of one step land apart. The peers' jobs differ from
    one another in what else their process timed, so the bound is wider than E08's jobs
    alone (identical code) would give: it can cost a decision, never grant a false one.
    """
    m = process_medians(frame, peers)
    if len(m) < 2:
        return None, (f"{len(m)} process(es) timed the controlled step with the helper (of "
                      f"{', '.join(e for e, _ in peers)}, {SWEEP_EID}): need 2")
    return (stats.process_floor_pct(m.value.to_numpy(float)),
            f"{len(m)} processes: {', '.join(m.experiment)}")


class RunFloors:
    """The run-wide floors as the claims read them (perflab.kit.claims.Floors): the A/A floor
    of this module's functions and the between-process floor over ``peers``."""

    AA_SOURCE = AA_SOURCE

    def __init__(self, peers: Peers):
        self.peers = peers

    noise_floor_pct = staticmethod(noise_floor_pct)
    ab_pairs = staticmethod(ab_pairs)
    ab_comparisons = staticmethod(ab_comparisons)

    def run_process_floor(self, frame: pd.DataFrame) -> tuple[float | None, str]:
        return run_process_floor(frame, self.peers)
