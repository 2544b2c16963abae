"""The verdict: what is the machine waiting for? Decided by rule from this run's rows.

A data-parallel run (D01) is asked first whether its step waits for another rank:

0a. ``straggler`` — one rank reaches the step's first all-reduce last more often than
    chance and the others wait for it at least ``STRAGGLER_SHARE_PCT`` of the step (D01);
0b. ``communication`` — the all-reduce's exposed transfer (the least any rank waited for
    it: moving bytes, not waiting for a rank) is at least ``COMM_SHARE_PCT`` of the step.

Then six candidates of the single-process step, each tested against the measurements that
bear on it, in the chapter's order of suspicion (is the step fed? does the host stall it?
is the device even busy? then which device-side work dominates):

1. ``input_pipeline`` — input wait + host-to-device share of the step (E05).
2. ``synchronization`` — the tax of a per-step host read (E13), when it exceeds
   the block-to-block noise and ``SYNC_TAX_PCT`` of the step.
3. ``host_overhead`` — host launch & Python overhead: on CUDA, the host needs
   nearly as long to submit a step as the device to run it, or wall time
   exceeds device time (E06), and a free-running loop never queues a step
   (E01). A loop that queues a step or more rules it out whatever E06 says:
   the device runs behind, and the host's long submission is its wait on the
   full launch queue. With none of those measurable (a CPU), forward +
   backward far below both measured ceilings (R01).
4. ``optimizer`` — the optimizer is the largest phase and at least
   ``OPTIMIZER_SHARE_PCT`` of the step (E05).
5. ``device_compute`` / ``memory_bandwidth`` — forward + backward against the
   measured roofline (R01): arithmetic intensity at or above the ridge point
   is compute-bound, below it bandwidth-bound (compute-bound yet under
   ``UTILIZATION_PCT`` of the matmul ceiling: utilization before faster math).

The verdict is the first candidate whose test fits; every candidate's
outcome (fits / ruled out / not measured) and the rows it read are kept, so
the verdict cites its evidence and says what was ruled out and why. The
intervention is the one the verdict's mechanism points to — the chapter's
"form one mechanism hypothesis", to be tested by remeasuring.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from perflab import ab, calibration, io, overlap
from perflab.experiments import d01_data_parallel as d01
from perflab.experiments import e01_lying_benchmark as e01
from perflab.experiments import e05_phases as e05
from perflab.experiments import e06_events_vs_wall as e06
from perflab.experiments import e07_optimizers as e07
from perflab.experiments import e13_sync_tax
from perflab.experiments import r01_roofline as r01
from perflab.rows import Missing, Rows
from perflab.vocabulary import PHASES

#: input wait + host-to-device share of the phase sum above which the step is starved
INPUT_SHARE_PCT = 25.0
#: per-step host read tax (% of the step without it) above which sync is the verdict
SYNC_TAX_PCT = 10.0
#: host submission time / synchronized wall time at or above which the host is the limit
HOST_SUBMIT_RATIO = 0.8
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
#: D01: the others' wait for a named late rank (median arrival lateness), % of the step
STRAGGLER_SHARE_PCT = 10.0
#: D01: exposed all-reduce transfer (the least exposed communication of any rank), % of the step
COMM_SHARE_PCT = 20.0

LABELS = {
    "straggler": "a straggler rank",
    "communication": "exposed communication",
    "input_pipeline": "input pipeline",
    "synchronization": "synchronization",
    "host_overhead": "host launch & Python overhead",
    "optimizer": "optimizer",
    "device_compute": "device compute",
    "memory_bandwidth": "memory bandwidth",
    "undetermined": "undetermined",
}

INTERVENTIONS = {
    "straggler": "even out the late rank before touching the communication: find why its "
                 "slow phase is slower there (a slower or shared device, a busier host, a "
                 "costlier data shard) — D01 names the rank and the phase",
    "communication": "hide or shrink the all-reduce: buckets that start it earlier in the "
                     "backward (bucket_cap_mb), one all-reduce per K micro-batches (no_sync "
                     "accumulation), fewer bytes (fp16_compress_hook) — D01 times each",
    "input_pipeline": "feed the step faster: DataLoader workers, pinned host memory with "
                      "non_blocking copies, prefetch the next batch while this one trains",
    "synchronization": "stop reading a device value on the host every step: keep the running "
                       "loss on the device and read it every N steps (E13 shows the logged "
                       "mean is unchanged)",
    "host_overhead": "cut per-operator host cost: fewer, larger kernels — torch.compile the step "
                     "(mode='reduce-overhead' uses CUDA graphs), a larger batch per launch, "
                     "foreach/fused optimizer kernels",
    "optimizer": "fuse the optimizer step (AdamW(fused=True): one kernel per parameter group "
                 "instead of one per operation); E07/E25 time the pair and check one step agrees",
    "device_compute": "do the matmuls in faster math: bf16 autocast (E15) or TF32 for float32; "
                      "beyond that, less work per example",
    "memory_bandwidth": "move fewer bytes: fuse the elementwise work around the matmuls "
                        "(torch.compile, E19) and keep activations in a narrower dtype",
    "undetermined": "run the evidence experiments (E01, E05, E06, E13, R01) on this workload",
}

#: the W01 interventions (perflab.whatif) that test each verdict's hypothesis, first the
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
    "undetermined": (),
}

ORDER = ("straggler", "communication", "input_pipeline", "synchronization", "host_overhead",
         "optimizer", "device_bound")
FITS, RULED_OUT, NOT_MEASURED = "fits", "ruled out", "not measured"


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
    #: set when the deciding number sits within this run's A/A noise floor (C00) of its
    #: threshold: another run on the same machine may read this candidate the other way
    borderline: str = ""

    @property
    def label(self) -> str:
        return LABELS[self.bottleneck]


@dataclass
class Diagnosis:
    verdict: str
    because: str
    findings: list[Finding]
    #: what W01 measured, beside the hypothesis (empty when W01 did not run)
    measured: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
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
    """The one row lookup (perflab.rows), each value read kept with where it came from."""

    def get(self, eid: str, variant: str, metric: str, statistic: str = "median",
            unit: str = "", test: str = "") -> Reading:
        cell = self.pick(eid, variant, metric, statistic)
        value = None if isinstance(cell, Missing) else float(cell)
        return Reading(f"{eid} {variant} {metric} {statistic}", value, unit, test)


def _fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return "not measured"
    text = f"{v:.3g}" if abs(v) < 1e4 else f"{v:.3e}"
    return f"{text} {unit}".strip()


# ------------------------------------------------------------------ the tests


def _input_pipeline(r: _Rows) -> Finding:
    wait = r.get(*e05.phase_share_row("input_wait"), "%")
    h2d = r.get(*e05.phase_share_row("host_to_device"), "%")
    if wait.value is None:
        return Finding("input_pipeline", NOT_MEASURED, "needs E05's phase shares")
    share = wait.value + (h2d.value or 0.0)
    ok = share >= INPUT_SHARE_PCT
    test = f"input wait + host-to-device >= {INPUT_SHARE_PCT:g}% of the phase sum"
    for e in (wait, h2d):
        e.test, e.passes = test, ok
    return Finding("input_pipeline", FITS if ok else RULED_OUT,
                   f"input wait + host-to-device are {share:.1f}% of the step "
                   f"({'>=' if ok else '<'} {INPUT_SHARE_PCT:g}%)", [wait, h2d])


def _synchronization(r: _Rows) -> Finding:
    tax = r.get("E13", e13_sync_tax.CONTROLLED_TAX, e13_sync_tax.TAX_REL, "value", "%")
    resolved = r.get("E13", e13_sync_tax.CONTROLLED_TAX, ab.RESOLVED, "value", "bool")
    if tax.value is None:
        return Finding("synchronization", NOT_MEASURED, "needs E13's sync tax on the controlled step")
    ok = tax.value >= SYNC_TAX_PCT and bool(resolved.value)
    tax.test = f">= {SYNC_TAX_PCT:g}% of the step without a host read"
    resolved.test = "1: the tax exceeds the block-to-block spread"
    tax.passes, resolved.passes = tax.value >= SYNC_TAX_PCT, bool(resolved.value)
    f = Finding("synchronization", FITS if ok else RULED_OUT,
                f"a per-step host read costs {tax.value:+.1f}% of the step, "
                + ("beyond the noise" if resolved.value else "inside the noise"),
                [tax, resolved])
    # the tax and the A/A floor are both % of the step: compare the margin with the floor
    floor = calibration.noise_floor_pct(r.rows)
    if floor is not None and abs(tax.value - SYNC_TAX_PCT) < floor:
        f.borderline = (f"the tax ({tax.value:+.1f}%) is within this run's A/A floor "
                        f"({floor:.2g}%, C00) of the {SYNC_TAX_PCT:g}% threshold")
    return f


def _host_overhead(r: _Rows) -> Finding:
    evidence: list[Reading] = []
    cuda_votes: list[bool] = []  # E06: the host as slow as the step, or the device idle
    queued = None  # E01: steps still queued when a free-running loop syncs
    wall = r.get(e06.EID, *e06.WALL, "median", "ms")
    submit = r.get(e06.EID, *e06.SUBMISSION, "median", "ms")
    # host-exposed = wall - device time, device time from events with the device kept ahead
    gap = r.get(e06.EID, *e06.HOST_EXPOSED, "median", "ms")
    if wall.value and submit.value is not None:
        ratio = Reading(f"{submit.source} / {wall.source}", submit.value / wall.value, "ratio",
                        f"host submission / wall >= {HOST_SUBMIT_RATIO:g}")
        ratio.passes = ratio.value >= HOST_SUBMIT_RATIO
        evidence += [submit, wall, ratio]
        cuda_votes.append(ratio.passes)
    if wall.value and gap.value is not None:
        share = Reading(f"{gap.source} / {wall.source}", gap.value / wall.value, "ratio",
                        f"host-exposed (wall - device) / wall >= {WALL_GAP_SHARE:g}")
        share.passes = share.value >= WALL_GAP_SHARE
        evidence += [gap, share]
        cuda_votes.append(share.passes)
    if r.is_cuda(e01.EID):
        loops = e01.loop_lengths(r.rows)
        if loops:
            n = loops[-1]
            back = r.get(*e01.loop_row(n, e01.BACKLOG_AT_FINAL_SYNC), "ms")
            real = r.get(*e01.loop_row(n, e01.REAL_MS_PER_STEP), "ms")
            if back.value is not None and real.value:
                queued = Reading(f"{back.source} / {real.source}", back.value / real.value,
                                 "steps", f"queued at the final sync < {BACKLOG_STEPS:g} step "
                                 f"(loop of {n})")
                queued.passes = queued.value < BACKLOG_STEPS
                evidence += [back, real, queued]
    if queued is not None and not queued.passes:
        # the device runs behind the host: steps pile up in the queue. A host submission
        # as long as the step then only says the host waited on the full launch queue.
        return Finding("host_overhead", RULED_OUT,
                       f"the device runs behind the host: {queued.value:.2g} steps were still "
                       "queued at the final sync (a host submission as long as the step is "
                       "then the host waiting on a full launch queue)", evidence)
    if cuda_votes or queued is not None:
        ok = any(cuda_votes) if cuda_votes else queued.passes
        return Finding("host_overhead", FITS if ok else RULED_OUT,
                       "the host, not the device, sets the pace of the step" if ok else
                       "the device stays busy: the host submits faster than the device runs",
                       evidence)
    # no device queue to observe (a CPU, or E01/E06 not run): the roofline's indirect evidence
    roof = r.get(*r01.forward_backward_row(r01.ROOFLINE_FRACTION), "%")
    if roof.value is None:
        return Finding("host_overhead", NOT_MEASURED,
                       "needs E06 (CUDA events, host submission) or E01 on CUDA, or R01")
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
    # E07 times the isolated step as optimizer_step, so these step_latency rows are never
    # found: kept as it was until the diagnosis may change
    for variant in (e07.FOREACH, e07.FUSED):
        e = r.get(e07.EID, variant, "step_latency", "median", "ms",
                  "isolated optimizer step (context, not part of the test)")
        if e.value is not None:
            evidence.append(e)
    return Finding("optimizer", FITS if ok else RULED_OUT,
                   f"the optimizer is {opt.value:.1f}% of the step"
                   + ("" if largest == "optimizer" else f"; {largest} is larger "
                      f"({shares[largest].value:.1f}%)"), evidence)


def _device_bound(r: _Rows) -> Finding:
    ai = r.get(*r01.forward_backward_row(r01.ARITHMETIC_INTENSITY), "FLOP/B")
    ridge = r.get(*r01.RIDGE_POINT_ROW, "FLOP/B")
    flops = r.get(*r01.forward_backward_row(r01.FLOPS_FRACTION), "%",
                  "achieved FLOP/s as % of the measured matmul ceiling")
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
                   + ("matmul ceiling" if compute else "memory bandwidth"), evidence, refined)


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
    "input_pipeline": _input_pipeline,
    "synchronization": _synchronization,
    "host_overhead": _host_overhead,
    "optimizer": _optimizer,
    "device_bound": _device_bound,
}


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
    lines = ["## What is the machine waiting for?", "",
             f"**Verdict: {d.label}** — {d.because}.", ""]
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
