"""The one writer of an A/B's rows, and the names every reader of them uses.

An A/B is two timed sides measured next to each other block by block (an interleaved
pair, :func:`perflab.instruments.timing.interleaved_ab`, or profiled blocks bracketed by unprofiled
ones). :func:`record` writes every A/B of every experiment, so the claims, the calibration,
the tables and the comparison read one vocabulary:

each side (A, then B), with its raw samples and their block index
    ``<metric>``: median, iqr, p25, p75, mean, min, max of the per-call samples;
    ``block_median``: median, min, max of its block medians (min..max is the block spread);
the difference variant (e.g. ``<b>_minus_<a>``, ``controlled/tax``)
    ``<diff_metric>``: B - A of the two sides' medians (ms);
    ``<diff_metric>_rel``: the same, relative to A's median (%);
    ``block_spread``: the wider of the two sides' block spreads (ms), the visible noise;
    ``block_pair_diff``: median, min, max of the paired block differences (ms, with samples);
    ``wilcoxon_p``: the judgement's p;
    ``difference_resolved``: 1 when :func:`perflab.instruments.stats.judge` resolves the paired block
    differences, else 0 (inside the noise: never reported as a speedup or a cost);
    and the judgement's own ``ab_*`` rows (:func:`perflab.instruments.stats.judgement_rows`).

Runs written before these names were one (``*_relative``, ``paired_block_difference``,
``tax_resolved``, ...) are read through :data:`perflab.core.io.RENAMED_METRICS`.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from perflab.instruments import stats

BLOCK_MEDIAN = "block_median"
BLOCK_SPREAD = "block_spread"
BLOCK_PAIR_DIFF = "block_pair_diff"
WILCOXON_P = "wilcoxon_p"
RESOLVED = "difference_resolved"
#: the suffix of the relative difference, ``<diff_metric>_rel`` (unit %)
REL = "_rel"
#: the 0/1 verdict rows of an A/B: this writer's and the judgement's
VERDICT_METRICS = (RESOLVED, "ab_resolved")
#: per-call statistics written for each side
SIDE_STATISTICS = ("median", "iqr", "p25", "p75", "mean", "min", "max")
#: statistics of the block medians and of the paired block differences
BLOCK_STATISTICS = ("median", "min", "max")


@dataclass
class Side:
    """One side of an A/B: its per-call samples and its blocks."""

    variant: str
    samples: Sequence[float]
    block_of: Sequence[int]  # the block index of each sample
    blocks: Sequence[float]  # each block's median, in block order
    sync_boundary: str
    block_ids: Sequence[int] | None = None  # each block's index (default 0, 1, ...)
    #: contract columns of this side's rows only (e.g. the dtype of an autocast side)
    contract: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class PairedCost:
    """B - A from per-call samples and per-block medians of both sides."""

    a_median: float  # of all samples
    b_median: float
    diff: float  # b_median - a_median
    rel: float  # diff / a_median (a fraction)
    a_spread: tuple[float, float]  # (min, max) of A's block medians
    b_spread: tuple[float, float]
    noise: float  # the wider of the two block spreads (reported beside the difference)
    resolved: bool  # the judgement's verdict (perflab.instruments.stats.judge on the paired blocks)
    block_diffs: list[float] = field(default_factory=list)  # b_i - a_i, block by block
    judgement: stats.Judgement | None = None


def paired_cost(a_samples: Sequence[float], b_samples: Sequence[float],
                a_blocks: Sequence[float], b_blocks: Sequence[float], *,
                block_diffs: Sequence[float] | None = None,
                noise_floor_pct: float | None = None) -> PairedCost:
    """The difference of the sides' medians, judged by :func:`perflab.instruments.stats.judge`.

    The judgement runs on the paired block differences (``block_diffs`` when
    given, else ``b_i - a_i``); the block spread is kept beside it as the
    visible noise.
    """
    a_med, b_med = statistics.median(a_samples), statistics.median(b_samples)
    a_sp, b_sp = stats.block_spread(a_blocks), stats.block_spread(b_blocks)
    noise = max(a_sp[1] - a_sp[0], b_sp[1] - b_sp[0])
    diff = b_med - a_med
    diffs = (list(block_diffs) if block_diffs is not None
             else [b - a for a, b in zip(a_blocks, b_blocks)])
    j = stats.judge(a_blocks, b_blocks, paired=True, diffs=diffs,
                    noise_floor_pct=noise_floor_pct)
    return PairedCost(
        a_median=a_med, b_median=b_med, diff=diff, rel=stats.relative_change(b_med, a_med),
        a_spread=a_sp, b_spread=b_sp, noise=noise, resolved=j.resolved,
        block_diffs=diffs, judgement=j,
    )


def record(ctx: Any, a: Side, b: Side, *, metric: str, window: str, diff_variant: str,
           diff_metric: str | None = None, block_diffs: Sequence[float] | None = None,
           noise_floor_pct: float | None = None, **kw: Any) -> PairedCost:
    """Write an A/B's rows on ``ctx`` (a :class:`perflab.pipeline.runner.Context`); return its cost.

    ``diff_metric`` names the difference (default ``metric``); ``block_diffs`` replaces the
    paired differences ``b_i - a_i`` (e.g. a profiled block against the unprofiled blocks
    around it); ``noise_floor_pct`` defaults to the job's A/A floor (``ctx.noise_floor_pct``).
    ``kw`` are further contract columns of every row (e.g. ``execution``).
    """
    for side in (a, b):
        own = {**kw, **side.contract}
        ctx.summary(side.samples, variant=side.variant, metric=metric, window=window,
                    sync_boundary=side.sync_boundary, statistics=SIDE_STATISTICS,
                    block=list(side.block_of), **own)
        ctx.summary(side.blocks, variant=side.variant, metric=BLOCK_MEDIAN,
                    window=window + "; one value per block: the median of its samples",
                    sync_boundary=side.sync_boundary, statistics=BLOCK_STATISTICS,
                    block=list(side.block_ids or range(len(side.blocks))), **own)
    floor = ctx.noise_floor_pct if noise_floor_pct is None else noise_floor_pct
    pc = paired_cost(a.samples, b.samples, a.blocks, b.blocks, block_diffs=block_diffs,
                     noise_floor_pct=floor)
    _difference_rows(ctx, pc, a.variant, b.variant, diff_variant, diff_metric or metric,
                     window, **kw)
    return pc


def _difference_rows(ctx: Any, pc: PairedCost, av: str, bv: str, variant: str, metric: str,
                     window: str, **kw: Any) -> None:
    """The rows under the difference variant: B - A, its noise, its judgement."""
    j = pc.judgement
    how = f"{bv} minus {av}: difference of the two sides' medians of all samples"
    common = dict(variant=variant, window=window, n=len(pc.block_diffs), **kw)
    ctx.row(metric=metric, value=pc.diff, unit="ms", sync_boundary=how, **common)
    ctx.row(metric=metric + REL, value=100 * pc.rel, unit="%",
            sync_boundary=how + f", relative to {av}", **common)
    ctx.row(metric=BLOCK_SPREAD, value=pc.noise, unit="ms",
            sync_boundary="the wider of the two sides' block spreads (max - min of block "
            "medians)", **common)
    ctx.row(metric=WILCOXON_P, value=j.p, unit="p", sync_boundary=j.test, **common)
    ctx.row(metric=RESOLVED, value=float(pc.resolved), unit="bool",
            sync_boundary="1 when perflab.instruments.stats.judge resolves the paired block differences "
            f"(p < {stats.ALPHA}, bootstrap interval excludes 0, above the A/A floor when known), "
            "else 0 (unresolved)", **common)
    ctx.judgement(j, variant=variant, window=window, **kw)
    ctx.summary(pc.block_diffs, variant=variant, metric=BLOCK_PAIR_DIFF,
                window=window + "; B - A block by block",
                sync_boundary="difference of block medians measured next to each other",
                statistics=BLOCK_STATISTICS, block=list(range(len(pc.block_diffs))), **kw)


def decision_row(ctx: Any, variant: str, decision: Any, floor_pct: Any, most: int,
                 extra: str = "", **kw: Any) -> str:
    """The row of an adaptive A/B's stopping decision (metric ``sampling_decision``, value:
    the block pairs run); its window starts with the decision's line ("decided: ..." or
    "undecided within budget (...)"), which the tables and claims read. ``floor_pct``: the
    floor the rule stopped against (a number, None, or ``floor(pairs)``:
    perflab.instruments.sequential.against). Returns the line."""
    from perflab.core.names import SAMPLING_DECISION

    line = decision.line(unit="%", what="blocks")
    now, end = ((floor_pct(decision.n), floor_pct(most)) if callable(floor_pct)
                else (floor_pct, floor_pct))
    basis = ("against a floor of 0 (no A/A floor in this job: only the exclusion of each "
             "threshold decides)" if now is None else
             f"against the A/A floor of {now:.3g}%" + ("" if end == now else
             f" for the {decision.n} pairs run (within it: {end:.3g}%, the floor for the "
             f"budget's {most})"))
    ctx.row(variant=variant, metric=SAMPLING_DECISION, value=float(decision.n), unit="blocks",
            n=decision.n, reason=line, window=f"{line}{DECISION_SEP} change {basis}; at most "
            f"{most} blocks{extra}",
            sync_boundary="perflab.instruments.sequential.against on the per-block relative "
            "differences of the interleaved block medians", **kw)
    return line


def fixed_pairs_row(ctx: Any, variant: str, pairs: int, calls: int, fixed_calls: int,
                    **kw: Any) -> float:
    """The row (metric ``sampling_fixed_pairs``) of how many of the fixed contract's block
    pairs of ``fixed_calls`` calls an adaptive A/B's ``pairs`` pairs of ``calls`` fill: the
    pair count its A/A floor is looked up at (shorter blocks are noisier;
    perflab.experiments.floors.ab_pairs reads it). Returns that count."""
    from perflab.core.names import SAMPLING_FIXED_PAIRS

    filled = fixed_pairs(pairs, calls, fixed_calls)
    ctx.row(variant=variant, metric=SAMPLING_FIXED_PAIRS, value=filled, unit="block pairs",
            n=pairs, window=f"{pairs} pairs of {calls} calls in pairs of the fixed "
            f"contract's {fixed_calls} calls", sync_boundary="counted", **kw)
    return filled


def fixed_pairs(pairs: int, calls: int, fixed_calls: int) -> float:
    """The fixed contract's block pairs of ``fixed_calls`` calls that ``pairs`` pairs of
    ``calls`` calls fill."""
    return pairs * calls / fixed_calls


#: what separates the decision's line from the rest of its row's window
DECISION_SEP = "; per-block"


def decision_line(window: str) -> str:
    """The decision's line out of a ``sampling_decision`` row's window."""
    return window.split(DECISION_SEP)[0]


def undecided(window: str, threshold: float | None = None) -> bool:
    """Whether a ``sampling_decision`` row's window says the stopping rule ran out of budget
    undecided: such an A/B supports no change either way, whatever its medians say.

    ``threshold``: undecided on that one threshold (% of A): an A/B stopped on a claim's
    thresholds lists each with its state ("-50 % (higher), 0 % (undecided)"); one it did not
    stop on (not listed) was not asked, so the rule says nothing of it. A line without such
    a list is the one threshold 0."""
    import re

    from perflab.instruments import sequential as seq

    line = decision_line(window)
    if not line.startswith(seq.UNDECIDED):
        return False
    parts = re.findall(r"(-?[0-9.e+-]+) % \(([a-z ]+)\)", line)
    if threshold is None:
        return True
    if not parts:
        return threshold == 0
    return any(float(t) == threshold and state == seq.UNDECIDED for t, state in parts)
