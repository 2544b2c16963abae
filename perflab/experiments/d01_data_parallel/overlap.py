"""What D01's rank records say: compute, communication, exposed communication, stragglers.

Every rank's record (:mod:`perflab.experiments.d01_data_parallel.ranks`) gives per step its phase times (input, forward,
backward, optimizer), its synchronizing backward's span ``[b0, b1]`` and, per bucket ``i``,
three marks on the rank's clock: ``enter_i`` (DDP hands the bucket to the comm hook: its
gradients are ready), ``returned_i`` (the hook gives the backward its thread back) and
``done_i`` (the all-reduce's future completed). From one rank's step:

- ``comm_time``: how long at least one all-reduce was in flight (the union of
  ``[enter_i, done_i]``);
- ``exposed_comm``: how long the backward could not compute because of communication: the
  time inside the hooks, ``sum(returned_i - enter_i)``, plus the wait after the last bucket
  was handed over, ``b1 - max(returned_i)`` (DDP waiting for every all-reduce, then copying
  the results into ``.grad``);
- ``hidden_comm``: ``comm_time - exposed_comm`` (at least 0): communication overlapped by the
  backward's compute;
- ``backward_compute``: the backward minus its exposed communication; ``compute_time``: forward
  + backward compute + optimizer (the planted sleep, when it is this rank's, included).

Across ranks, the same collective (bucket ``i`` of step ``s``) lasts ``d_{r,i} = done - enter``
on rank ``r``. The rank that handed it over last waited for nobody, so the shortest duration
is the collective's transfer time (moving bytes; TraceLens's definition) and each rank's
excess over it is time spent waiting for the last rank to arrive:

- ``allreduce_time`` = ``sum_i d_{r,i}``, split into ``allreduce_transfer`` = ``sum_i min_r
  d_{r,i}`` and ``allreduce_wait`` (the rest); buckets in flight together are counted once each;
- the exposed part, split the same way: ``exposed_transfer`` = the least exposed
  communication of any rank in that step, ``exposed_wait`` = each rank's excess over it;
- ``arrival_lateness``: how much later the last rank reached the step's first all-reduce
  than the first did (``max_r d_{r,0} - min_r d_{r,0}``); the *late rank* is the one with the
  shortest ``d_{r,0}``. A rank is named the straggler when it is the late rank more often
  than chance (a one-sided binomial test against 1/N), and the phase that made it late is
  the one where its median time most exceeds the other ranks' (:func:`straggler`).

Steps are matched across ranks by configuration and step index: every rank runs the same
configurations in the same order, step for step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from perflab.core.names import STEP_LATENCY
from perflab.experiments.d01_data_parallel.distributed import PHASES

STEP = STEP_LATENCY
#: per phase: the column (and metric) of its time
PHASE_TIME = {p: f"{p}_time" for p in PHASES}
BACKWARD_COMPUTE = "backward_compute"
COMPUTE = "compute_time"
COMM = "comm_time"
EXPOSED = "exposed_comm"
HIDDEN = "hidden_comm"
ALLREDUCE = "allreduce_time"
TRANSFER = "allreduce_transfer"
WAIT = "allreduce_wait"
EXPOSED_TRANSFER = "exposed_transfer"
EXPOSED_WAIT = "exposed_wait"
FIRST_ALLREDUCE = "first_allreduce"
LATENESS = "arrival_lateness"
EXPOSED_SHARE = "exposed_comm_share"
#: per rank and step (ms); the cross-rank ones need every rank's record
RANK_QUANTITIES = (STEP, *PHASE_TIME.values(), BACKWARD_COMPUTE, COMPUTE, COMM, EXPOSED, HIDDEN,
                   ALLREDUCE, TRANSFER, WAIT, EXPOSED_TRANSFER, EXPOSED_WAIT)
#: a late rank is named the straggler when it is late this much more often than chance
STRAGGLER_P = 0.05


def union_ms(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by ``intervals`` (each ``(start, end)``)."""
    total, reach = 0.0, -np.inf
    for a, b in sorted(intervals):
        if b <= reach:
            continue
        total += b - max(a, reach)
        reach = b
    return total


def step_quantities(s: dict[str, Any]) -> dict[str, float]:
    """One rank's step: its phase times and, when its hook was timed, its communication."""
    ph = s["phases"]
    out = {STEP: s["step_ms"], **{PHASE_TIME[p]: float(ph.get(p, 0.0)) for p in PHASES}}
    buckets = s["buckets"]
    if not buckets:
        return out
    _, b1 = s["backward"]
    in_hooks = sum(r - e for e, r, _, _ in buckets)
    exposed = in_hooks + max(0.0, b1 - max(r for _, r, _, _ in buckets))
    comm = union_ms([(e, d) for e, _, d, _ in buckets])
    out.update({EXPOSED: exposed, COMM: comm, HIDDEN: max(0.0, comm - exposed),
                BACKWARD_COMPUTE: out[PHASE_TIME["backward"]] - exposed,
                ALLREDUCE: sum(d - e for e, _, d, _ in buckets),
                FIRST_ALLREDUCE: buckets[0][2] - buckets[0][0]})
    out[COMPUTE] = out[PHASE_TIME["forward"]] + out[BACKWARD_COMPUTE] + out[PHASE_TIME["optimizer"]]
    return out


def steps_frame(records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per (configuration, rank, step), with the cross-rank split added.

    Columns: config, rank, block, step, ahead, buckets, bucket_bytes, durations (each
    bucket's all-reduce, ms) and the quantities of :data:`RANK_QUANTITIES`.
    """
    rows = []
    for rec in records:
        for s in rec["steps"]:
            rows.append({"config": s["config"], "rank": int(rec["rank"]), "block": s["block"],
                         "step": s["step"], "ahead": bool(s.get("ahead", True)),
                         "buckets": len(s["buckets"]),
                         "bucket_bytes": sum(b[3] for b in s["buckets"]),
                         "durations": [d - e for e, _, d, _ in s["buckets"]],
                         **step_quantities(s)})
    frame = pd.DataFrame(rows)
    return _cross_rank(frame) if not frame.empty else frame


def _cross_rank(frame: pd.DataFrame) -> pd.DataFrame:
    """Add the transfer/wait split of each collective and of the exposed time, per rank."""
    frame = frame.copy()
    timed = frame[frame.buckets > 0]
    for col in (TRANSFER, WAIT, EXPOSED_TRANSFER, EXPOSED_WAIT):
        frame[col] = np.nan
    if timed.empty:
        return frame
    counts = timed.groupby(["config", "step"]).buckets.nunique()
    if (counts > 1).any():
        config, step = counts[counts > 1].index[0]
        raise ValueError(f"{config} step {step}: the ranks ran different bucket counts")
    # one row per (configuration, step, rank, bucket): the collective's duration there
    each = timed[["config", "step", "durations"]].explode("durations")
    each["bucket"] = each.groupby(level=0).cumcount()
    each["durations"] = each.durations.astype(float)
    transfer = each.groupby(["config", "step", "bucket"]).durations.min() \
        .groupby(["config", "step"]).sum().rename(TRANSFER)
    keyed = timed.join(transfer, on=["config", "step"])
    frame.loc[keyed.index, TRANSFER] = keyed[TRANSFER]
    frame.loc[keyed.index, WAIT] = keyed[ALLREDUCE] - keyed[TRANSFER]
    least = timed.groupby(["config", "step"])[EXPOSED].transform("min")
    frame.loc[timed.index, EXPOSED_TRANSFER] = least
    frame.loc[timed.index, EXPOSED_WAIT] = timed[EXPOSED] - least
    return frame


def job_steps(frame: pd.DataFrame, config: str) -> pd.DataFrame:
    """One row per step of ``config`` across ranks: block, the job's step (the slowest rank),
    the ranks' mean exposed communication and its share of that step, the least exposed
    (its transfer part), the collectives' transfer, the arrival lateness and the late rank
    (absent where the hook was not timed)."""
    sel = frame[frame.config == config]
    g = sel.groupby(["block", "step"])
    out = g[STEP].max().to_frame()
    if FIRST_ALLREDUCE in sel and not sel.empty and sel[FIRST_ALLREDUCE].notna().all():
        first = g[FIRST_ALLREDUCE]
        out[EXPOSED] = g[EXPOSED].mean()
        out[TRANSFER] = g[TRANSFER].first()
        out[EXPOSED_TRANSFER] = g[EXPOSED].min()
        out[LATENESS] = first.max() - first.min()
        out["late_rank"] = sel.loc[first.idxmin(), "rank"].to_numpy()
        out[EXPOSED_SHARE] = 100 * out[EXPOSED] / out[STEP]
    return out.reset_index()


@dataclass
class Straggler:
    """Who reached the first all-reduce last, how often and how late, and why."""

    rank: int  # the rank most often last
    late_share: float  # % of steps it was last
    p: float  # one-sided binomial p of being last that often by chance (1/N)
    lateness_ms: float  # median arrival lateness over the steps
    steps: int
    #: per phase: the late rank's median time minus the other ranks' (ms)
    phase_excess: dict[str, float] = field(default_factory=dict)

    @property
    def named(self) -> bool:
        return self.p < STRAGGLER_P

    @property
    def phase(self) -> str:
        """The phase where the late rank's time most exceeds the others'."""
        return max(self.phase_excess, key=self.phase_excess.get)


def straggler(frame: pd.DataFrame, config: str) -> Straggler | None:
    """The late rank of ``config``'s steps and the phase that made it late (None: untimed).

    Phase times are compared rank against rank (the median over the steps of each), with
    the backward counted by its compute alone: waiting for the others is not lateness.
    """
    from scipy.stats import binomtest

    steps = job_steps(frame, config)
    if steps.empty or LATENESS not in steps or steps[LATENESS].isna().all():
        return None
    sel = frame[frame.config == config]
    ranks = sorted(sel["rank"].unique())
    late = int(steps.late_rank.mode().iloc[0])
    k, n = int((steps.late_rank == late).sum()), len(steps)
    p = float(binomtest(k, n, 1 / len(ranks), alternative="greater").pvalue)
    cols = {**{ph: PHASE_TIME[ph] for ph in PHASES}, "backward": BACKWARD_COMPUTE}
    med = sel.groupby("rank")[list(cols.values())].median()
    others = med.drop(index=late)
    excess = {ph: float(med.loc[late, c] - others[c].median()) for ph, c in cols.items()}
    return Straggler(late, 100 * k / n, p, float(steps[LATENESS].median()), n, excess)
