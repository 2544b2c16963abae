"""The verdict: what is the machine waiting for? Decided by rule from this run's rows.

A data-parallel run (D01) is asked first whether its step waits for another rank:

0a. ``straggler`` — one rank reaches the step's first all-reduce last more often than
    chance and the others wait for it at least ``STRAGGLER_SHARE_PCT`` of the step (D01);
0b. ``communication`` — the all-reduce's exposed transfer (the least any rank waited for
    it: moving bytes, not waiting for a rank) is at least ``COMM_SHARE_PCT`` of the step.

Then six candidates of the single-process step, each tested against the measurements of
the mechanism it names, in the chapter's order of suspicion (is the step fed? does the
host stall it? where does the step's time go? is the device even busy? then which
device-side work dominates):

1. ``input_pipeline`` — with a device queue (R02's trace): the device idle while the
   host waits in the loader's ``next()``, plus host-to-device copies outside any
   kernel, as a share of the step; without one (a CPU), or without R02, E05's
   input wait + host-to-device share of the phase sum (the loader's real wait when
   the workload brings its loader; a batch served from memory has none).
2. ``synchronization`` — the step itself synchronizes (R02 counts its blocking calls,
   > 0), and what that costs matters: the host's blocked time that the device spends
   idle, ``min(blocked, sync + launch idle)`` per step (R02), at least
   ``SYNC_COST_PCT`` of the step as R02 timed it free-running without the profiler (the
   profiled window's slower host dilutes a device-side wait). Named by its site (operator,
   phase, frame).
3. ``optimizer`` — the optimizer is the largest phase and at least
   ``OPTIMIZER_SHARE_PCT`` of the step (E05): a localization whose remedy (a fused
   or foreach optimizer) is more specific than the generic host overhead below.
4. ``host_overhead`` — host launch & Python overhead: with a device queue, the device
   waits for the host to launch at least ``HOST_IDLE_PCT`` of the step (R02), E06's
   host-exposed time (wall − device) beside it as corroboration; without R02, E06's
   host-exposed share with E01's queue (a loop that queues a step or more rules it
   out). With no device queue at all (a CPU): forward + backward far below both
   measured ceilings (R01).
5. ``device_compute`` / ``memory_bandwidth`` — forward + backward against the
   measured roofline (R01): arithmetic intensity at or above the ridge point
   is compute-bound, below it bandwidth-bound (compute-bound yet under
   ``UTILIZATION_PCT`` of the matmul ceiling: utilization before faster math).

The verdict is the first candidate whose test fits; every candidate's
outcome (fits / ruled out / not measured) and the rows it read are kept, so
the verdict cites its evidence and says what was ruled out and why. The
intervention is the one the verdict's mechanism points to — the chapter's
"form one mechanism hypothesis", to be tested by remeasuring — refined by what
was found (the sync's site; no CUDA graphs for a step that synchronizes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from perflab.core import io
from perflab.core.names import PHASES, SAMPLING_DECISION
from perflab.core.rows import Missing, Rows
from perflab.experiments import d01_data_parallel as d01
from perflab.experiments import e01_lying_benchmark as e01
from perflab.experiments import e05_phases as e05
from perflab.experiments import e06_events_vs_wall as e06
from perflab.experiments import e07_optimizers as e07
from perflab.experiments import e13_sync_tax
from perflab.experiments import floors as calibration
from perflab.experiments import r01_roofline as r01
from perflab.experiments import r02_step_trace as r02
from perflab.experiments.c00_calibration import AA_FLOOR
from perflab.experiments.d01_data_parallel import overlap
from perflab.instruments import compiler_watch as cw

#: input share of the step above which the step is starved (E05: of the phase sum; R02: the
#: device idle on the loader plus host-to-device copies, of the profiled step)
INPUT_SHARE_PCT = 25.0
#: what the step's own syncs could cost at most (R02's bound, % of the step) for the verdict
SYNC_COST_PCT = 10.0
#: device idle waiting for the host to launch (R02, % of the step) that makes it host-bound
HOST_IDLE_PCT = 25.0
#: work still queued at a free-running loop's final sync, in steps, below which the device
#: never ran behind the host (a device-bound loop queues several steps, up to the launch
#: queue's depth, so the test is in steps, not as a share of the loop)
BACKLOG_STEPS = 1.0
#: host-exposed (wall - device time) / wall at or above which the device idles on the host
WALL_GAP_SHARE = 0.25
#: forward + backward below this % of the roofline: neither FLOPs nor bytes set the time
ROOFLINE_FLOOR_PCT = 5.0
#: optimizer share of the phase sum that, as the largest phase, makes it the verdict
OPTIMIZER_SHARE_PCT = 25.0
#: compute-bound forward + backward below this % of the matmul ceiling: utilization first
UTILIZATION_PCT = 50.0
#: compiling (first compiles and recompiles) above this % of a job's time: the compiler
#: sets the pace of the run
COMPILE_SHARE_PCT = 25.0
#: D01: the others' wait for a named late rank (median arrival lateness), % of the step
STRAGGLER_SHARE_PCT = 10.0
#: D01: exposed all-reduce transfer (the least exposed communication of any rank), % of the step
COMM_SHARE_PCT = 20.0

LABELS = {
    "straggler": "a straggler rank",
    "communication": "exposed communication",
    "compiler": "the compiler (compiling, recompiling, or silently eager)",
    "input_pipeline": "input pipeline",
    "synchronization": "synchronization",
    "host_overhead": "host launch & Python overhead",
    "optimizer": "optimizer",
    "device_compute": "device compute",
    "memory_bandwidth": "memory bandwidth",
    "undetermined": "undetermined",
    # findings of an attached run (perflab.attach.verdict): only a real loop shows them
    "recompiling": "recompiling",
    "memory_growth": "memory grows every step",
}

INTERVENTIONS = {
    "straggler": "even out the late rank before touching the communication: find why its "
                 "slow phase is slower there (a slower or shared device, a busier host, a "
                 "costlier data shard) — D01 names the rank and the phase",
    "communication": "hide or shrink the all-reduce: buckets that start it earlier in the "
                     "backward (bucket_cap_mb), one all-reduce per K micro-batches (no_sync "
                     "accumulation), fewer bytes (fp16_compress_hook) — D01 times each",
    "compiler": "stop the recompiles: give torch.compile one shape (drop_last=True, bucketed "
                "padding) or let it generalize (dynamic=True / torch._dynamo.mark_dynamic); a "
                "step past the recompile limit runs eager",
    "input_pipeline": "feed the step faster: DataLoader workers, pinned host memory with "
                      "non_blocking copies, prefetch the next batch while this one trains "
                      "(E24 sweeps the workers)",
    "synchronization": "stop reading a device value on the host every step: keep it on the "
                       "device (a running sum, a flag) and read it every N steps",
    "host_overhead": "cut per-operator host cost: fewer, larger kernels — torch.compile the step "
                     "(mode='reduce-overhead' uses CUDA graphs), a larger batch per launch, "
                     "foreach/fused optimizer kernels",
    "optimizer": "fuse the optimizer step (AdamW(fused=True): one kernel per parameter group "
                 "instead of one per operation and parameter); E07/E25 time the pair and check "
                 "one step agrees",
    "device_compute": "do the matmuls in faster math: bf16 autocast (E15) or TF32 for float32; "
                      "beyond that, less work per example",
    "memory_bandwidth": "move fewer bytes: fuse the elementwise work around the matmuls "
                        "(torch.compile, E19) and keep activations in a narrower dtype",
    "undetermined": "run the evidence experiments (C00, E05, E06, R01, R02) on this workload",
    "recompiling": "keep the compiled step's input shapes fixed, or mark the varying "
                   "dimension dynamic",
    "memory_growth": "stop keeping something from every step (a loss with its graph)",
}

#: the W01 interventions (perflab.experiments.w01_whatif.whatif) that test each verdict's hypothesis, first the
#: one its intervention names
HYPOTHESES = {
    "input_pipeline": ("loader_workers", "loader_pinned"),
    "synchronization": ("device_accumulator",),
    "host_overhead": ("compile_reduce_overhead", "compile_default", "larger_batch"),
    "optimizer": ("fused_optimizer", "foreach_optimizer"),
    "device_compute": ("autocast_bf16", "larger_batch"),
    "memory_bandwidth": ("compile_default", "autocast_bf16"),
    "straggler": (),
    "communication": (),
    "compiler": ("compile_dynamic",),
    "undetermined": (),
    "recompiling": (),
    "memory_growth": (),
}

#: the sampling lines' words, said once under them (a newcomer met "A/A floor", "anytime
#: interval" and "block pairs" on the screen unexplained)
GLOSSARY = ("the A/A floor: how far two identical copies of your step, timed in alternating "
            "blocks (block pairs), differ in time — differences within it are noise; an "
            "anytime interval: a 95% interval that stays valid however often the sampling "
            "looks at it before it stops; docs/sampling.md")

ORDER = ("straggler", "communication", "compiler", "input_pipeline", "synchronization", "optimizer",
         "host_overhead", "device_bound")
FITS, RULED_OUT, NOT_MEASURED = "fits", "ruled out", "not measured"
#: a reading no honest measurement can give (a fraction of a measured ceiling above 100%):
#: the instrument, not the step, is wrong, and the candidate is neither fitted nor ruled out
INSTRUMENT_ERROR = "instrument error"
#: the most of a measured ceiling a phase can reach: above it the ceiling is of the wrong
#: precision or the bytes counted miss the cache's reuse
CEILING_MAX_PCT = 100.0


@dataclass
class Reading:
    """One measured number a test read, where it came from, and the test it faced."""

    source: str  # "<experiment> <variant> <metric> <statistic>"
    value: float | None
    unit: str
    test: str
    passes: bool | None = None


@dataclass
class Finding:
    bottleneck: str
    outcome: str
    because: str
    evidence: list[Reading] = field(default_factory=list)
    #: the intervention when the evidence refines the candidate's default one
    intervention: str = ""
    #: set when the deciding number sits within this run's noise (C00's A/A floor, or the
    #: per-step spread of the trace) of its threshold: another run may read it the other way
    borderline: str = ""

    @property
    def label(self) -> str:
        return LABELS[self.bottleneck]


@dataclass(frozen=True)
class Sampled:
    """One quantity a job sampled in rounds under the run's budget (its SAMPLING_DECISION
    row): where it came from and its line, "decided: ..." or "undecided within budget ..."."""

    source: str
    line: str

    @property
    def decided(self) -> bool:
        return self.line.startswith("decided")


#: the A/A floor's sampling row (C00's AA_FLOOR variant), as :func:`sampled` names it
FLOOR_SOURCE = f"C00 {AA_FLOOR[0]}"


def sampled(frame: pd.DataFrame) -> list[Sampled]:
    """The SAMPLING_DECISION rows of a run, in the order written."""
    if frame.empty or "metric" not in frame:
        return []
    rows = frame[frame.metric == SAMPLING_DECISION]
    return [Sampled(f"{r.experiment} {r.variant}", str(r.reason)) for r in rows.itertuples()]


@dataclass
class Diagnosis:
    verdict: str
    because: str
    findings: list[Finding]
    #: what W01 measured, beside the hypothesis (empty when W01 did not run)
    measured: list[str] = field(default_factory=list)
    #: the other candidate when the deciding number sits near its threshold (:func:`_rival`):
    #: another run may pick it, so the headline names both, in the order of ORDER
    rival: str = ""
    #: what each quantity sampled under a budget came to (:func:`sampled`), empty without one
    sampled: list[Sampled] = field(default_factory=list)

    @property
    def cut_short(self) -> list[Sampled]:
        """The sampled evidence the budget ran out on that the verdict rests on: a deciding
        quantity left undecided, or the A/A floor not at its precision where a near-threshold
        note reads it (elsewhere the floor decides nothing)."""
        near = any(f.borderline for f in self.findings)
        return [s for s in self.sampled if not s.decided
                and (near or not s.source.startswith(FLOOR_SOURCE))]

    @property
    def label(self) -> str:
        if self.rival:
            pair = sorted((self.verdict, self.rival), key=_rank)
            return f"{LABELS[pair[0]]} or {LABELS[pair[1]]}"
        return LABELS[self.verdict]

    @property
    def intervention(self) -> str:
        chosen = [f for f in self.findings if f.bottleneck == self.verdict]
        return (chosen[0].intervention if chosen else "") or INTERVENTIONS[self.verdict]

    @property
    def evidence(self) -> list[Reading]:
        for f in self.findings:
            if f.bottleneck == self.verdict:
                return f.evidence
        return []


class _Rows(Rows):
    """The one row lookup (perflab.core.rows), each value read kept with where it came from."""

    def get(self, eid: str, variant: str, metric: str, statistic: str = "median",
            unit: str = "", test: str = "") -> Reading:
        cell = self.pick(eid, variant, metric, statistic)
        value = None if isinstance(cell, Missing) else float(cell)
        return Reading(f"{eid} {variant} {metric} {statistic}", value, unit, test)

    def traced(self) -> bool:
        """Did R02 see a device queue (its device rows measured)?"""
        return self.found("R02", r02.BUSY, r02.DEVICE_TIME, "mean") is not None

    def no_queue(self) -> str:
        """R02's reason when it ran where there is no device queue, else ""."""
        cell = self.pick("R02", r02.BUSY, r02.DEVICE_TIME, "value")
        return cell.reason if isinstance(cell, Missing) and cell.status == "unsupported" else ""


def _fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return "not measured"
    text = f"{v:.3g}" if abs(v) < 1e4 else f"{v:.3e}"
    return f"{text} {unit}".strip()


def _decided(r: _Rows, source: str) -> bool:
    """Was ``source`` ("E05 input_share") sampled under a budget and decided?"""
    return any(s.source == source and s.decided for s in sampled(r.rows))


def _near(r: _Rows, value: float, threshold: float, what: str,
          spread: tuple[Reading, Reading] | None = None, sampled_as: str = "") -> str:
    """Why ``value`` (% of the step) may read the other way in another run, or "".

    Within reach of this run's A/A floor (C00: two copies of the step differ in time by up
    to ``f`` % of it), or the threshold inside the per-step spread (R02's p25..p75 of the
    same share) — unless the share was sampled under a budget and decided (``sampled_as``):
    its anytime-valid interval clears the threshold, the stronger evidence of the two.

    The floor is a difference of step time, the share a part of it: a step ``f`` longer
    with all of the difference in the share reads ``(s + f) / (1 + f)``, with none of it
    ``s / (1 + f)`` (and likewise shorter), so the farthest the share moves toward a
    threshold ``t`` is ``f (1 - t)`` points (fractions of the step). Reading ``|s - t| < f``
    instead held a 0.1 % input share near 25 % on a floor of 26 % (an H100's tiny_kernels).
    """
    if sampled_as and _decided(r, sampled_as):
        return ""
    floor = calibration.noise_floor_pct(r.rows)
    reach = None if floor is None else floor_reach_pts(floor, threshold)
    if reach is not None and abs(value - threshold) <= reach:
        return (f"{what} ({value:.1f}%) is within this run's A/A floor ({floor:.2g}%, C00) "
                f"of the {threshold:g}% threshold (a step that much longer or shorter, all "
                f"of the difference in this share or all outside it, moves it up to "
                f"{reach:.2g} points)")
    if spread and None not in (spread[0].value, spread[1].value) \
            and spread[0].value <= threshold <= spread[1].value:
        return (f"the {threshold:g}% threshold lies inside {what}'s spread over the profiled "
                f"steps ({spread[0].value:.1f}..{spread[1].value:.1f}%, p25..p75, R02)")
    return ""


def floor_reach_pts(floor_pct: float, threshold_pct: float) -> float:
    """The most a share of the step (%) can move toward ``threshold_pct`` when the step's
    time moves by ``floor_pct`` (see :func:`_near`): ``f (1 - t)`` points."""
    return floor_pct * (1 - threshold_pct / 100)


def _spread(r: _Rows, variant: str) -> tuple[Reading, Reading]:
    return (r.get("R02", variant, r02.WINDOW_SHARE, "p25", "%"),
            r.get("R02", variant, r02.WINDOW_SHARE, "p75", "%"))


# ------------------------------------------------------------------ the tests


#: what the input test adds for a workload whose batch is served from memory
NO_OWN_LOADER = (" (the workload has no loader of its own: its batch is served from memory, so "
                 "there is no loader to wait on; give the workload its loader to test its input)")


def _input_pipeline(r: _Rows) -> Finding:
    own = r.get("R02", r02.STEP, r02.OWN_LOADER, "value", "bool")
    loader = bool(own.value) if own.value is not None else (
        e05.fed_by_loader(r) if r.has(e05.EID) else None)
    fed = "" if loader in (None, True) else NO_OWN_LOADER
    if r.traced():
        return _input_from_trace(r, fed)
    wait = r.get(*e05.phase_share_row("input_wait"), "%")
    h2d = r.get(*e05.phase_share_row("host_to_device"), "%")
    if wait.value is None:
        return Finding("input_pipeline", NOT_MEASURED, "needs E05's phase shares (or R02 "
                       "on a device with a queue)")
    share = wait.value + (h2d.value or 0.0)
    ok = share >= INPUT_SHARE_PCT
    if h2d.value is None and not ok:  # a missing row is not 0%: it cannot rule it out
        return Finding("input_pipeline", NOT_MEASURED, f"E05 has no {h2d.source} row: the "
                       f"step's host-to-device share is not measured{fed}", [wait])
    test = f"input wait + host-to-device >= {INPUT_SHARE_PCT:g}% of the phase sum"
    for e in (wait, h2d):
        e.test, e.passes = test, ok
    f = Finding("input_pipeline", FITS if ok else RULED_OUT,
                f"the loader's wait + host-to-device are {share:.1f}% of the step "
                f"({'>=' if ok else '<'} {INPUT_SHARE_PCT:g}%, E05){fed}", [wait, h2d])
    f.borderline = _near(r, share, INPUT_SHARE_PCT, "the input share",
                         sampled_as=f"{e05.EID} {e05.INPUT_SHARE_DECISION}")
    return f


def _input_from_trace(r: _Rows, fed: str) -> Finding:
    """With a device queue: the device idle on the loader, plus copies, of the profiled step."""
    data = r.get("R02", r02.idle_variant("data"), r02.WINDOW_SHARE, "value", "%")
    copy = r.get("R02", r02.H2D_COPY, r02.WINDOW_SHARE, "value", "%")
    missing = [e.source for e in (data, copy) if e.value is None]
    share = sum(e.value for e in (data, copy) if e.value is not None)
    ok = share >= INPUT_SHARE_PCT
    if missing and not ok:  # a missing row is not 0%: what was measured cannot rule it out
        return Finding("input_pipeline", NOT_MEASURED,
                       f"R02 has no {' or '.join(missing)} row: the device's wait for data "
                       f"is not measured{fed}", [e for e in (data, copy) if e.value is not None])
    test = (f"device idle in the loader's next() + host-to-device copies >= "
            f"{INPUT_SHARE_PCT:g}% of the step")
    for e in (data, copy):
        e.test, e.passes = test, ok
    context = r.get(*e05.phase_share_row("input_wait"), "%",
                    "the loader's wait with the device drained (context: the free-running "
                    "trace decides, where the wait may overlap device work)")
    evidence = [data, copy] + ([context] if context.value is not None else [])
    f = Finding("input_pipeline", FITS if ok else RULED_OUT,
                f"the device waits for data {_fmt(data.value, '%')} of the step and copies "
                f"its input {_fmt(copy.value, '%')} ({'>=' if ok else '<'} "
                f"{INPUT_SHARE_PCT:g}% together, R02){fed}", evidence)
    f.borderline = _near(r, share, INPUT_SHARE_PCT, "the input share",
                         _spread(r, r02.idle_variant("data")))
    return f


def _sync_advice(sites: list[r02.SyncSite]) -> str:
    """The intervention for the sync found: what to change at its site, by operator."""
    top = sites[0]
    op = top.op.lower()
    if any(k in op for k in ("nonzero", "index", "masked_select", "unique")):
        how = ("a boolean-mask select has a data-dependent shape, so the host must read the "
               "count: keep the shape fixed on the device (torch.where(mask, x, 0), or multiply "
               "by the mask and divide by mask.sum())")
    elif any(k in op for k in ("item", "local_scalar", "is_nonzero")):
        how = ("a value read on the host (.item(), float(t), `if t:`): move it to a device-side "
               "accumulator (a running sum; a NaN check as torch.isfinite(loss).all() folded "
               "into a device flag) and read it every N steps")
    elif "copy" in op or "to" in op:
        how = ("a device-to-host copy (.cpu(), .tolist(), .numpy()): keep the tensor on the "
               "device and copy it every N steps (non_blocking, into pinned memory)")
    else:
        how = "keep the value on the device and read it every N steps"
    more = f" (and {len(sites) - 1} more site(s), R02)" if len(sites) > 1 else ""
    return (f"remove the host-device sync at {top.where}{more}: {how}. Not CUDA graphs: a "
            "graph cannot capture a sync; remeasure with R02 (0 syncs per step)")


def _synchronization(r: _Rows) -> Finding:
    if r.no_queue():
        return Finding("synchronization", RULED_OUT, f"{r.no_queue()} (R02)")
    count = r.get("R02", r02.SYNCS, r02.SYNCS_PER_STEP, "value", "count")
    if count.value is None:
        return Finding("synchronization", NOT_MEASURED,
                       "needs R02 (the step's syncs, from its trace, on a device with a queue)")
    count.test, count.passes = "> 0: the step itself synchronizes", count.value > 0
    warned = r.get("R02", r02.SYNCS, r02.SYNC_WARNINGS_PER_STEP, "value", "count",
                   "the same count from torch's sync debug mode (corroboration)")
    evidence = [count] + ([warned] if warned.value is not None else [])
    tax = r.get("E13", e13_sync_tax.CONTROLLED_TAX, e13_sync_tax.TAX_REL, "value", "%",
                "context: the tax of adding a host read every step (a logging loop)")
    context = [tax] if tax.value is not None else []
    if not count.value:
        return Finding("synchronization", RULED_OUT, "the step never synchronizes "
                       "(R02: 0 blocking calls per step in its trace)", evidence + context)
    blocked = r.get("R02", r02.SYNCS, r02.BLOCKED_TIME, "mean", "ms", "host blocked, per step")
    # as % of the unprofiled step where R02 timed it (the profiled window's slower host
    # dilutes a device-side wait); a run from before that: of the window
    cost = r.get("R02", r02.SYNC_COST_BOUND, r02.FREE_STEP_SHARE, "value", "%")
    if cost.value is None:
        cost = r.get("R02", r02.SYNC_COST_BOUND, r02.WINDOW_SHARE, "value", "%")
    cost.test = (f"min(host blocked, device idle on a sync or a launch) >= {SYNC_COST_PCT:g}% "
                 "of the step: what removing the syncs could save, at most")
    if cost.value is None:  # a missing row is not 0%: the syncs' cost is not measured
        return Finding("synchronization", NOT_MEASURED,
                       f"the step synchronizes {count.value:.3g}x per step, but R02 has no "
                       f"row of what the syncs cost ({cost.source})", evidence + context)
    cost.passes = cost.value >= SYNC_COST_PCT
    sites = r02.sync_sites(r.rows)
    where = sites[0].where if sites else "an unlocated site"
    f = Finding("synchronization", FITS if cost.passes else RULED_OUT,
                f"the step synchronizes {count.value:.3g}x per step ({where}); removing the "
                f"syncs could save up to {cost.value:.1f}% of the step "
                f"({'>=' if cost.passes else '<'} {SYNC_COST_PCT:g}%)",
                evidence + [blocked, cost] + context)
    if r02.step_sync_sites(r.rows):
        f.intervention = _sync_advice(r02.step_sync_sites(r.rows))
    f.borderline = _near(r, cost.value, SYNC_COST_PCT, "the sync cost",
                         _spread(r, r02.SYNC_COST_BOUND))
    return f


def _host_exposed(r: _Rows) -> tuple[list[Reading], Reading | None]:
    """E06: wall, host-exposed (wall - device) and their ratio, where measured on CUDA."""
    wall = r.get(e06.EID, *e06.WALL, "median", "ms")
    gap = r.get(e06.EID, *e06.HOST_EXPOSED, "median", "ms")
    if not (wall.value and gap.value is not None):
        return [], None
    share = Reading(f"{gap.source} / {wall.source}", gap.value / wall.value, "ratio",
                    f"host-exposed (wall - device) / wall >= {WALL_GAP_SHARE:g}")
    share.passes = share.value >= WALL_GAP_SHARE
    return [gap, wall, share], share


def _queued(r: _Rows) -> tuple[list[Reading], Reading | None]:
    """E01 on CUDA: steps still queued when the longest free-running loop synchronized."""
    loops = e01.loop_lengths(r.rows) if r.is_cuda(e01.EID) else []
    if not loops:
        return [], None
    back = r.get(*e01.loop_row(loops[-1], e01.BACKLOG_AT_FINAL_SYNC), "ms")
    real = r.get(*e01.loop_row(loops[-1], e01.REAL_MS_PER_STEP), "ms")
    if back.value is None or not real.value:
        return [], None
    queued = Reading(f"{back.source} / {real.source}", back.value / real.value, "steps",
                     f"queued at the final sync < {BACKLOG_STEPS:g} step (loop of "
                     f"{loops[-1]})")
    queued.passes = queued.value < BACKLOG_STEPS
    return [back, real, queued], queued


def _no_graphs(r: _Rows) -> str:
    """The host-overhead remedy for a step that synchronizes: no CUDA graphs."""
    sites = r02.step_sync_sites(r.rows)
    if not sites:
        return ""
    return (f"cut per-operator host cost without CUDA graphs — the step synchronizes at "
            f"{sites[0].where}, which a graph cannot capture: remove that sync first (keep the "
            "value on the device), then torch.compile the step (default mode: fused kernels), "
            "a larger batch per launch, foreach/fused optimizer kernels")


def _host_from_trace(r: _Rows) -> Finding:
    """With a device queue: the device's idle time waiting for launches (R02)."""
    launch = r.get("R02", r02.idle_variant("launch"), r02.WINDOW_SHARE, "value", "%")
    launch.test = f">= {HOST_IDLE_PCT:g}% of the step: the device waits for the host to launch"
    if launch.value is None:  # a missing row is not 0%: the launch wait is not measured
        return Finding("host_overhead", NOT_MEASURED,
                       f"R02 has no row of the device's wait for launches ({launch.source})")
    launch.passes = launch.value >= HOST_IDLE_PCT
    other = r.get("R02", r02.idle_variant("other"), r02.WINDOW_SHARE, "value", "%",
                  "context: idle with the next kernel already queued (device-side latency)")
    where = max(((ph, r.get("R02", r02.phase_variant(ph, "launch"), r02.IDLE_TIME, "mean"))
                 for ph in (*r02.PHASES, r02.BETWEEN)),
                key=lambda kv: kv[1].value or 0.0)
    exposed, share = _host_exposed(r)
    for e in exposed:
        e.test = "corroboration (not deciding): " + (e.test or "E06")
    ok = launch.passes
    because = (f"the device waits for the host to launch {launch.value:.1f}% of the step "
               f"({'>=' if ok else '<'} {HOST_IDLE_PCT:g}%, R02)")
    if ok and where[1].value:
        because += f", most of it in {where[0]} ({where[1].value:.3g} ms per step)"
    if share is not None:
        agrees = share.passes == ok
        because += (f"; E06 {'agrees' if agrees else 'does not corroborate'}: host-exposed "
                    f"{100 * share.value:.0f}% of the wall clock"
                    + ("" if agrees or not ok else " (the profiler's own host cost may inflate "
                       "the launch wait)"))
    f = Finding("host_overhead", FITS if ok else RULED_OUT, because,
                [launch, other] + exposed + _queued(r)[0])
    f.borderline = _near(r, launch.value, HOST_IDLE_PCT, "the launch wait",
                         _spread(r, r02.idle_variant("launch")))
    if ok:
        f.intervention = _no_graphs(r)
    return f


def _host_overhead(r: _Rows) -> Finding:
    if r.traced():
        return _host_from_trace(r)
    exposed, share = _host_exposed(r)
    backlog, queued = _queued(r)
    evidence = exposed + backlog
    if queued is not None and not queued.passes:
        # the device runs behind the host: steps pile up in the queue
        return Finding("host_overhead", RULED_OUT,
                       f"the device runs behind the host: {queued.value:.2g} steps were still "
                       "queued at the final sync (E01)", evidence)
    if share is not None or queued is not None:
        ok = share.passes if share is not None else queued.passes
        return Finding("host_overhead", FITS if ok else RULED_OUT,
                       "the host, not the device, sets the pace of the step (E06/E01)" if ok
                       else "the device stays busy: the host submits faster than the device "
                       "runs (E06/E01)", evidence)
    # no device queue to observe (a CPU, or no CUDA evidence): the roofline's indirect evidence
    roof = r.get(*r01.forward_backward_row(r01.ROOFLINE_FRACTION), "%")
    if roof.value is None:
        return Finding("host_overhead", NOT_MEASURED,
                       "needs R02 (or E06/E01) on a device with a queue, or R01")
    roof.test = (f"forward + backward < {ROOFLINE_FLOOR_PCT:g}% of the roofline "
                 "(neither FLOPs nor bytes set the time)")
    roof.passes = roof.value < ROOFLINE_FLOOR_PCT
    return Finding("host_overhead", FITS if roof.passes else RULED_OUT,
                   f"forward + backward reach {roof.value:.1f}% of the attainable rate"
                   + (": per-operator overhead, not work, fills the step" if roof.passes
                      else "") + " (no device queue observable here)", [roof])


def _optimizer(r: _Rows) -> Finding:
    shares = {ph: r.get(*e05.phase_share_row(ph), "%") for ph in PHASES}
    if shares["optimizer"].value is None:
        return Finding("optimizer", NOT_MEASURED, "needs E05's phase shares")
    largest = max(PHASES, key=lambda ph: shares[ph].value or 0.0)
    opt = shares["optimizer"]
    ok = largest == "optimizer" and opt.value >= OPTIMIZER_SHARE_PCT
    opt.test = f"the largest phase and >= {OPTIMIZER_SHARE_PCT:g}% of the phase sum"
    opt.passes = ok
    evidence = [opt]
    if largest != "optimizer":
        big = shares[largest]
        big.test, big.passes = "the largest phase", True
        evidence.append(big)
    for variant in (e07.FOREACH, e07.FUSED):
        e = r.get(e07.EID, variant, e07.OPTIMIZER_STEP, "median", "ms",
                  "isolated optimizer step (context, not part of the test)")
        if e.value is not None:
            evidence.append(e)
    f = Finding("optimizer", FITS if ok else RULED_OUT,
                f"the optimizer is {opt.value:.1f}% of the step"
                + ("" if largest == "optimizer" else f"; {largest} is larger "
                   f"({shares[largest].value:.1f}%)"), evidence)
    if largest == "optimizer":
        f.borderline = _near(r, opt.value, OPTIMIZER_SHARE_PCT, "the optimizer share",
                             sampled_as=f"{e05.EID} {e05.OPTIMIZER_SHARE_DECISION}")
    return f


def _compiler(r: _Rows) -> Finding:
    """The compiler on the step (perflab.instruments.compiler_watch's rows, E05's job first): fits when
    a frame hit the recompile limit (the step silently runs eager from then on) or it
    recompiled and compiling takes COMPILE_SHARE_PCT of the job (one first compile is a
    one-time cost, never the verdict)."""
    rows = r.rows[(r.rows.variant == cw.VARIANT) & (r.rows.status == "ok")]
    if rows.empty:
        return Finding("compiler", NOT_MEASURED, "torch.compile never compiled the step "
                       "(it runs eagerly), so there is no compile or recompile to weigh")
    eid = "E05" if (rows.experiment == "E05").any() else str(rows.experiment.iloc[0])
    fallback = r.get(eid, cw.VARIANT, cw.EAGER_FALLBACK, "value", "bool",
                     "0: no frame hit Dynamo's recompile limit (after it, it runs eager)")
    share = r.get(eid, cw.VARIANT, cw.COMPILE_SHARE, "value", "%",
                  f"< {COMPILE_SHARE_PCT:g}% of the job spent compiling")
    recompiles = r.get(eid, cw.VARIANT, cw.RECOMPILES, "value", "count", "context")
    if fallback.value is None or share.value is None:
        return Finding("compiler", NOT_MEASURED, f"{eid}'s compiler rows are incomplete")
    fallback.passes = not fallback.value
    share.passes = share.value < COMPILE_SHARE_PCT
    window = rows[(rows.experiment == eid) & (rows.metric == cw.RECOMPILES)].window
    text = str(window.iloc[0]) if not window.empty else ""
    cause = text.split("; cause: ", 1)[1].split("; fix: ")[0] if "; cause: " in text else ""
    fix = text.split("; fix: ", 1)[1] if "; fix: " in text else ""
    evidence = [fallback, share] + ([recompiles] if recompiles.value is not None else [])
    n = f"{recompiles.value:.0f} recompile(s)" if recompiles.value is not None else "recompiles"
    # one compile is a one-time cost a training run amortizes; recompiles recur with the data
    recurring = recompiles.value is not None and recompiles.value >= 1
    if fallback.value or (recurring and share.value >= COMPILE_SHARE_PCT):
        because = ((f"the step hit torch.compile's recompile limit after {n} and from then "
                    "on runs eager, uncompiled" if fallback.value else
                    f"compiling ({n}) takes {share.value:.0f}% of {eid}'s job "
                    f"(>= {COMPILE_SHARE_PCT:g}%)") + (f": {cause}" if cause else ""))
        f = Finding("compiler", FITS, because, evidence)
        f.intervention = (f"{fix} — then W01's compile interventions time the step compiled "
                          "once" if fix else "")
        return f
    return Finding("compiler", RULED_OUT, (
        f"compiling takes {share.value:.0f}% of {eid}'s job (< {COMPILE_SHARE_PCT:g}%)"
        if recurring else f"the step compiled once ({share.value:.0f}% of {eid}'s short job: "
        "a one-time cost) and never recompiled") + " and no frame fell back to eager", evidence)


def _device_bound(r: _Rows) -> Finding:
    ai = r.get(*r01.forward_backward_row(r01.ARITHMETIC_INTENSITY), "FLOP/B")
    # forward + backward's own ridge (the blend of the ceilings of the precisions it ran);
    # a run from before R01 wrote it: the contract dtype's
    ridge = r.get(*r01.FORWARD_BACKWARD_RIDGE_ROW, "FLOP/B")
    if ridge.value is None:
        ridge = r.get(*r01.RIDGE_POINT_ROW, "FLOP/B")
    flops = r.get(*r01.forward_backward_row(r01.FLOPS_FRACTION), "%",
                  "achieved FLOP/s as % of the measured matmul ceiling of the precisions "
                  "it ran")
    bw = r.get(*r01.forward_backward_row(r01.BANDWIDTH_FRACTION), "%",
               "achieved bytes/s as % of the measured memory bandwidth")
    if ai.value is None or ridge.value is None:
        return Finding("device_compute", NOT_MEASURED, "needs R01 (ceilings and phase work)")
    compute = ai.value >= ridge.value
    ai.test = "at or above the ridge point: compute-bound; below: bandwidth-bound"
    ai.passes = compute
    evidence = [ai, ridge, flops, bw]
    fb = [r.get(*e05.phase_share_row(ph), "%", "share of the step")
          for ph in ("forward", "backward")]
    evidence += [e for e in fb if e.value is not None]
    kind = "device_compute" if compute else "memory_bandwidth"
    close = flops.value if compute else bw.value
    over = [e for e in (flops, bw) if e.value is not None and e.value > CEILING_MAX_PCT]
    for e in over:
        e.test, e.passes = f"<= {CEILING_MAX_PCT:g}% of its measured ceiling", False
    cache = r.get(*r01.forward_backward_row(r01.CACHE_FRACTION), "%",
                  "bytes/s as % of the cache-resident copy's bandwidth")
    in_cache = (bw in over and cache.value is not None and cache.value <= CEILING_MAX_PCT)
    if in_cache:
        evidence.append(cache)
    if over:
        return Finding(kind, INSTRUMENT_ERROR, "forward + backward read " + " and ".join(
            f"{e.value:.0f}% of the measured "
            + ("matmul ceiling" if e is flops else "memory bandwidth") for e in over) + ": more than the device can do, so the ceiling is of another "
            "precision than the one that ran, or the bytes counted miss the cache's reuse — an "
            "instrument error (R01), not a finding"
            + (f"; at {cache.value:.0f}% of the cache-resident roof, its data stays in cache"
               if in_cache else ""), evidence)
    roof = r.get(*r01.forward_backward_row(r01.ROOFLINE_FRACTION), "%",
                 "achieved as % of the attainable rate at this intensity")
    if roof.value is not None and roof.value < ROOFLINE_FLOOR_PCT:
        roof.test = (f">= {ROOFLINE_FLOOR_PCT:g}% of the roofline: FLOPs or bytes set the time")
        roof.passes = False
        return Finding(kind, RULED_OUT, f"forward + backward reach {roof.value:.1f}% of the "
                       "attainable rate at their intensity: neither FLOPs nor bytes set the "
                       "time", evidence + [roof])
    refined = ""
    if compute and flops.value is not None and flops.value < UTILIZATION_PCT:
        # compute-bound by intensity, yet far from the ceiling: the kernels are too small
        refined = (f"raise the matmuls' utilization first (they reach {flops.value:.0f}% of "
                   "this device's measured ceiling): more work per kernel — a larger batch "
                   "(E08 shows the throughput curve) — then faster math (bf16 autocast, E15)")
    return Finding(kind, FITS,
                   f"forward + backward do {ai.value:.3g} FLOP per byte "
                   f"({'>=' if compute else '<'} the ridge point {ridge.value:.3g}) and reach "
                   f"{_fmt(close, '%')} of the measured "
                   + ("matmul ceiling (of the precisions they ran)" if compute
                      else "memory bandwidth"), evidence, refined)


# ------------------------------------------------------------------ data parallel (D01)

#: a candidate of a single-process run, which has no rank to wait for
_NO_RANKS = "a single-process run: no data-parallel rows (D01)"


def _straggler(r: _Rows) -> Finding:
    v = d01.job_variant(d01.BASELINE)
    step = r.get("D01", v, overlap.STEP, "median", "ms")
    late = r.get("D01", v, overlap.LATENESS, "median", "ms")
    rank = r.get("D01", v, d01.LATE_RANK, "value", "rank", "the rank most often last")
    p = r.get("D01", v, d01.LATE_P, "value", "p")
    if late.value is None or not step.value or rank.value is None or p.value is None:
        return Finding("straggler", NOT_MEASURED, _NO_RANKS)
    share = Reading(f"{late.source} / {step.source}", 100 * late.value / step.value, "%",
                    f"the others' wait >= {STRAGGLER_SHARE_PCT:g}% of the step")
    share.passes = share.value >= STRAGGLER_SHARE_PCT
    p.test, p.passes = f"< {overlap.STRAGGLER_P:g}: last more often than chance", \
        p.value < overlap.STRAGGLER_P
    evidence = [late, step, share, rank, p]
    phase = d01.late_phase(r.of("D01"), d01.BASELINE)
    where = ""
    if phase is not None:
        ex = r.get("D01", d01.phase_variant(d01.BASELINE, phase[0]), d01.EXCESS, "value", "ms",
                   "the late rank's largest phase excess over the other ranks")
        evidence.append(ex)
        where = f", its {phase[0]} {phase[1]:+.3g} ms longer than the others'"
    ok = share.passes and p.passes
    where = where if p.passes else ""
    return Finding("straggler", FITS if ok else RULED_OUT,
                   f"rank {rank.value:.0f} arrives last at the first all-reduce in "
                   f"{r.get('D01', v, d01.LATE_SHARE, 'value').value or 0:.0f}% of steps "
                   f"(p={p.value:.2g}); the others wait {share.value:.1f}% of the step{where}",
                   evidence, intervention=(f"even out rank {rank.value:.0f}'s {phase[0]} "
                                           "(D01: its largest excess over the other ranks); "
                                           + INTERVENTIONS["straggler"] if ok and phase else ""))


def _communication(r: _Rows) -> Finding:
    v = d01.job_variant(d01.BASELINE)
    step = r.get("D01", v, overlap.STEP, "median", "ms")
    moved = r.get("D01", v, overlap.EXPOSED_TRANSFER, "median", "ms",
                  "exposed communication that is moving bytes (not waiting for a rank)")
    if moved.value is None or not step.value:
        return Finding("communication", NOT_MEASURED, _NO_RANKS)
    share = Reading(f"{moved.source} / {step.source}", 100 * moved.value / step.value, "%",
                    f"exposed transfer >= {COMM_SHARE_PCT:g}% of the step")
    share.passes = share.value >= COMM_SHARE_PCT
    hidden = r.get("D01", d01.rank_variant(d01.BASELINE, 0), overlap.HIDDEN, "median", "ms",
                   "rank 0's communication hidden behind compute (context)")
    evidence = [moved, step, share] + ([hidden] if hidden.value is not None else [])
    best = [c for c in d01.whatif_candidates(r.rows) if c.get("step_resolved")
            and c.get("step_effect_ms", 0) < 0]
    refined = ""
    if share.passes and best:
        b = min(best, key=lambda c: c["step_effect_ms"])
        refined = (f"{b['change']} (D01's {b['config']} measured {b['step_effect_ms']:+.3g} "
                   "ms per batch against the baseline, beyond the noise)")
    return Finding("communication", FITS if share.passes else RULED_OUT,
                   f"the step waits {share.value:.1f}% of its time for the all-reduce to move "
                   "its bytes", evidence, refined)


TESTS = {
    "straggler": _straggler,
    "communication": _communication,
    "compiler": _compiler,
    "input_pipeline": _input_pipeline,
    "synchronization": _synchronization,
    "optimizer": _optimizer,
    "host_overhead": _host_overhead,
    "device_bound": _device_bound,
}


def _rank(bottleneck: str) -> int:
    return ORDER.index(bottleneck) if bottleneck in ORDER else len(ORDER)


def _rival(findings: list[Finding], verdict: str) -> tuple[str, Finding | None]:
    """(the candidate another run may pick instead, the near-threshold finding that decides
    between them), or ("", None).

    A candidate ruled out near its threshold, earlier in the order than the verdict, would
    take the verdict if it read the other way; a verdict that fits near its threshold would
    give it to the next candidate that fits (or leave it undetermined)."""
    earlier = [f for f in findings if f.borderline and f.outcome == RULED_OUT
               and _rank(f.bottleneck) < _rank(verdict)]
    if earlier:
        return earlier[0].bottleneck, earlier[0]
    own = next((f for f in findings if f.bottleneck == verdict and f.borderline), None)
    if own is None:
        return "", None
    later = [f for f in findings if f.outcome == FITS and _rank(f.bottleneck) > _rank(verdict)]
    return (later[0].bottleneck if later else "undetermined"), own


def separating(f: Finding) -> str:
    """The measurement that would decide a near-threshold finding one way or the other."""
    eids = sorted({e.source.split(" ", 1)[0] for e in f.evidence if e.source})
    fixes = HYPOTHESES.get(f.bottleneck, ())
    return (f"measure {f.label}'s deciding number over more steps"
            + (f" ({', '.join(eids)})" if eids else "")
            + " until its interval clears the threshold"
            + (f", or apply {fixes[0]} and remeasure the step (W01): it moves beyond its noise "
               f"only if {f.label} is what the step waits for" if fixes else ""))


def diagnose(frame: pd.DataFrame) -> Diagnosis:
    """The verdict from the result rows of one run (any subset of experiments)."""
    from perflab.experiments import w01_whatif

    r = _Rows(frame)
    findings = [TESTS[name](r) for name in ORDER]
    fits = [f for f in findings if f.outcome == FITS]
    d = (Diagnosis(fits[0].bottleneck, fits[0].because, findings) if fits else
         Diagnosis("undetermined", "no candidate's test fits the rows of this run "
                   "(see what each needs)", findings))
    d.measured = w01_whatif.beside_hypothesis(frame, HYPOTHESES.get(d.verdict, ()))
    d.rival, _ = _rival(findings, d.verdict)
    d.sampled = sampled(frame)
    return d


# ------------------------------------------------------------------ outputs

COLUMNS = ["candidate", "label", "outcome", "verdict", "because", "source", "value", "unit",
           "test", "passes", "intervention", "borderline"]


def to_frame(d: Diagnosis) -> pd.DataFrame:
    """One row per evidence row read (a candidate with none gets one row saying why)."""
    rows = []
    for f in d.findings:
        common = dict(candidate=f.bottleneck, label=f.label, outcome=f.outcome,
                      verdict=f.bottleneck == d.verdict, because=f.because,
                      intervention=f.intervention or INTERVENTIONS[f.bottleneck],
                      borderline=f.borderline)
        for e in f.evidence or [Reading("", None, "", "")]:
            rows.append({**common, "source": e.source, "value": e.value, "unit": e.unit,
                         "test": e.test, "passes": e.passes})
    for line in d.measured:
        rows.append(dict(candidate="whatif", label="what if (W01)", outcome="measured",
                         verdict=False, because=line.replace("**", ""), source="W01",
                         value=None, unit="", test="", passes=None, intervention="",
                         borderline=""))
    if d.verdict == "undetermined":
        rows.append(dict(candidate="undetermined", label=d.label, outcome="", verdict=True,
                         because=d.because, source="", value=None, unit="", test="",
                         passes=None, intervention=d.intervention, borderline=""))
    return pd.DataFrame(rows, columns=COLUMNS)


def render_markdown(d: Diagnosis) -> str:
    lines = ["## What is the machine waiting for?", ""]
    _, near_f = _rival(d.findings, d.verdict)
    if d.rival and near_f:  # too close to call: both candidates, and how to separate them
        lines += [f"**Verdict: {d.label} — too close to call in this run**: {near_f.borderline}. "
                  f"As measured, {LABELS[d.verdict]}: {d.because}. To separate them, "
                  f"{separating(near_f)}.", ""]
    else:
        lines += [f"**Verdict: {d.label}** — {d.because}.", ""]
    ev = [e for e in d.evidence if e.value is not None]
    if ev:
        lines.append("Evidence:")
        lines += [f"- `{e.source}` = {_fmt(e.value, e.unit)}" + (f" ({e.test})" if e.test else "")
                  for e in ev]
        lines.append("")
    also = [f.label for f in d.findings if f.outcome == FITS and f.bottleneck != d.verdict]
    if also:
        lines += [f"Also fits, later in the order: {', '.join(also)}.", ""]
    near = [f for f in d.findings if f.borderline]
    if near:
        lines += ["**Near a threshold** (another run may decide it the other way): "
                  + "; ".join(f"{f.label} — {f.borderline}" for f in near) + ".", ""]
    if d.sampled:
        lines += ["Sampling (each quantity measured in rounds until decided or its share of "
                  "the budget was spent):"]
        lines += [f"- `{x.source}`: {x.line}" for x in d.sampled]
        lines += [f"  ({GLOSSARY})", ""]
    if d.cut_short:
        lines += ["**Cut short by the budget:** this verdict lacks "
                  + "; ".join(f"`{x.source}` decided" for x in d.cut_short)
                  + " (undecided within budget, above): a larger --budget, or the run "
                  "without one, would measure it further.", ""]
    lines += [f"**Next intervention:** {d.intervention}. Then remeasure: the hypothesis holds "
              "only if the step time moves beyond its noise.", ""]
    lines += [*d.measured, ""] if d.measured else []
    lines += ["| candidate | outcome | because |", "| --- | --- | --- |"]
    for f in d.findings:
        lines.append(f"| {f.label} | {f.outcome} | {f.because} |")
    return "\n".join(lines) + "\n"


def build(csv_paths) -> tuple[pd.DataFrame, str, Diagnosis]:
    """(diagnosis rows, Markdown, the Diagnosis) from a run's result CSVs."""
    d = diagnose(io.read_results(csv_paths))
    return to_frame(d), render_markdown(d), d
