"""D01: the read side of scripts/d01_data_parallel.py (its entry, names, table, figure, claims).

Also what the verdict (:mod:`perflab.views.diagnose`: the ``straggler`` and ``communication``
candidates) and the what-if set (:func:`whatif_candidates`) read of it.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pandas as pd

from perflab.experiments.d01_data_parallel import overlap
from perflab.experiments.d01_data_parallel.distributed import AA, BASELINE, BUILTIN, PHASES
from perflab.kit.claims import Absent, Decision, Part, claim, judge, judge_parts
from perflab.kit.experiment import ConfigProblem, ConfigView, Experiment
from perflab.kit.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ENTRY = Experiment(
    "D01",
    "data_parallel",
    "Data parallel: compute, exposed communication and stragglers, rank by rank",
    "data_parallel",
    cpu_behaviour="2 ranks on gloo share the CPU's cores, timed on each rank's host clock "
    "(runs only when asked: run=all,D01)",
    extra_outputs=(("ranks", "_ranks.json"),),
    report_section="25 · Data parallel: what the step waits for across ranks",
    devices=2,
    own_rules=True,
)

#: its parameters (config key ``experiments.D01``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
# auto: every visible GPU (NCCL), or 2 ranks on the CPU (gloo)
ranks:
  description: processes (one per device on CUDA); auto = every visible GPU from the device on (at least 2), 2 on a CPU
  oneOf:
    - {type: string, enum: [auto]}
    - {type: integer, minimum: 2}
  default: auto
# auto: nccl on CUDA, gloo on a CPU
backend:
  description: torch.distributed backend; auto = nccl on CUDA, gloo on a CPU
  type: string
  enum: [auto, gloo, nccl]
  default: auto
warmup: {description: untimed steps of every configuration first, type: integer, minimum: 1, default: 5}
# interleaved blocks, every configuration once per block (at least 6: a Wilcoxon needs them)
blocks: {description: "interleaved blocks, each running every configuration (balanced order); at least 6, the fewest paired blocks a Wilcoxon test can resolve (p < 0.05)", type: integer, minimum: 6, default: 6}
# timed steps per configuration per block
inner: {description: timed steps per configuration per block, type: integer, minimum: 1, default: 8}
# beside DDP's default 25; 1000 holds the whole MLP: one bucket
bucket_cap_mb:
  description: DDP bucket sizes (MiB) timed beside DDP's default (25, first bucket 1 MiB); one at least the model's size gives a single bucket
  type: array
  items: {type: number, exclusiveMinimum: 0}
  default: [1, 5, 100, 1000]
# K micro-batches per optimizer step, no_sync() on the first K-1
accumulation:
  description: micro-batches K per optimizer step under no_sync() (the all-reduce once per K)
  type: array
  items: {type: integer, minimum: 2}
  default: [4]
# planted: rank 1 sleeps 10 ms in forward
straggler:
  description: the planted straggler - one rank sleeps a known time in one phase of every step
  type: object
  additionalProperties: false
  default: {phase: forward, rank: 1, sleep_ms: 10}
  properties:
    rank: {type: integer, minimum: 0, default: 1}
    phase: {type: string, enum: [input, forward, backward, optimizer], default: forward}
    sleep_ms: {type: number, exclusiveMinimum: 0, default: 10}
compress_fp16: {description: also time DDP's fp16_compress_hook, type: boolean, default: true}
timeout_min: {description: the ranks are ended (and the job fails) past this many minutes, type: number, exclusiveMinimum: 0, default: 15}
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
# a 100 ms straggler, not 30: a loaded 2-core CI machine stalled one of the A/A's 6 block
# pairs by ~30 ms, which set D01's lateness floor at the planted sleep (C50 INCONCLUSIVE)
SCALES = {"tiny": {'bucket_cap_mb': [0.01, 100], 'warmup': 2, 'blocks': 6, 'inner': 2, 'straggler': {'sleep_ms': 100}}}

# ------------------------------------------------------------------ the names its rows use

#: cross-rank metrics beside overlap's quantities (every one a metric name as written)
LATE_RANK = "late_rank"  # the rank most often last at the first all-reduce (value: its rank)
LATE_SHARE = "late_rank_share"  # % of steps it was last
LATE_P = "late_rank_p"  # one-sided binomial p of that many by chance (1/N)
EXCESS = "late_rank_excess"  # per phase: the late rank's median time minus the others' (ms)
PLANTED_RANK, PLANTED_SLEEP = "planted_rank", "planted_sleep"
BUCKETS, BUCKET_MIB, MICRO = "buckets", "bucket_mib", "micro_batches"
BEHIND = "steps_device_behind"  # CUDA: steps whose device caught up with the host
#: per micro-batch (a step of K accumulated micro-batches counts K): what the A/Bs compare
EXPOSED_PER_BATCH = "exposed_comm_per_batch"
STEP_PER_BATCH = "step_latency_per_batch"
OVERLAP_OFF, STRAGGLER, FP16 = "overlap_off", "straggler", "fp16_compress"
#: the judgement's effect (B - A: median of the paired block differences) and its interval
EFFECT, CI_LOW, CI_HIGH = "ab_effect", "ab_ci_low", "ab_ci_high"
#: per compared metric, the A/A floor (%) of the baseline against its copy (``baseline_aa``)
AA_FLOOR = "aa_floor"


def rank_variant(config: str, rank: int) -> str:
    return f"{config}/rank{rank}"


def job_variant(config: str) -> str:
    """The variant of a configuration's cross-rank rows."""
    return f"{config}/ranks"


def phase_variant(config: str, phase: str) -> str:
    return f"{config}/phase/{phase}"


def planted_variant(phase: str) -> str:
    return f"{STRAGGLER}/planted/{phase}"


def diff_variant(b: str, a: str, metric: str) -> str:
    """The variant of the judgement of ``b`` against ``a`` on ``metric`` (block medians)."""
    return f"{b}_minus_{a}/{metric}"


# ------------------------------------------------------------------ reading them


def configs_of(r: pd.DataFrame) -> list[str]:
    """The configurations in the rows, in the order the job wrote them."""
    return list(dict.fromkeys(v.removesuffix("/ranks") for v in r.variant
                              if v.endswith("/ranks")))


def ranks_of(r: pd.DataFrame, config: str) -> list[int]:
    found = {int(m.group(1)) for v in r.variant.unique()
             if (m := re.fullmatch(re.escape(config) + r"/rank(\d+)", v))}
    return sorted(found)


def bucket_configs(r: pd.DataFrame) -> list[tuple[float, str]]:
    """(MiB, variant) of the swept bucket sizes, smallest first."""
    out = [(float(m.group(1)), c) for c in configs_of(r)
           if (m := re.fullmatch(r"bucket_([0-9.e+-]+)mb", c))]
    return sorted(out)


def accumulation_configs(r: pd.DataFrame) -> list[tuple[int, str]]:
    return sorted((int(m.group(1)), c) for c in configs_of(r)
                  if (m := re.fullmatch(r"accum_k(\d+)", c)))


def planted(r: pd.DataFrame) -> tuple[str, Any, Any] | None:
    """(phase, rank cell, sleep cell) of the planted straggler, or None."""
    for v in r.variant.unique():
        if v.startswith(f"{STRAGGLER}/planted/"):
            return (v.rsplit("/", 1)[1], pick(r, v, PLANTED_RANK, "value"),
                    pick(r, v, PLANTED_SLEEP, "value"))
    return None


def late_phase(r: pd.DataFrame, config: str) -> tuple[str, float] | None:
    """The phase where the late rank's time most exceeds the others', with the excess (ms)."""
    got = {ph: pick(r, phase_variant(config, ph), EXCESS, "value") for ph in PHASES}
    got = {ph: float(v) for ph, v in got.items() if not isinstance(v, Missing)}
    if not got:
        return None
    ph = max(got, key=got.get)
    return ph, got[ph]


# ------------------------------------------------------------------ table and figure

_TABLE = ["config", "rank", "step_ms", "compute_ms", "comm_ms", "hidden_ms", "exposed_ms",
          "exposed_transfer_ms", "exposed_wait_ms", "allreduce_transfer_ms", "allreduce_wait_ms",
          "exposed_pct", "lateness_ms", "late_rank", "late_p", "late_phase", "buckets", "K"]


def _rank_record(r: pd.DataFrame, config: str, rank: int) -> dict[str, Any]:
    v = rank_variant(config, rank)
    q = {"step_ms": overlap.STEP, "compute_ms": overlap.COMPUTE, "comm_ms": overlap.COMM,
         "hidden_ms": overlap.HIDDEN, "exposed_ms": overlap.EXPOSED,
         "exposed_transfer_ms": overlap.EXPOSED_TRANSFER, "exposed_wait_ms": overlap.EXPOSED_WAIT,
         "allreduce_transfer_ms": overlap.TRANSFER, "allreduce_wait_ms": overlap.WAIT}
    out: dict[str, Any] = {"config": config, "rank": rank}
    for col, metric in q.items():
        cell = pick(r, v, metric)
        out[col] = "" if isinstance(cell, Missing) and config == BUILTIN else cell
    return out


def _job_record(r: pd.DataFrame, config: str) -> dict[str, Any]:
    v = job_variant(config)
    timed = config != BUILTIN
    phase = late_phase(r, config)
    blank = "" if not timed else None
    return {
        "config": config, "rank": "all", "step_ms": pick(r, v, overlap.STEP),
        "exposed_ms": pick(r, v, overlap.EXPOSED) if timed else "",
        "exposed_transfer_ms": pick(r, v, overlap.EXPOSED_TRANSFER) if timed else "",
        "allreduce_transfer_ms": pick(r, v, overlap.TRANSFER) if timed else "",
        "exposed_pct": pick(r, v, overlap.EXPOSED_SHARE) if timed else "",
        "lateness_ms": pick(r, v, overlap.LATENESS) if timed else "",
        "late_rank": blank if blank is not None else pick(r, v, LATE_RANK, "value"),
        "late_p": blank if blank is not None else pick(r, v, LATE_P, "value"),
        "late_phase": phase[0] if phase else "",
        "buckets": pick(r, v, BUCKETS, "value") if timed else "",
        "K": pick(r, v, MICRO, "value"),
    }


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Data parallel: per configuration, each rank's step split into compute and
    communication (hidden, exposed; exposed and all-reduce split into moving bytes and
    waiting for the last rank), then across ranks the job's step, the exposed share, the
    arrival lateness at the first all-reduce, the late rank with its binomial p, the
    phase that made it late, the bucket count and the micro-batches per step (medians, ms)."""
    r = rows_of("D01", frame)
    records = []
    for config in configs_of(r):
        records += [_rank_record(r, config, k) for k in ranks_of(r, config)]
        records.append(_job_record(r, config))
    return make_table(records, _TABLE)


#: the figure's segments of a rank's step: (label, metric)
SEGMENTS = (("input", overlap.PHASE_TIME["input"]), ("forward", overlap.PHASE_TIME["forward"]),
            ("backward compute", overlap.BACKWARD_COMPUTE),
            ("exposed: transfer", overlap.EXPOSED_TRANSFER),
            ("exposed: waiting for the last rank", overlap.EXPOSED_WAIT),
            ("optimizer", overlap.PHASE_TIME["optimizer"]))


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Where each rank's step went, configuration by configuration: input, forward, the
    backward's compute, the communication the backward waited for (split into moving bytes,
    the least any rank waited, and waiting for the last rank to arrive) and the optimizer;
    medians over the interleaved steps, so the segments need not add up to the step's
    median exactly. The planted straggler's rank shows its sleep in the phase it was planted
    in, the other ranks the same time as waiting."""
    # plotting is imported here, not above: timing jobs import this module
    import numpy as np
    import seaborn as sns

    from perflab.kit.figures import add_note, new_figure, num

    r = rows[rows.experiment == "D01"]
    bars = [(c, k) for c in configs_of(r) if c not in (BUILTIN, AA) for k in ranks_of(r, c)]
    fig, (ax,) = new_figure(ENTRY, r, width=9.0, height=max(3.0, 0.34 * len(bars) + 1.6))
    colours = sns.color_palette("tab10", n_colors=len(SEGMENTS))
    left = np.zeros(len(bars))
    for (label, metric), colour in zip(SEGMENTS, colours):
        widths = np.array([num(pick(r, rank_variant(c, k), metric)) or 0.0 for c, k in bars])
        ax.barh(np.arange(len(bars)), widths, left=left, color=colour, label=label)
        left += widths
    ax.set_yticks(np.arange(len(bars)), [f"{c} · rank {k}" for c, k in bars])
    ax.invert_yaxis()
    ax.set_xlabel("ms per step (median of each part)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, fontsize=8)
    s = planted(r)
    if s is not None and num(s[1]) is not None and num(s[2]) is not None:
        add_note(ax, [f"planted: rank {num(s[1]):.0f} sleeps {num(s[2]):g} ms in {s[0]} "
                      "(straggler)"])
    return fig


# ------------------------------------------------------------------ the claims


def decided(ev, b: str, metric: str) -> tuple[float, Decision]:
    """``b`` against the baseline on ``metric``: the effect (ms, median of the paired block
    differences) and whether it is outside D01's own A/A floor of that metric (the baseline
    against its copy, interleaved in the same blocks: a floor of the statistic it gates, as
    C00's is of the single-process step)."""
    v = diff_variant(b, BASELINE, metric)
    effect = ev.value("D01", v, EFFECT, "value")
    floor = ev.maybe("D01", diff_variant(AA, BASELINE, metric), AA_FLOOR, "value")
    if floor is None:
        return effect, (False, "not resolved: no A/A floor in D01's rows (the baseline "
                               "against its copy)")
    rel, p = ev.value("D01", v, "ab_effect_rel", "value"), ev.value("D01", v, "ab_p", "value")
    ok = ev.value("D01", v, "ab_resolved", "value") >= 0.5  # judged against that floor
    return effect, (ok, f"Wilcoxon p={p:.3g}, effect {rel:+.2g}%, D01's A/A floor "
                        f"{floor:.2g}% (this metric's noise: the baseline against its copy)")


def _planted(ev) -> tuple[str, float, float]:
    """(phase, rank, sleep ms) of the planted straggler; Absent without one."""
    got = planted(ev.of("D01"))
    if got is None:
        raise Absent("no planted straggler" + ("" if ev.has("D01") else " (D01 not run)"))
    v = planted_variant(got[0])
    return got[0], ev.value("D01", v, PLANTED_RANK, "value"), ev.value("D01", v, PLANTED_SLEEP,
                                                                        "value")


@claim("C48", "D01", "forcing the all-reduce to wait in its hook (no overlap) exposes more "
       "communication per batch than DDP's overlapped default",
       chapter="extension: not in the chapter (data parallel)",
       tolerance="overlap_off - baseline exposed communication per batch > 0, beyond D01's A/A "
       "floor (the baseline against its copy)")
def _overlap_hides(ev):
    effect, how = decided(ev, OVERLAP_OFF, EXPOSED_PER_BATCH)
    base = ev.value("D01", job_variant(BASELINE), EXPOSED_PER_BATCH, "median")
    comm = ev.value("D01", rank_variant(BASELINE, 0), overlap.COMM, "median")
    hidden = ev.value("D01", rank_variant(BASELINE, 0), overlap.HIDDEN, "median")
    share = 100 * hidden / comm if comm else 0.0
    return judge(effect > 0, f"overlap off {effect:+.3g} ms per batch over the baseline's "
                 f"{base:.3g} ms exposed; the baseline hides {share:.0f}% of rank 0's "
                 "communication", is_resolved=how,
                 mechanism="the overlapped baseline exposed as much: its backward had little "
                 "compute left to hide the all-reduce behind")


@claim("C49", "D01", "one bucket (bucket_cap_mb at least the model) exposes more communication "
       "than DDP's default buckets: its all-reduce can only start when the backward is done",
       chapter="extension: not in the chapter (data parallel)",
       tolerance="single-bucket - baseline exposed communication per batch > 0, beyond D01's "
       "A/A floor; the baseline must run more than one bucket")
def _one_bucket(ev):
    # each read through the raising lookup: an instrument error is no missing bucket size
    sweep = [(mb, c) for mb, c in bucket_configs(ev.of("D01"))
             if ev.value("D01", job_variant(c), BUCKETS, "value") == 1]
    if not sweep:
        raise Absent("no bucket size ran as a single bucket" + ("" if ev.has("D01")
                                                               else " (D01 not run)"))
    mb, config = sweep[-1]
    base_buckets = ev.value("D01", job_variant(BASELINE), BUCKETS, "value")
    effect, how = decided(ev, config, EXPOSED_PER_BATCH)
    measured = f"one bucket ({mb:g} MiB) {effect:+.3g} ms exposed per batch vs {base_buckets:.0f}"
    if base_buckets <= 1:
        return judge(effect > 0, measured + " bucket(s) at the default", is_resolved=(
            False, "not resolved: the model fits DDP's first bucket, so the baseline runs one "
            "bucket too"))
    return judge(effect > 0, measured + " buckets at the default", is_resolved=how,
                 mechanism="the default buckets exposed as much: their all-reduces did not "
                 "overlap the backward either")


@claim("C50", "D01", "a planted straggler is named with its phase: the rank that sleeps arrives "
       "last at the all-reduce, its planted phase is where its time went, and the others wait "
       "about its sleep",
       chapter="extension: not in the chapter (data parallel)",
       tolerance="late rank = planted rank (binomial p < 0.05); its largest phase excess in the "
       "planted phase and a median lateness within 0.5-1.5x the sleep, the lateness beyond "
       "D01's A/A floor")
def _straggler_named(ev):
    phase, rank, sleep = _planted(ev)
    v = job_variant(STRAGGLER)
    late, p = ev.value("D01", v, LATE_RANK, "value"), ev.value("D01", v, LATE_P, "value")
    lateness = ev.value("D01", v, overlap.LATENESS, "median")
    excess = {ph: ev.value("D01", phase_variant(STRAGGLER, ph), EXCESS, "value")
              for ph in PHASES}
    found = max(excess.items(), key=lambda kv: kv[1])
    _, how = decided(ev, STRAGGLER, overlap.LATENESS)
    return judge_parts(
        Part(int(late) == int(rank), f"rank {late:.0f} last (planted: rank {rank:.0f})",
             (p < overlap.STRAGGLER_P, f"binomial p={p:.2g}"), name="the late rank",
             mechanism=f"rank {late:.0f}, not the planted rank {rank:.0f}, arrived last"),
        Part(found[0] == phase, f"its largest excess {found[0]} {found[1]:+.3g} ms (planted: "
             f"{phase})", how, name="the phase", mechanism=f"the excess is in {found[0]}"),
        Part(0.5 <= lateness / sleep <= 1.5, f"lateness {lateness:.3g} ms for a {sleep:g} ms "
             "sleep", how, name="the wait", mechanism="the others' wait is far from the sleep"))


@claim("C51", "D01", "a straggler's delay is waiting, not transfer: the all-reduce's transfer "
       "time (its shortest duration on any rank) stays put while the others' wait grows by "
       "about the sleep",
       chapter="extension: not in the chapter (data parallel)",
       tolerance="the transfer's change (95% interval) within +-10% of the sleep; the earliest "
       "rank's all-reduce wait >= 50% of the sleep, the lateness beyond D01's A/A floor")
def _wait_not_transfer(ev):
    _, _, sleep = _planted(ev)
    v = diff_variant(STRAGGLER, BASELINE, overlap.TRANSFER)
    lo, hi = ev.value("D01", v, CI_LOW, "value"), ev.value("D01", v, CI_HIGH, "value")
    effect = ev.value("D01", v, EFFECT, "value")
    waits = [ev.value("D01", rank_variant(STRAGGLER, k), overlap.WAIT, "median")
             for k in ranks_of(ev.of("D01"), STRAGGLER)]
    bound = 0.1 * sleep
    inside, outside = -bound <= lo and hi <= bound, lo > bound or hi < -bound
    _, how = decided(ev, STRAGGLER, overlap.LATENESS)
    return judge_parts(
        Part(inside, f"transfer {effect:+.3g} ms [{lo:+.3g}, {hi:+.3g}]",
             (inside or outside, f"95% interval against +-{bound:.3g} ms (10% of the sleep)"),
             name="the transfer", mechanism="the transfer itself moved with the straggler"),
        Part(max(waits) >= 0.5 * sleep, f"largest wait {max(waits):.3g} ms for a {sleep:g} ms "
             "sleep", how, name="the wait", mechanism="the others did not wait for it"))


@claim("C52", "D01", "accumulating K micro-batches under no_sync() cuts the exposed "
       "communication per micro-batch (one all-reduce per K)",
       chapter="extension: not in the chapter (data parallel)",
       tolerance="accum_k<K> - baseline exposed communication per batch < 0, beyond D01's A/A "
       "floor (largest K)")
def _no_sync(ev):
    ks = accumulation_configs(ev.of("D01"))
    if not ks:
        raise Absent("no accumulation configuration" + ("" if ev.has("D01")
                                                        else " (D01 not run)"))
    k, config = ks[-1]
    effect, how = decided(ev, config, EXPOSED_PER_BATCH)
    base = ev.value("D01", job_variant(BASELINE), EXPOSED_PER_BATCH, "median")
    acc = ev.value("D01", job_variant(config), EXPOSED_PER_BATCH, "median")
    ratio = acc / base if base else float("nan")
    return judge(effect < 0, f"K={k}: {acc:.3g} vs {base:.3g} ms exposed per batch "
                 f"({ratio:.2f}x; one all-reduce per K would give {1 / k:.2f}x)",
                 is_resolved=how,
                 mechanism="the accumulated step exposed as much per batch: its one all-reduce "
                 "waited as long as K would have")


# ------------------------------------------------------------------ the what-if set

#: the interventions on a data-parallel step, each measured by D01 against the baseline:
#: (name, what changes, the configurations that measure it, what bounds its gain)
WHATIF = (
    ("bucket_size", "DDP(bucket_cap_mb=...): smaller buckets start the all-reduce earlier in "
     "the backward, larger ones launch fewer", "bucket_", "the exposed communication"),
    ("no_sync_accumulation", "K micro-batches per optimizer step, no_sync() on the first K-1: "
     "one all-reduce per K", "accum_k", "the exposed communication, per batch"),
    ("fp16_compression", "register_comm_hook(fp16_compress_hook): half the bytes on the wire",
     FP16, "the exposed transfer"),
)


def whatif_candidates(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """For each intervention of :data:`WHATIF`: its best measured configuration, the change
    in step time and exposed communication per batch against the baseline (block medians,
    judged), and ``applies`` ("" or why not). For the what-if set (W01) to pick up."""
    r = rows_of("D01", frame)
    share = pick(r, job_variant(BASELINE), overlap.EXPOSED_SHARE)
    out = []
    for name, change, prefix, bound in WHATIF:
        configs = [c for c in configs_of(r) if c.startswith(prefix)]
        best = None
        for c in configs:
            step = pick(r, diff_variant(c, BASELINE, STEP_PER_BATCH), EFFECT, "value")
            if not isinstance(step, Missing) and (best is None or step < best[1]):
                best = (c, float(step))
        why = ("" if configs else f"D01 measured no {prefix}* configuration")
        if not why and isinstance(share, Missing):
            why = f"the baseline's exposed communication was not measured ({share})"
        elif not why and best is None:
            why = "no configuration's step was judged against the baseline"
        rec = {"name": name, "change": change, "bound": bound, "applies": why,
               "exposed_share_pct": None if isinstance(share, Missing) else float(share)}
        if best is not None:
            c = best[0]
            rec.update(config=c, step_effect_ms=best[1], step_resolved=bool(pick(
                r, diff_variant(c, BASELINE, STEP_PER_BATCH), "ab_resolved", "value") == 1),
                exposed_effect_ms=pick(r, diff_variant(c, BASELINE, EXPOSED_PER_BATCH),
                                       EFFECT, "value"))
        out.append(rec)
    return out


def check_config(cfg: dict, view: ConfigView) -> None:
    """D01's launch must be possible here, when it is selected: its ranks, backend and
    planted straggler."""
    if ENTRY.eid not in view.selected:
        return
    from perflab.experiments.d01_data_parallel import distributed

    try:
        distributed.plan(view.contract(ENTRY.eid), visible_cuda=view.visible_cuda, cores=1)
    except distributed.PlanError as exc:
        raise ConfigProblem(exc.key, exc.message) from None
