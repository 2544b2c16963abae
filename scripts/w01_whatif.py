"""W01 — what if: each intervention that applies to the workload, measured on its step.

Three kinds of job, each a fresh process (rules in workflow/rules/whatif.smk):

- the plan (``w01_plan``): builds the workload once, reads which interventions of
  :mod:`perflab.experiments.w01_whatif.whatif` apply (each that does not is a row saying why) and the memory its
  step holds (activations saved for backward, persistent state), and lists the ones that
  apply in ``applies.json``. Naming interventions that do not apply is an error, naming them.
- one job per intervention (``w01_intervention``): the baseline loop and the intervened one,
  each on its own copy of the initial state; each first call timed (compile, CUDA graph
  capture included) and the two first steps compared (loss, gradients, update) within the
  intervention's tolerance (on CUDA, where TF32 may run, widened to a multiple of the
  baseline's own TF32 rounding: its first step once more, in strict fp32); each warmed on its
  own; then interleaved blocks of free-running stretches (a sync at the two ends of each, as
  a training loop runs) through the one A/B writer, perflab.instruments.ab; the break-even number of
  steps; the peak memory of each side alone.
  An intervention that fails (a compile error, an OOM) is a row saying why.
- the aggregation (``w01_whatif``): W01's csv, samples and provenance, each job's wall time,
  and the ranked what-if table as Markdown (``w01_whatif.md``, what ``perflab whatif`` prints).

By hand (every job in a subprocess of its own, then the aggregation)::

    python scripts/w01_whatif.py                          # the plan, each that applies, the table
    python scripts/w01_whatif.py --intervention fused_optimizer   # one, in this process
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import copy
import datetime as dt
import gc
import json
import math
import subprocess
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch

from perflab.core import env, io
from perflab.experiments import w01_whatif as names
from perflab.experiments.e08_batch_sweep import sweep
from perflab.experiments.w01_whatif import transforms, whatif
from perflab.instruments import ab, interventions, profiling, timing, workloads
from perflab.instruments.compiler_watch import CompilerWatch
from perflab.kit import sampling
from perflab.pipeline import config as cfgmod
from perflab.pipeline.runner import base_parser, config_from_args, execute, log_to

#: steps in one timed free-running stretch (fewer when a block has fewer)
STRETCH = 10
#: the adaptive A/B's most blocks, times the configured ``blocks`` (the fixed count): with
#: twice the fixed count the stopping rule keeps >= 80 % power at twice the floor
#: (tests/test_sequential_ab.py), and a clear change stops far sooner
MAX_BLOCKS_FACTOR = 2
CONTRACT_COLUMNS = ("workload", "model", "input_shape", "dtype", "device", "device_name",
                    "mode", "execution")


# ------------------------------------------------------------------ the plan


def measure_plan(ctx):
    p = ctx.params
    requested = whatif.selected(p["interventions"])
    w = ctx.workload()
    pr = transforms.probe(w, ctx.device, p)
    reasons = whatif.plan(pr, requested)
    if p["interventions"] != "all" and any(reasons.values()):
        usable = [n for n, why in whatif.plan(pr).items() if not why]
        bad = "; ".join(f"{n}: {why}" for n, why in reasons.items() if why)
        raise ValueError(
            f"W01: intervention(s) named in experiments.W01.interventions do not apply to "
            f"{ctx.contract['workload']} on {ctx.device}: {bad} (these apply here: "
            f"{', '.join(usable) or 'none'})")
    window = f"read from one build of the workload on {ctx.device}"
    for name, why in reasons.items():
        v = names.variant(name, names.PLAN)
        if why:
            ctx.unsupported(variant=v, metric=names.APPLIES, unit="bool", reason=why,
                            window=window)
        else:
            ctx.row(variant=v, metric=names.APPLIES, value=1.0, unit="bool", window=window,
                    sync_boundary="applicability tests of perflab.experiments.w01_whatif.whatif")
    for metric, mib, how in ((names.ACTIVATION_MEMORY, pr.activation_mib,
                              "bytes autograd saved for backward by one forward + loss"),
                             (names.PERSISTENT_MEMORY, pr.persistent_mib,
                              "parameters + gradients + optimizer state after one step")):
        if mib is not None:
            ctx.row(variant=names.PROBE, metric=metric, value=mib, unit="MiB", window=window,
                    sync_boundary=f"tensor accounting (perflab.instruments.memory): {how}")
    applies = [n for n, why in reasons.items() if not why]
    io.atomic_write_json(ctx.outputs["applies"], applies)
    ctx.log(f"applies: {', '.join(applies) or 'none'}; not: "
            + "; ".join(f"{n} ({why})" for n, why in reasons.items() if why))


# ------------------------------------------------------------------ one intervention


def _side_contract(w, recipe, parts) -> dict:
    """The contract columns of a side whose recipe changes them (dtype, execution, shape)."""
    out = {}
    if recipe.precision != "fp32":
        out["dtype"] = f"float32 params, autocast {interventions.AMP_DTYPES[recipe.precision]}"
    if recipe.compile_mode:
        out["execution"] = ("compiled" if recipe.compile_mode == "default"
                            else f"compiled ({recipe.compile_mode})")
    if recipe.dynamic:
        out["execution"] = "compiled (the step's own torch.compile, dynamic=True)"
    if parts.examples != w.batch_size and w.loader is None:
        out["input_shape"] = w.input_shape(parts.examples)
    return out


def _graph_breaks() -> int:
    from torch._dynamo.utils import counters

    return sum(counters["graph_break"].values())


#: the seed of every compared first step: the baseline's, the intervention's, the baseline's
#: control (run twice) and its strict-fp32 rerun draw the same dropout masks; RESEEDED: the
#: baseline's step from another seed, to see whether the step draws random numbers at all
SEED, RESEEDED = 0, 1


@contextmanager
def _rng(ctx, seed: int):
    """The CPU and this device's generators at ``seed`` inside, as they were after."""
    devices = [ctx.device.index if ctx.device.index is not None
               else torch.cuda.current_device()] if ctx.is_cuda else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)  # every generator: the CPU's and each CUDA device's
        yield


def _first_steps(ctx, iv, base, inter, kw_of, rebuild) -> float:
    """Each side's first call from identical state, batch and RNG state, timed, and the
    one-step check's rows (``rebuild``: a builder of the baseline from the initial state, for
    its control: its first step once more, from the same seed and from another, and in strict
    fp32 where TF32 may run).

    Returns the intervened side's first call (ms).
    """
    firsts, states = {}, {}
    breaks = _graph_breaks()
    # identical state and, unless the intervention changes where batches come from, the
    # very same batch
    batch = base.next_batch()
    own = iv.change.keys() & {"batch_factor", "loader_workers", "pin_memory"}
    for side, parts in ((names.BASELINE, base), (names.INTERVENED, inter)):
        b = parts.next_batch() if side == names.INTERVENED and own else batch
        before, out = transforms.parameters_before(parts), []
        with _rng(ctx, SEED):
            firsts[side] = timing.time_first_call(lambda: out.append(parts.run(b)), ctx.sync)
        states[side] = transforms.capture(parts, before, out[0])
        ctx.row(variant=names.variant(iv.name, side), metric=names.FIRST_CALL,
                value=firsts[side], unit="ms", window="the side's first call in this process "
                "(the baseline's first: it pays the process's lazy initialisation)",
                sync_boundary=f"{ctx.sync_name} at both ends", **kw_of[side])
    if iv.change.get("compile_mode"):
        breaks = _graph_breaks() - breaks
        ctx.row(variant=names.variant(iv.name, names.INTERVENED), metric=names.GRAPH_BREAKS,
                value=float(breaks), unit="count", window="torch._dynamo graph breaks while "
                "compiling the first call", sync_boundary="dynamo's counters",
                **kw_of[names.INTERVENED])
    # after both first calls, so that the baseline's still pays the lazy initialisation
    control = _baseline_again(ctx, rebuild, batch, SEED)
    reseeded = _baseline_again(ctx, rebuild, batch, RESEEDED)
    scale = _tf32_scale(ctx, rebuild, batch, states[names.BASELINE])
    ctx.log(f"{iv.name}: first calls baseline {firsts[names.BASELINE]:.1f} ms, intervened "
            f"{firsts[names.INTERVENED]:.1f} ms; "
            + _check(ctx, iv, states, scale, control, reseeded))
    return firsts[names.INTERVENED]


def _rebuilder(ctx, w, base_recipe, fresh):
    """A builder of the baseline from the initial state ``fresh``, for the control's steps.
    The initial state waits on the host: the first calls do not hold a third copy on the
    device."""
    host = fresh.cpu()  # fresh is this job's own copy
    return lambda: transforms.build(w, base_recipe, ctx.device,
                                    transforms.fresh_copy(host, ctx.device))


def _baseline_again(ctx, rebuild, batch, seed: int, strict: bool = False):
    """The baseline's first step once more from the initial state on ``batch`` at ``seed``
    (``strict``: TF32 off); a StepState, or the exception that stopped it."""
    try:
        parts = rebuild()
        before, out = transforms.parameters_before(parts), []
        with _rng(ctx, seed), (whatif.strict_fp32() if strict else nullcontext()):
            out.append(parts.run(batch))
            ctx.sync()
        return transforms.capture(parts, before, out[0])
    except RuntimeError as exc:  # an OOM too: the check says what is missing and why
        return exc


def _tf32_scale(ctx, rebuild, batch, as_run) -> whatif.Tf32Scale | None:
    """The baseline's own TF32 rounding: its first step once more, from the initial state,
    batch and seed, in strict fp32, against the baseline's step as run (None where TF32 may
    not run: a CPU, or TF32 off)."""
    modes = whatif.tf32_modes(ctx.device.type)
    if not modes:
        return None
    strict = _baseline_again(ctx, rebuild, batch, SEED, strict=True)
    if isinstance(strict, Exception):  # no scale: the fp32 limits hold, its rows say why
        return whatif.Tf32Scale(modes, why=" ".join(f"{type(strict).__name__}: {strict}"
                                                    .split())[:200])
    return whatif.tf32_scale(strict, as_run, modes)


def _check(ctx, iv, states, scale, control, reseeded) -> str:
    """The one-step check's rows (each number, its limit or why it is unchecked, the
    baseline's difference from itself, the TF32 scale where measured, the verdict); returns
    them in a phrase for the log."""
    why_no_control = ""
    if isinstance(control, Exception):
        why_no_control = " ".join(f"{type(control).__name__}: {control}".split())[:200]
        control = None
    own = None if control is None else whatif.differences(states[names.BASELINE], control)
    tol = whatif.tf32_aware(whatif.TOLERANCES[iv.tolerance], scale, own)
    agree = whatif.agreement(states[names.BASELINE], states[names.INTERVENED], tol, control,
                             # compile_dynamic: both sides compiled by the step's backend
                             other_generator=bool(iv.change.get("compile_mode")),
                             reseeded=None if isinstance(reseeded, Exception) else reseeded)
    check = dict(variant=names.variant(iv.name, names.CHECK), n=1,
                 window="one step of each side from identical state, batch and RNG state",
                 sync_boundary="values read after both steps; tolerance " + tol.describe())
    for metric in names.CHECK_METRICS:
        if math.isfinite(agree[metric]):
            ctx.row(metric=metric, value=agree[metric], unit="relative", **check)
        else:
            ctx.unsupported(metric=metric, unit="relative", status="error",
                            reason=f"not finite ({agree[metric]})", **check)
        if agree["limits"][metric] is not None:
            ctx.row(metric=metric + names.TOLERANCE_SUFFIX, value=agree["limits"][metric],
                    unit="relative", **check)
        else:
            ctx.unsupported(metric=metric + names.TOLERANCE_SUFFIX, unit="relative",
                            reason=f"unchecked: {tol.describe()}", **check)
        self_kw = {**check, "window": "the baseline's first step twice, from the same state, "
                   "batch and RNG state"}
        if own is not None and math.isfinite(own[metric]):
            ctx.row(metric=names.SELF_PREFIX + metric, value=own[metric], unit="relative",
                    **self_kw)
        else:
            ctx.unsupported(metric=names.SELF_PREFIX + metric, unit="relative",
                            reason=why_no_control or "not finite", **self_kw)
    if scale is not None:
        _scale_rows(ctx, scale, check)
    if agree["verdict"] == whatif.NOT_DECIDABLE:
        ctx.unsupported(metric=names.CORRECT, unit="bool",
                        reason=f"{whatif.NOT_DECIDABLE}: {agree['why']}", **check)
    else:
        ctx.row(metric=names.CORRECT, value=float(agree["passes"]), unit="bool", **check)
    tf32 = "" if scale is None else (
        f"; TF32 scale loss {scale.loss_rel:.2e}, grad {scale.grad_rel:.2e}" if scale.measured
        else f"; TF32 scale not measured ({scale.why}): fp32 limits")
    unchecked = "".join(f"; {m} unchecked" for m in agree["unchecked"])
    return ("check " + ", ".join(f"{m} {agree[m]:.2e}" for m in names.CHECK_METRICS) + tf32
            + unchecked + f" {agree['verdict']}" + (f" ({agree['why']})" if agree["why"] else ""))


def _scale_rows(ctx, scale, check) -> None:
    """The baseline's measured TF32 rounding, each number a row of the check's variant."""
    kw = {**check, "window": "the baseline's first step from the initial state and batch as "
          f"run (TF32 may run: {' and '.join(scale.modes)}) against the same step in strict "
          "fp32 (TF32 off), relative to the strict one",
          "sync_boundary": "values read after both steps; where TF32 is observed (this past "
          "the baseline's difference from itself) the loss and gradient limits are at least "
          f"{whatif.TF32_FACTOR:g} x this, capped at what TF32 rounding can do"}
    for metric, value in zip(names.TF32_SCALE_METRICS, (scale.loss_rel, scale.grad_rel)):
        if scale.measured:
            ctx.row(metric=metric, value=value, unit="relative", **kw)
        else:
            ctx.unsupported(metric=metric, unit="relative", reason=scale.why, **kw)


def _compiler_rows(ctx, iv, side, report, steps: int, kw) -> None:
    """What the compiler did in a side's warm-up steps (after its first call): the evidence
    that a fix of the compiler removed the recompiles (and the baseline's, that it had them).
    Both sides share Dynamo's per-function cache in this process: the intervened side's graph
    counts against the baseline's recompile limit, one entry sooner than alone."""
    window = (f"the side's {steps} warm-up steps after its first call (each side's own batches "
              "in its stream's order)")
    kw = dict(variant=names.variant(iv.name, side), n=steps, sync_boundary="torch._dynamo's "
              "counters and recompile reasons (perflab.instruments.compiler_watch)", **kw)
    ctx.row(metric=names.RECOMPILES, value=float(report.recompiles), unit="count",
            window=window + (f"; cause: {report.cause()}" if report.cause() else ""), **kw)
    ctx.row(metric=names.GRAPHS, value=float(report.graphs), unit="count", window=window, **kw)
    ctx.row(metric=names.EAGER_FALLBACK, value=float(report.eager_fallback), unit="bool",
            window=window + "; 1: a frame hit the recompile limit and runs eager", **kw)


def _pair(ctx, iv, base, inter, kw_of) -> ab.PairedCost:
    """Both sides warmed on their own, then interleaved blocks of free-running stretches."""
    p, t = ctx.params, ctx.timing
    for side, parts in ((names.BASELINE, base), (names.INTERVENED, inter)):
        with CompilerWatch() as watch:
            timing.warm(parts.step, t["warmup"], ctx.sync)
        if iv.change.get("dynamic"):
            _compiler_rows(ctx, iv, side, watch.report, t["warmup"], kw_of[side])
    k = min(STRETCH, p["inner"])
    calls = max(1, p["inner"] // k)
    per_example = iv.judged == whatif.LATENCY_PER_EXAMPLE
    div = {names.BASELINE: k * (base.examples if per_example else 1),
           names.INTERVENED: k * (inter.examples if per_example else 1)}
    fa, fb = profiling.free_running(base.step, k), profiling.free_running(inter.step, k)
    if sampling.rule(ctx.contract) == sampling.FIXED:
        res = timing.interleaved_ab(fa, fb, blocks=p["blocks"], inner=calls, warmup=1,
                                    sync=ctx.sync)
    else:
        res = _sequential_pair(ctx, iv, fa, fb, p["blocks"], calls)
        calls = 1
    n_blocks = len(res.a_blocks)
    block_of = [i for i in range(n_blocks) for _ in range(calls)]
    stretch = (f"{ctx.sync_name} at both ends of each {k}-step stretch only (the loop's host "
               "read of the loss, when it has one, inside)")
    unit = "per example" if per_example else "per step"
    window = (f"{n_blocks} blocks per side, alternating AB/BA, each {calls} stretch(es) of "
              f"{k} free-running steps (ms {unit} = stretch time / {div[names.BASELINE]}"
              + (f" and / {div[names.INTERVENED]}" if per_example else "")
              + f"); after each side's first call and {t['warmup']} warmup steps")
    sides = [ab.Side(names.variant(iv.name, side), [v / div[side] for v in samples],
                     block_of, [v / div[side] for v in blocks], stretch, contract=kw_of[side])
             for side, samples, blocks in ((names.BASELINE, res.a_samples, res.a_blocks),
                                           (names.INTERVENED, res.b_samples, res.b_blocks))]
    pc = ab.record(ctx, *sides, metric=iv.judged, window=window,
                   diff_variant=names.variant(iv.name, names.CHANGE), diff_metric=iv.judged)
    examples = {names.BASELINE: base.examples, names.INTERVENED: inter.examples}
    for side, med in ((names.BASELINE, pc.a_median), (names.INTERVENED, pc.b_median)):
        per_s = 1e3 / med * (1 if per_example else examples[side])
        ctx.row(variant=names.variant(iv.name, side), metric=names.THROUGHPUT, value=per_s,
                unit="examples/s", statistic="median", n=len(res.a_samples), window=window,
                sync_boundary=stretch, **kw_of[side])
    ctx.row(variant=names.variant(iv.name, names.CHANGE), metric=names.THROUGHPUT_REL,
            value=names.throughput_change(pc.judgement.relative_pct), unit="%", n=n_blocks,
            window=window, sync_boundary="from the judged change of the time (perflab.instruments.stats."
            "judge's effect): 1 / (1 + change) - 1")
    ctx.log(f"{iv.name}: baseline {pc.a_median:.4g} ms {unit}, intervened {pc.b_median:.4g} "
            f"(judged change {pc.judgement.relative_pct:+.1f}%, Wilcoxon p {pc.judgement.p:.3g}, "
            f"{'resolved' if pc.resolved else 'not resolved'})")
    return pc


def _sequential_pair(ctx, iv, fa, fb, blocks: int, calls: int) -> timing.ABResult:
    """The adaptive A/B (issue 40): rounds of one-stretch block pairs until the per-block
    change is decided against C00's A/A floor (0 without one), at most twice the stretches
    the fixed contract's ``blocks`` pairs of ``calls`` stretches time, or this
    intervention's share of W01's job budget; a ``sampling_decision`` row says which, and a
    ``sampling_fixed_pairs`` row how many of the fixed contract's pairs the one-stretch
    pairs fill (the pair count its floor is looked up at, here to stop and later to judge).
    One stretch a block: the rule's sequence needs about ten blocks to decide even a clear
    change, so small blocks are where time is saved (scripts/bench_sequential.py)."""
    at = ctx.stop_floor

    def floor(n: int) -> float | None:  # n one-stretch pairs: the floor of the pairs they fill
        return None if at is None else at(ab.fixed_pairs(n, 1, calls))

    share = _budget_share_s(ctx)
    most = MAX_BLOCKS_FACTOR * blocks * calls
    res, d = timing.sequential_ab(fa, fb, max_blocks=most, inner=1, warmup=1, sync=ctx.sync,
                                  floor_pct=floor, deadline_s=share)
    change = names.variant(iv.name, names.CHANGE)
    line = ab.decision_row(ctx, change, d, floor, most,
                           f" or {share:.0f} s" if share is not None else "")
    ab.fixed_pairs_row(ctx, change, d.n, 1, calls)
    ctx.log(f"{iv.name}: {line}")
    return res


def _budget_share_s(ctx) -> float | None:
    """This intervention's seconds for its A/B (None: no budget was split): its job's part of
    W01's share, split evenly among the interventions that apply (``ctx.applying``, the plan's
    count; all those asked for where it is unknown), less what the job has spent so far and,
    where peak memory is measured after the A/B (a fresh process per side, built as the job
    built both), as much again. Split among every intervention asked for, and the A/B given
    the whole part, a CPU GPT-2's seven jobs got 12 s each of a 146 s share, each then spent
    10 s more around it, and W01 took 187 s."""
    total = sampling.job_budget_s(ctx.contract, whatif.EID)
    if total is None:
        return None
    count = getattr(ctx, "applying", None) or len(
        whatif.selected(ctx.params.get("interventions", "all")))
    around = (2 if int(ctx.params.get("peak_calls") or 0) else 1) * (env.process_age_s() or 0.0)
    return max(0.0, total / max(1, count) - around)


def _break_even(ctx, iv, pc, first_ms, examples, kw) -> None:
    """The intervention's first-call cost over its steady step, and the steps that repay it."""
    per_example = iv.judged == whatif.LATENCY_PER_EXAMPLE
    steady = pc.b_median * (examples[names.INTERVENED] if per_example else 1)
    cost = first_ms - steady
    ctx.row(variant=names.variant(iv.name, names.INTERVENED), metric=names.FIRST_CALL_COST,
            value=cost, unit="ms", window="the first call minus the median steady step: the "
            "one-time cost (compiling, capturing, first kernels)",
            sync_boundary=f"{ctx.sync_name} at both ends of the first call", **kw)
    saving = (pc.a_median - pc.b_median) * (examples[names.BASELINE] if per_example else 1)
    v = names.variant(iv.name, names.CHANGE)
    window = "first-call cost / saving per baseline step's worth of examples"
    if pc.resolved and saving > 0:
        ctx.row(variant=v, metric=names.BREAK_EVEN, value=float(max(0, math.ceil(cost / saving))),
                unit="steps", window=window, sync_boundary="from the pair's medians")
    else:
        ctx.unsupported(variant=v, metric=names.BREAK_EVEN, unit="steps", window=window,
                        reason="no resolved saving per step: the first-call cost is not repaid")


def _measure_pair(ctx, iv, w, base_recipe, recipe) -> None:
    """Build both sides from identical state; first calls and check; the pair; break-even."""
    fresh = copy.deepcopy(w.model)
    base = transforms.build(w, base_recipe, ctx.device, transforms.fresh_copy(fresh, ctx.device))
    inter = transforms.build(w, recipe, ctx.device, transforms.fresh_copy(fresh, ctx.device))
    rebuild = _rebuilder(ctx, w, base_recipe, fresh)
    del fresh
    if iv.custom is not None:
        inter = iv.custom(inter)
    kw_of = {names.BASELINE: {}, names.INTERVENED: _side_contract(w, recipe, inter)}
    first_ms = _first_steps(ctx, iv, base, inter, kw_of, rebuild)
    del rebuild
    pc = _pair(ctx, iv, base, inter, kw_of)
    _break_even(ctx, iv, pc, first_ms, {names.BASELINE: base.examples,
                                        names.INTERVENED: inter.examples},
                kw_of[names.INTERVENED])


def _peaks(ctx, iv) -> None:
    """Each side's peak memory alone (as E15-E18), and the intervened minus the baseline."""
    calls = int(ctx.params["peak_calls"])
    window = f"{calls} steps of this side alone (its first calls included)"
    metric = "peak_allocated" if ctx.is_cuda else "peak_rss"
    why = ("" if calls else "peak memory not measured (peak_calls: 0)") or (
        "" if iv.name in whatif.REGISTRY and iv.custom is None
        else "a custom intervention exists in this process only: no process of its own")
    if why:
        for side in (names.BASELINE, names.INTERVENED, names.CHANGE):
            ctx.unsupported(variant=names.variant(iv.name, side), metric=names.PEAK_CHANGE
                            if side == names.CHANGE else metric, unit="MiB", reason=why)
        return
    got = {}
    for side in (names.BASELINE, names.INTERVENED):
        got[side] = interventions.variant_peak(ctx.contract, transforms.VARIANT_BUILDER, {"side": side}, calls)
        interventions.peak_rows(ctx, names.variant(iv.name, side), got[side], window)
    a, b = (got[s].get(metric) for s in (names.BASELINE, names.INTERVENED))
    v = names.variant(iv.name, names.CHANGE)
    if a is None or b is None:
        ctx.unsupported(variant=v, metric=names.PEAK_CHANGE, unit="MiB",
                        reason="a side's peak was not measured (see its rows)")
    else:
        ctx.row(variant=v, metric=names.PEAK_CHANGE, value=b - a, unit="MiB", n=1,
                window=window, sync_boundary=f"intervened minus baseline {metric}")
        ctx.log(f"{iv.name}: peak {metric} baseline {a:.1f} MiB, intervened {b:.1f} MiB")


def measure_intervention(ctx, iv: whatif.Intervention) -> None:
    """One intervention against the baseline (see the module doc); a failure is a row."""
    p, t0 = ctx.params, time.perf_counter()
    w = ctx.workload()
    change = names.variant(iv.name, names.CHANGE)
    pr = transforms.probe(w, ctx.device, p)
    why = (whatif.plan(pr, [iv.name])[iv.name] if iv.name in whatif.REGISTRY
           else iv.applies(pr))
    if why:
        ctx.unsupported(variant=change, metric=iv.judged, unit="ms", reason=why)
        return
    base_recipe = whatif.baseline_recipe(p)
    recipe = whatif.resolve_recipe(iv, base_recipe, p, torch.get_num_threads())
    try:
        _measure_pair(ctx, iv, w, base_recipe, recipe)
    except Exception as exc:  # the intervention's failure is a finding, not a crash
        status = ("oom" if isinstance(exc, torch.cuda.OutOfMemoryError) else "unsupported"
                  if isinstance(exc, workloads.NotApplicable) else "error")
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        ctx.log(f"{iv.name}: {status} ({reason})")
        ctx.rows = [r for r in ctx.rows if not r["variant"].startswith(iv.name + "/")]
        ctx.samples = [s for s in ctx.samples if not s["variant"].startswith(iv.name + "/")]
        ctx.unsupported(variant=change, metric=iv.judged, unit="ms", status=status,
                        reason=reason)
        return
    del w
    if recipe.compile_mode or recipe.dynamic:
        torch._dynamo.reset()  # compiled graphs and CUDA-graph pools hold memory
    gc.collect()
    _peaks(ctx, iv)
    ctx.log(f"{iv.name}: {time.perf_counter() - t0:.1f} s in this job")


def measure_one(ctx):
    measure_intervention(ctx, whatif.REGISTRY[ctx.params["intervention"]])


def measure_one_in(result_dir: Path):
    """measure_one, its adaptive A/B held to C00's A/A floor where this run's results hold
    one (the floor only decides when to stop sampling; the verdict reads it again when
    aggregating)."""
    frame = None
    if files := context_csvs(Path(result_dir)):
        import pandas as pd

        frame = pd.concat(pd.read_csv(f) for f in files)

    applies = Path(whatif.job_outputs(result_dir, whatif.PLAN)["applies"])

    def measure(ctx):
        from perflab.experiments import floors

        try:  # the plan's count: W01's budget is split among the interventions that apply
            ctx.applying = len(json.loads(applies.read_text())) or None
        except (OSError, ValueError, TypeError):
            ctx.applying = None
        if frame is not None and floors.noise_floor_pct(frame) is not None:
            ctx.noise_floor_pct = floors.noise_floor_pct(frame)
            # the floor for the fixed contract's pairs an A/B's stretches fill (C00's
            # narrows as they grow), what the stopping rule stops against
            ctx.stop_floor = lambda pairs: floors.noise_floor_pct(frame, pairs)
        measure_one(ctx)
    return measure


# ------------------------------------------------------------------ the aggregation


def _wall_rows(frame, provenances, span: dict) -> list[dict]:
    """One row per intervention job (its process's wall time, from its provenance), and one
    for the whole set: from the plan's start to the last job's results."""
    out = []

    def row(base, variant, value, window):
        out.append({**{c: base[c] for c in CONTRACT_COLUMNS}, "experiment": whatif.EID,
                    "variant": variant, "metric": names.JOB_WALL, "window": window,
                    "sync_boundary": "wall clock of the jobs (their provenance)",
                    "statistic": "value", "value": float(value), "unit": "s", "n": 1,
                    "status": "ok", "reason": ""})

    for name, prov in provenances.items():
        sel = frame[frame.variant.str.startswith(name + "/")]
        if not sel.empty:
            row(sel.iloc[0], names.variant(name, names.JOB), prov["wall_s"],
                "the intervention's fresh process, start to written results")
    if not frame.empty:
        row(frame.iloc[0], names.ALL_JOBS, float(span["wall_s"]),
            f"the plan's and the {len(provenances)} intervention jobs' own wall times, summed")
        start, end = (dt.datetime.fromisoformat(span[k]) for k in ("started", "finished"))
        row(frame.iloc[0], names.SPAN, (end - start).total_seconds(),
            "the plan's start to the last intervention job's results, whole seconds (other "
            "jobs of the run may run between them)")
    return out


def context_csvs(result_dir: Path) -> list[Path]:
    """The localization and calibration results beside W01's (its bounds and floor read them)."""
    from perflab.experiments.catalogue import EXPERIMENTS

    return [p for e in whatif.CONTEXT if e in EXPERIMENTS
            and (p := result_dir / f"{EXPERIMENTS[e].slug}.csv").is_file()]


def aggregate(contract, plan_files, job_files, outputs, log=None):
    """W01's outputs from the plan's and every intervention job's files; the Markdown table."""
    log = log or (lambda msg: None)

    def name_of(prov):
        return prov["contract"]["params"].get("intervention", whatif.PLAN)

    def contract_of(prov):
        name = name_of(prov)
        return contract if name == whatif.PLAN else whatif.intervention_contract(contract, name)

    jobs = [sweep.read_job(f, contract_of, name_of, lambda n, v: n == whatif.PLAN
                           or v.startswith(n + "/")) for f in [plan_files, *job_files]]
    for name, _, frame, samples in jobs:
        log(f"{name}: {len(frame)} rows, {len(samples)} samples")
    provs = {name: prov for name, prov, _, _ in jobs}
    rows = pd_concat([frame for *_, frame, _ in jobs])
    provenance = sweep.combined_provenance(whatif.EID, names.ENTRY.title, contract, provs,
                                           "jobs")
    measured = {n: p for n, p in provs.items() if n != whatif.PLAN}
    records = rows.to_dict("records") + _wall_rows(rows, measured, provenance)
    for name, prov in measured.items():
        log(f"{name}: {prov['wall_s']:.1f} s")
    frame = sweep.write_outputs(outputs, records, pd_concat([s for *_, s in jobs]), provenance)
    context = io.read_results(context_csvs(Path(outputs["csv"]).parent))
    io.atomic_write_text(outputs["md"], names.markdown(pd_concat([frame, context])))
    return frame


def pd_concat(frames):
    import pandas as pd

    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


# ------------------------------------------------------------------ entry points


def _log(msg: str) -> None:
    print(f"[{whatif.EID}] {msg}", file=sys.stderr, flush=True)


def _applies(cfg) -> list[str]:
    path = whatif.job_outputs(cfgmod.result_dir(cfg), whatif.PLAN)["applies"]
    return json.loads(Path(path).read_text())


def main(argv=None) -> None:
    p = base_parser("W01", "W01: each intervention that applies, measured against the "
                    "baseline. Without options: the plan, then each intervention that applies "
                    "in a fresh subprocess of its own, then the aggregation (the files the "
                    "Snakemake rules write).")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--plan", action="store_true", help="only the plan, in this process")
    g.add_argument("--intervention", help="measure this one intervention in this process")
    g.add_argument("--aggregate-only", action="store_true",
                   help="only aggregate the plan's and the interventions' files present")
    args = p.parse_args(argv)
    cfg = config_from_args(args)
    contract = cfgmod.contract(cfg, whatif.EID)
    rdir = cfgmod.result_dir(cfg)
    if args.plan:
        execute(whatif.EID, measure_plan, contract, whatif.job_outputs(rdir, whatif.PLAN), args.log)
        return
    if args.intervention:
        name = whatif.selected([args.intervention])[0]
        execute(whatif.EID, measure_one_in(rdir), whatif.intervention_contract(contract, name),
                whatif.job_outputs(rdir, name), args.log)
        return
    passed = [a for f in args.configfile for a in ("--configfile", f)]
    for key in ("device", "scale", "outdir"):
        if getattr(args, key):
            passed += [f"--{key}", getattr(args, key)]
    if not args.aggregate_only:
        if subprocess.run([sys.executable, __file__, "--plan", *passed]).returncode:
            sys.exit("W01: the plan failed; nothing measured")
        for name in _applies(cfg):
            _log(f"{name}: fresh process")
            if subprocess.run([sys.executable, __file__, "--intervention", name, *passed]).returncode:
                sys.exit(f"W01: {name} failed; nothing aggregated")
    rows = aggregate(contract, whatif.job_outputs(rdir, whatif.PLAN),
                     [whatif.job_outputs(rdir, n) for n in _applies(cfg)],
                     cfgmod.experiment_outputs(cfg, whatif.EID), _log)
    _log(f"{len(rows)} rows -> {cfgmod.experiment_outputs(cfg, whatif.EID)['csv']}")
    print(Path(cfgmod.experiment_outputs(cfg, whatif.EID)["md"]).read_text())


if __name__ == "__main__":
    smk = globals().get("snakemake")
    if smk is None:
        main()
    elif smk.rule == "w01_plan":
        execute(whatif.EID, measure_plan, smk.params.contract, dict(smk.output.items()),
                smk.log[0])
    elif hasattr(smk.wildcards, "intervention"):
        execute(whatif.EID, measure_one_in(Path(smk.output.csv).parent.parent),
                smk.params.contract, dict(smk.output.items()), smk.log[0])
    else:
        with log_to(smk.log[0]):
            jobs = [{"csv": c, "samples": s, "provenance": j}
                    for c, s, j in zip(smk.input.csv, smk.input.samples, smk.input.provenance)]
            plan = {"csv": smk.input.plan_csv, "samples": smk.input.plan_samples,
                    "provenance": smk.input.plan_provenance}
            aggregate(smk.params.contract, plan, jobs, dict(smk.output.items()), _log)
