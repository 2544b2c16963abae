"""E08 — latency, throughput and peak memory across batch sizes.

Holds the controlled training step fixed (model, initialization, optimizer)
and sweeps the batch size B. For each B, in a fresh process of its own (a
peak is comparable only between processes that ran the same code up to the
measured region): ms/step (median, IQR of synchronized warmed calls),
ms/example (median / B), examples/s from free-running stretches (a training
loop's rate, one sync at each stretch's end: the host may run ahead of the
device, which a synchronized call forbids), and the peak memory of the warmup
and timed steps — on CUDA the caching allocator's peak allocated and peak
reserved (counters reset once the model and batch are built), on the CPU the
process's peak resident set (VmHWM, reset at the same point). A CUDA
out-of-memory error becomes rows with status ``oom`` and the reason.

The aggregation then writes the experiment's rows with its three answers —
lowest-latency batch, highest-throughput batch, largest batch that fits — and
the between-process floor: ``replicates`` further fresh processes of one
batch size's contract (variant ``replicate_<k>/batch_<B>``), the A/A of
separate processes (see :mod:`perflab.experiments.e08_batch_sweep.sweep`).

With ``interleaved_blocks`` set, one more job times every batch size in one process, in a
balanced round robin of blocks (variant ``interleaved/batch_<B>``): the series C19-C21
compare batch sizes by, measured together.

Under Snakemake the same script is two rules: ``e08_batch`` (one job per
``{batch}``: ``64``, ``64_r1`` for a replicate, ``interleaved``) and ``e08_batch_sweep`` (the
aggregation). By hand::

    python scripts/e08_batch_sweep.py                  # every job, a subprocess each
    python scripts/e08_batch_sweep.py --batch 64       # one batch size, in this process
    python scripts/e08_batch_sweep.py --batch 64 --replicate 1   # its first replicate
    python scripts/e08_batch_sweep.py --interleaved    # every batch size in one process
    python scripts/e08_batch_sweep.py --aggregate-only # aggregate the per-batch files present
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import gc
import statistics
import subprocess
import sys
from pathlib import Path

import torch

from perflab.core.names import STEP_LATENCY
from perflab.core.names import SYNCED_CALL as SYNCED
from perflab.experiments.e08_batch_sweep import (
    CPU_PEAK,
    CUDA_PEAKS,
    EID,
    FREE_RUNNING_STEP,
    INTERLEAVED,
    INTERLEAVED_JOB,
    LATENCY_PER_EXAMPLE,
    PEAK_ALLOCATED,
    PEAK_RESERVED,
    interleaved_variant,
    job_variant,
    sweep,
)
from perflab.instruments import memory, timing, workloads
from perflab.pipeline import config as cfgmod
from perflab.pipeline.runner import base_parser, config_from_args, execute, log_to

STATS = ("median", "iqr", "p25", "p75", "mean", "min", "max")
#: free-running stretches per batch size, each of repeats / FREE_STRETCHES steps
FREE_STRETCHES = 4


def build_step(ctx, batch: int, variant: str):
    """The controlled training step with a batch of ``batch`` examples resident on the device.

    The batch size reaches the builder as a ``batch`` override when it takes
    one (the registered workloads do); a user's builder without that
    parameter is built as configured and only its batch factory sees B (a
    workload with its own loader then cannot be swept: the row says so). The
    step is the workload's own train_step where it gives one.
    Returns ``None`` (with an ``unsupported`` row under ``variant``) for a workload
    without an optimizer.
    """
    spec = ctx.contract["workloads"][ctx.contract["workload"]]
    try:
        workloads.check_params(spec["target"], {"batch": batch})
        overrides = {"batch": batch}
    except workloads.WorkloadError:  # a builder without a batch parameter: only B batches
        overrides = {}
    step = ctx.step(variants=(variant,), batch_size=batch, **overrides)
    if step is None:
        return None
    w = step.workload
    if w.loader is not None and not overrides:
        raise workloads.NotApplicable(
            f"the workload's loader fixes the batch at {w.batch_size} and its builder takes no "
            "'batch' parameter: the sweep cannot set B")
    ctx.set_defaults(input_shape=w.input_shape(batch))
    return step


def _peak_rows(ctx) -> list[tuple[str, str]]:
    """(metric, what it is) of the peak readings on this device."""
    if ctx.is_cuda:
        return [(PEAK_ALLOCATED, "torch.cuda.max_memory_allocated: peak of live tensors"),
                (PEAK_RESERVED, ("torch.cuda.max_memory_reserved: peak held by the "
                                 "caching allocator"))]
    return [(CPU_PEAK, ("VmHWM: peak resident set of this whole process (interpreter, "
                        "libraries, model, optimizer state, activations)"))]


def _run(ctx, batch: int, variant: str, warmup: int, repeats: int,
         where: list[str]) -> dict | None:
    """Build, reset the peaks, run warmup + timed steps, read the peaks."""
    step = build_step(ctx, batch, variant)
    if step is None:
        return None
    ctx.sync()
    gc.collect()
    if ctx.is_cuda:
        memory.reset_cuda_peaks(ctx.device)
        reset = True
    else:
        reset = memory.reset_vmhwm()
    where[0] = f"the {warmup} warmup and {repeats} timed steps"
    samples = timing.time_calls(step, warmup=warmup, repeats=repeats, sync=ctx.sync)
    ctx.sync()
    if ctx.is_cuda:
        c = memory.cuda_counters(ctx.device)
        peaks = {PEAK_ALLOCATED: c.max_allocated_mib, PEAK_RESERVED: c.max_reserved_mib}
    else:
        peaks = {CPU_PEAK: memory.vmhwm_mib()}
    # throughput is a training loop's rate: free-running stretches, one sync at each end
    where[0] = f"the {FREE_STRETCHES} free-running stretches"
    free = timing.free_running_ms_per_step(step, steps=max(1, repeats // FREE_STRETCHES),
                                           stretches=FREE_STRETCHES, sync=ctx.sync)
    return {"samples": samples, "peaks": peaks, "reset": reset, "free_ms": free}


def _oom_rows(ctx, variant: str, why: str, metrics) -> None:
    """The rows of a batch size that ran out of memory (status ``oom``, the reason)."""
    for metric, unit in metrics:
        ctx.unsupported(variant=variant, metric=metric, unit=unit, reason=why, status="oom",
                        window="did not fit", sync_boundary="n/a")


def _release(ctx) -> None:
    """Give the memory of a failed build back (the exception held its tensors)."""
    gc.collect()
    if ctx.is_cuda:
        torch.cuda.empty_cache()


#: the interleaved job's metrics (what a size that did not fit gets an oom row for)
INTERLEAVED_METRICS = ((STEP_LATENCY, "ms"), (FREE_RUNNING_STEP, "ms"),
                       ("throughput", "examples/s"))


def measure_interleaved(ctx):
    """Every swept batch size in this one process, in a balanced round robin of blocks.

    Each block runs every size once (Williams order): ``interleaved_inner`` synchronized
    calls (its latency), then a free-running stretch of as many steps (its rate). Drift on
    the machine then hits every size alike, and C19-C21 compare batch sizes by series
    measured together, where the per-batch jobs are separate processes whose medians move
    apart by the between-process spread. No peak memory here: the sizes share a process.
    A size that does not fit beside the smaller ones' steps (and every larger one) is an
    ``oom`` row; the rest still run.
    """
    p, t = ctx.params, ctx.timing
    blocks, inner, warmup = int(p["interleaved_blocks"]), int(p["interleaved_inner"]), int(t["warmup"])
    steps, shapes, oom = {}, {}, None
    for b in sorted({int(x) for x in p["batches"]}):
        v = interleaved_variant(b)
        if oom is not None:
            _oom_rows(ctx, v, f"not tried: batch {oom} already did not fit in this process",
                      INTERLEAVED_METRICS)
            continue
        try:
            step = build_step(ctx, b, v)
            if step is None:
                return
            timing.warm(step, warmup, ctx.sync)
        except torch.cuda.OutOfMemoryError as exc:
            step, oom = None, b
            first = (str(exc).strip().splitlines() or ["out of memory"])[0]
            _release(ctx)
            _oom_rows(ctx, v, f"torch.cuda.OutOfMemoryError building or warming batch {b} "
                      f"beside the smaller sizes' steps: {first}", INTERLEAVED_METRICS)
            continue
        steps[b], shapes[b] = step, step.workload.input_shape(b)
    if not steps:  # no size fitted: their rows say why
        return
    lat = {b: [] for b in steps}
    lat_block = {b: [] for b in steps}
    free = {b: [] for b in steps}

    def block(i: int, b: int) -> None:
        got = timing.time_calls(steps[b], warmup=0, repeats=inner, sync=ctx.sync)
        lat[b] += got
        lat_block[b] += [i] * len(got)
        free[b].append(timing.time_unsynchronized_loop(steps[b], inner, ctx.sync).real_ms_per_step)

    timing.round_robin(list(steps), blocks=blocks, run=block)
    order = (f"{blocks} blocks, each every batch size ({', '.join(map(str, steps))}) in one "
             f"process; {timing.ROUND_ROBIN_ORDER}")
    for b in steps:
        v = interleaved_variant(b)
        kw = {"input_shape": shapes[b]}
        window = f"after warmup {warmup}; {inner} calls of batch {b} in each of {blocks} blocks"
        s = ctx.summary(lat[b], variant=v, metric=STEP_LATENCY, window=window,
                        sync_boundary=f"{SYNCED}; {order}", statistics=STATS,
                        block=lat_block[b], **kw)
        stretch = (f"a free-running stretch of {inner} steps of batch {b} after its calls in "
                   f"each of {blocks} blocks")
        boundary = ("one sync at each stretch's end (queue drained before): the host may run "
                    f"ahead of the device; {order}")
        f = ctx.summary(free[b], variant=v, metric=FREE_RUNNING_STEP, window=stretch,
                        sync_boundary=boundary, statistics=("median", "min", "max"),
                        block=list(range(blocks)), **kw)
        ctx.row(variant=v, metric="throughput", value=b / f["median"] * 1e3,
                unit="examples/s", statistic="median", n=blocks,
                window=f"B / median ms per step ({stretch})",
                sync_boundary=f"{timing.FREE_RUNNING_THROUGHPUT}; {order}", **kw)
        ctx.log(f"{v}: median {s['median']:.3f} ms, free-running {f['median']:.3f} ms/step, "
                f"{b / f['median'] * 1e3:.0f} examples/s")


def measure(ctx):
    p, t = ctx.params, ctx.timing
    if p.get(INTERLEAVED):
        return measure_interleaved(ctx)
    batch, repeats, warmup = int(p["batch"]), int(p["repeats"]), int(t["warmup"])
    # a replicate is the same measurement in a further fresh process, under its own name
    v = job_variant(batch, int(p.get("replicate", 0)))
    where = ["building the model, optimizer and batch"]
    oom = None
    try:
        result = _run(ctx, batch, v, warmup, repeats, where)
    except torch.cuda.OutOfMemoryError as exc:
        peak = ""
        if ctx.is_cuda:
            peak = (f"; peak allocated before the failure "
                    f"{torch.cuda.max_memory_allocated(ctx.device) / memory.MiB:.1f} MiB")
        first_line = (str(exc).strip().splitlines() or ["out of memory"])[0]
        oom = f"torch.cuda.OutOfMemoryError during {where[0]} at batch {batch}{peak}: {first_line}"
        result = None
    if oom is not None:
        # the exception (and the tensors its traceback held) is gone: give the memory back
        _release(ctx)
        ctx.log(f"batch {batch}: OOM ({oom})")
        _oom_rows(ctx, v, oom, ((STEP_LATENCY, "ms"), ("throughput", "examples/s"),
                                (FREE_RUNNING_STEP, "ms"), (LATENCY_PER_EXAMPLE, "ms"),
                                *((m, "MiB") for m, _ in _peak_rows(ctx))))
        return
    if result is None:  # no training step (unsupported row already written)
        return

    window = f"steady state after warmup {warmup}, {repeats} repeats, batch {batch}"
    s = ctx.summary(result["samples"], variant=v, metric=STEP_LATENCY, window=window,
                    sync_boundary=SYNCED, statistics=STATS)
    free = statistics.median(result["free_ms"])
    stretch = (f"{FREE_STRETCHES} free-running stretches of {max(1, repeats // FREE_STRETCHES)} "
               f"steps after the timed steps, batch {batch}")
    ctx.row(variant=v, metric=FREE_RUNNING_STEP, value=free, unit="ms", statistic="median",
            window=stretch, sync_boundary="one sync at each stretch's end (queue drained "
            "before): the host may run ahead of the device", n=FREE_STRETCHES)
    ctx.row(variant=v, metric="throughput", value=batch / free * 1e3, unit="examples/s",
            statistic="median", window=f"B / median ms per step ({stretch})",
            sync_boundary=timing.FREE_RUNNING_THROUGHPUT, n=FREE_STRETCHES)
    ctx.row(variant=v, metric=LATENCY_PER_EXAMPLE, value=s["median"] / batch, unit="ms",
            statistic="median", window=f"median step latency / B ({window})",
            sync_boundary=SYNCED, n=repeats)
    span = (f"from after the model and batch were built (peak reset there) through "
            f"{warmup} warmup + {repeats} timed steps, in this batch size's own process")
    if not result["reset"]:
        span = ("since the process started (the kernel refused to reset VmHWM), through "
                f"{warmup} warmup + {repeats} timed steps")
    boundary = ("read after a final synchronize" if ctx.is_cuda
                else "read after the last step returned (the CPU runs synchronously)")
    for metric, what in _peak_rows(ctx):
        ctx.row(variant=v, metric=metric, value=result["peaks"][metric], unit="MiB",
                window=f"{what}; {span}", sync_boundary=boundary, n=warmup + repeats)
    if not ctx.is_cuda:
        why = f"CUDA caching-allocator counters need a CUDA device; the CPU row is {CPU_PEAK}"
        for metric in CUDA_PEAKS:
            ctx.unsupported(variant=v, metric=metric, unit="MiB", reason=why)
    peaks = ", ".join(f"{k} {val:.1f} MiB" for k, val in result["peaks"].items())
    ctx.log(f"{v}: median {s['median']:.3f} ms (IQR {s['iqr']:.3f}), free-running "
            f"{free:.3f} ms/step, {batch / free * 1e3:.0f} examples/s, {peaks}")


# ------------------------------------------------------------------ entry points


def run_batch(cfg: dict, batch: int, log_path: str | None = None, replicate: int = 0):
    """One job in this process (a batch size, or its replicate): its csv, samples, provenance."""
    contract = sweep.batch_contract(cfgmod.contract(cfg, EID), batch, replicate)
    outputs = sweep.batch_outputs(cfgmod.result_dir(cfg), batch, replicate)
    return execute(EID, measure, contract, outputs, log_path)


def aggregate_cfg(cfg: dict, log=None):
    """Aggregate the per-batch files of ``cfg``'s sweep into E08's three outputs."""
    contract = cfgmod.contract(cfg, EID)
    files = sweep.batch_files_for(cfgmod.result_dir(cfg), sweep.jobs(contract))
    return sweep.aggregate(files, contract, cfgmod.experiment_outputs(cfg, EID), log)


def _log(msg: str) -> None:
    print(f"[{EID}] {msg}", file=sys.stderr, flush=True)


def _parse_args(argv):
    p = base_parser(
        EID,
        "E08: latency, throughput and peak memory across batch sizes. Without --batch, runs "
        "every configured batch size (and each replicate) in a fresh subprocess of its own, "
        "then aggregates them into the experiment's CSV, samples CSV and provenance JSON (the "
        "files the Snakemake rules write). A --log gets one file per job: <log>.b<B>[_r<k>].",
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument("--batch", type=int, help="measure this one batch size in this process")
    g.add_argument("--aggregate-only", action="store_true",
                   help="only aggregate the per-batch files already written")
    g.add_argument("--interleaved", action="store_true",
                   help="run the interleaved job in this process: every batch size in a "
                        "round robin of blocks (interleaved_blocks in the config)")
    p.add_argument("--replicate", type=int, default=0,
                   help="with --batch: measure it as replicate K (a further process of the "
                        "same contract, for the between-process floor)")
    return p.parse_args(argv)


def main(argv=None) -> None:
    args = _parse_args(argv)
    cfg = config_from_args(args)
    if args.interleaved:
        if args.replicate:
            sys.exit("--replicate does not apply to --interleaved")
        run_batch(cfg, INTERLEAVED_JOB[0], args.log, INTERLEAVED_JOB[1])
        return
    if args.batch is not None:
        if args.batch < 1 or args.replicate < 0:
            sys.exit("--batch must be at least 1, --replicate at least 0")
        run_batch(cfg, args.batch, args.log, args.replicate)
        return
    if args.replicate:
        sys.exit("--replicate needs --batch")
    if not args.aggregate_only:
        passed = [a for f in args.configfile for a in ("--configfile", f)]
        for key in ("device", "scale", "outdir"):
            if getattr(args, key):
                passed += [f"--{key}", getattr(args, key)]
        for b, k in sweep.jobs(cfgmod.contract(cfg, EID)):
            which = (["--interleaved"] if (b, k) == INTERLEAVED_JOB
                     else ["--batch", str(b), "--replicate", str(k)])
            cmd = [sys.executable, str(Path(__file__).resolve()), *which, *passed]
            if args.log:
                cmd += ["--log", f"{args.log}.b{sweep.job_name(b, k)}"]
            _log(f"{job_variant(b, k)}: fresh process")
            proc = subprocess.run(cmd, check=False)
            if proc.returncode != 0:
                sys.exit(f"E08: {job_variant(b, k)} failed (exit {proc.returncode}); "
                         "nothing aggregated")
    rows = aggregate_cfg(cfg, _log)
    _log(f"{sweep.summary_line(rows)} -> {cfgmod.experiment_outputs(cfg, EID)['csv']}")


if __name__ == "__main__":
    smk = globals().get("snakemake")
    if smk is None:
        main()
    elif hasattr(smk.wildcards, "batch"):  # rule e08_batch: one batch size or a replicate
        execute(EID, measure, smk.params.contract, dict(smk.output.items()),
                smk.log[0] if smk.log else None)
    else:  # rule e08_batch_sweep: the aggregation
        with log_to(smk.log[0]):
            files = [{"csv": c, "samples": s, "provenance": j}
                     for c, s, j in zip(smk.input.csv, smk.input.samples, smk.input.provenance)]
            sweep.aggregate(files, smk.params.contract, dict(smk.output.items()), _log)
