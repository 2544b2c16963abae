"""D01 — data parallel: what each rank's step waits for, and for whom.

One job launches N ranks through torch.distributed's standard launcher (torchrun; gloo
on a CPU, NCCL on GPUs), each a fresh process (perflab.experiments.d01_data_parallel.ranks), and merges their
per-step records into D01's rows (perflab.experiments.d01_data_parallel.overlap). Configurations, stepped in
interleaved blocks: DDP's defaults (the baseline), other bucket sizes, the all-reduce
forced to wait in its hook (no overlap), K micro-batches under no_sync(), a planted
straggler (one rank sleeps a known time in a known phase), fp16 gradient compression,
and DDP's own C++ all-reduce with no instrument (the instrument's cost).

Rows: per rank (``<config>/rank<r>``) the step, its phases, compute, communication,
exposed and hidden communication, the all-reduce's transfer and wait; across ranks
(``<config>/ranks``) the job's step, the exposed share, arrival lateness, the late rank
and how significant; per phase the late rank's excess (``<config>/phase/<p>``); the
planted straggler (``straggler/planted/<p>``); and judgements of each configuration
against the baseline on block medians (``<b>_minus_<a>/<metric>``). The rank records
themselves are kept beside the CSV (``d01_data_parallel_ranks.json``).

By hand: ``python scripts/d01_data_parallel.py --configfile config/test.yaml`` (add
``--device cuda`` on a machine with several GPUs).
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import os
import shutil
import tempfile
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from pathlib import Path

from perflab.core import devicelock, io
from perflab.experiments import d01_data_parallel as d01
from perflab.experiments.d01_data_parallel import distributed, overlap
from perflab.instruments import stats
from perflab.pipeline.runner import run

#: per quantity, what it is (the definitions: perflab.experiments.d01_data_parallel.overlap)
HOW = {
    overlap.STEP: "the step, from its start mark to its last (the optimizer's)",
    overlap.COMPUTE: "forward + backward compute + optimizer",
    overlap.BACKWARD_COMPUTE: "the backward minus its exposed communication",
    overlap.COMM: "time with at least one all-reduce in flight (union of hand-over..done)",
    overlap.EXPOSED: "time the backward could not compute for communication: inside the comm "
                     "hooks, and from the last hook's return to the backward's end",
    overlap.HIDDEN: "communication overlapped by compute: comm_time - exposed_comm",
    overlap.ALLREDUCE: "sum over buckets of each all-reduce's hand-over..done",
    overlap.TRANSFER: "sum over buckets of the shortest duration of that all-reduce on any "
                      "rank (moving bytes: the last rank to arrive waited for nobody)",
    overlap.WAIT: "allreduce_time - allreduce_transfer: waiting for the last rank",
    overlap.EXPOSED_TRANSFER: "the least exposed communication of any rank in the step",
    overlap.EXPOSED_WAIT: "exposed_comm - exposed_transfer: exposed waiting for the last rank",
    overlap.LATENESS: "how much later the last rank reached the step's first all-reduce than "
                      "the first (max - min over ranks of its duration)",
    overlap.EXPOSED_SHARE: "the ranks' mean exposed communication, % of the job's step",
    d01.EXPOSED_PER_BATCH: "the ranks' mean exposed communication per micro-batch (/ K)",
    d01.STEP_PER_BATCH: "the job's step (its slowest rank) per micro-batch (/ K)",
    **{overlap.PHASE_TIME[p]: f"the {p} phase (between its marks)" for p in distributed.PHASES},
}
STATS = ("median", "iqr", "p25", "p75", "mean", "min", "max")


def launch_plan(ctx) -> distributed.Plan:
    """The launch the contract carries (the workflow's), or this machine's (by hand, or a
    launch the workflow could not make here: then this raises, saying why)."""
    got = distributed.plan_of(ctx.contract)
    if got is not None:
        return got
    import torch

    return distributed.plan(ctx.contract, visible_cuda=torch.cuda.device_count(),
                            cores=os.cpu_count() or 1)


def measure(ctx):
    p = launch_plan(ctx)
    work = Path(tempfile.mkdtemp(prefix="perflab-d01-"))
    try:
        with held_devices(ctx, p):
            records = distributed.launch(p, ctx.contract, work, ctx.log,
                                         60 * ctx.params["timeout_min"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    merge(ctx, p, records)


@contextmanager
def held_devices(ctx, p: distributed.Plan):
    """Every device of the job held for as long as its ranks run, once per job: the
    harness holds the contract's own (perflab.pipeline.runner.execute), this the rest (the other
    GPUs of an NCCL job). The ranks take no lock of their own."""
    import torch

    own = str(torch.device(ctx.contract["device"]))
    with ExitStack() as stack:
        for dev in p.devices():
            if dev != own:
                stack.enter_context(devicelock.held(dev, f"D01 of {ctx.contract.get('tag')}",
                                                    ctx.log))
        yield


def merge(ctx, p: distributed.Plan, records: list[dict]) -> None:
    """The ranks' records kept beside the CSV, and D01's rows (one unsupported row when a
    rank could not build the step)."""
    io.atomic_write_json(ctx.outputs["ranks"], {"launch": asdict(p), "ranks": records})
    ctx.set_defaults(**records[0]["row_defaults"])
    why = next((r["unsupported"] for r in records if r["unsupported"]), "")
    if why:
        ctx.unsupported(variant=d01.job_variant(d01.BASELINE), metric=overlap.STEP, unit="ms",
                        reason=why)
        return
    write_rows(ctx, p, records)


def write_rows(ctx, p: distributed.Plan, records: list[dict]) -> None:
    frame = overlap.steps_frame(records)
    prm = ctx.params
    window = (f"{prm['blocks']} interleaved blocks x {prm['inner']} steps per configuration "
              f"(balanced order, the same on every rank) after {prm['warmup']} warmup steps; "
              f"{p.ranks} ranks over {p.backend}")
    clock = records[0]["boundary"] + ("; all-reduce marks from a DDP comm hook: hand-over, "
                                      "hook return, the future's completion")
    configs = distributed.configurations(prm)
    jobs = {}
    for cfg in configs:
        kw = {"execution": p.execution(cfg), "window": window}
        rank_rows(ctx, frame[frame.config == cfg.name], records, cfg, clock, kw)
        jobs[cfg.name] = job_rows(ctx, frame, cfg, clock, kw, records)
    planted_rows(ctx, prm, p, window)
    judgements(ctx, jobs, configs, p, window)


def rank_rows(ctx, sel, records, cfg, clock: str, kw: dict) -> None:
    """Each rank's per-step quantities: a summary per (rank, quantity), samples by block."""
    for rec in records:
        mine = sel[sel["rank"] == rec["rank"]]
        for q in overlap.RANK_QUANTITIES:
            if q not in mine or mine[q].isna().all():
                continue
            ctx.summary(mine[q].tolist(), variant=d01.rank_variant(cfg.name, rec["rank"]),
                        metric=q, sync_boundary=f"{clock}; {HOW[q]}", statistics=STATS,
                        block=mine.block.tolist(), device=rec["device"],
                        device_name=rec["device_name"], **kw)


def job_rows(ctx, frame, cfg, clock: str, kw: dict, records) -> "object":
    """The configuration across ranks: the job's step, exposed share, lateness, late rank."""
    steps = overlap.job_steps(frame, cfg.name)
    k = cfg.accumulate
    steps[d01.STEP_PER_BATCH] = steps[overlap.STEP] / k
    v = d01.job_variant(cfg.name)
    common = dict(variant=v, device=",".join(sorted({r["device"] for r in records})), **kw)
    if overlap.EXPOSED in steps:
        steps[d01.EXPOSED_PER_BATCH] = steps[overlap.EXPOSED] / k
    for q in (overlap.STEP, d01.STEP_PER_BATCH, overlap.EXPOSED, d01.EXPOSED_PER_BATCH,
              overlap.EXPOSED_SHARE, overlap.EXPOSED_TRANSFER, overlap.LATENESS, overlap.TRANSFER):
        if q in steps:
            ctx.summary(steps[q].tolist(), metric=q, sync_boundary=f"{clock}; {HOW[q]}",
                        unit="%" if q == overlap.EXPOSED_SHARE else "ms", statistics=STATS,
                        block=steps.block.tolist(), **common)
    sel = frame[frame.config == cfg.name]
    how = "from the rank records"
    ctx.row(metric=d01.MICRO, value=k, unit="count", sync_boundary=how, **common)
    ctx.row(metric=d01.BEHIND, value=int((~sel.ahead).sum()), unit="count", n=len(sel),
            sync_boundary="steps whose start event had fired before the host finished "
            "submitting them (0 on a CPU: no device queue)", **common)
    if sel.buckets.max() > 0:
        ctx.row(metric=d01.BUCKETS, value=int(sel.buckets.median()), unit="count",
                sync_boundary="buckets the comm hook saw per step", **common)
        ctx.row(metric=d01.BUCKET_MIB, value=float(sel.bucket_bytes.median()) / 2**20,
                unit="MiB", sync_boundary="bytes all-reduced per step (every bucket)", **common)
        straggler_rows(ctx, frame, cfg, common)
    return steps


def straggler_rows(ctx, frame, cfg, common: dict) -> None:
    s = overlap.straggler(frame, cfg.name)
    how = (f"the rank with the shortest first all-reduce of each step arrived last; "
           f"{s.steps} steps")
    ctx.row(metric=d01.LATE_RANK, value=s.rank, unit="rank", n=s.steps, sync_boundary=how,
            **common)
    ctx.row(metric=d01.LATE_SHARE, value=s.late_share, unit="%", n=s.steps, sync_boundary=how,
            **common)
    ctx.row(metric=d01.LATE_P, value=s.p, unit="p", n=s.steps, sync_boundary=how
            + f"; one-sided binomial test against 1/{frame['rank'].nunique()} (named when "
            f"p < {overlap.STRAGGLER_P})", **common)
    for phase, ms in s.phase_excess.items():
        ctx.row(**{**common, "variant": d01.phase_variant(cfg.name, phase)},
                metric=d01.EXCESS, value=ms, unit="ms", n=s.steps,
                sync_boundary=f"rank {s.rank}'s median {phase} time minus the other ranks' "
                "(the backward by its compute: waiting is not lateness)")


def planted_rows(ctx, prm, p, window: str) -> None:
    s = prm["straggler"]
    common = dict(variant=d01.planted_variant(s["phase"]), window=window,
                  execution=p.execution(distributed.Config(d01.STRAGGLER)),
                  sync_boundary="the contract's planted straggler (experiments.D01.straggler)")
    ctx.row(metric=d01.PLANTED_RANK, value=int(s["rank"]), unit="rank", **common)
    ctx.row(metric=d01.PLANTED_SLEEP, value=float(s["sleep_ms"]), unit="ms", **common)


#: (metric of the job's steps, the configurations judged against the baseline on it)
COMPARED = ((d01.EXPOSED_PER_BATCH, None), (d01.STEP_PER_BATCH, None),
            (overlap.LATENESS, (d01.STRAGGLER,)), (overlap.TRANSFER, (d01.STRAGGLER,)))


def _blocks(jobs: dict, config: str, metric: str):
    return jobs[config].groupby("block")[metric].median()


def aa_floors(ctx, jobs: dict, window: str, execution: str) -> dict[str, float]:
    """Per compared metric, the A/A floor (%): the baseline against its independent copy,
    block by block — the same statistic every comparison on that metric is judged by
    (:func:`perflab.instruments.stats.aa_floor_pct`); the A/A's own judgement beside it."""
    floors = {}
    for metric, _ in COMPARED:
        if metric not in jobs[d01.BASELINE] or metric not in jobs[d01.AA]:
            continue
        a, b = _blocks(jobs, d01.BASELINE, metric), _blocks(jobs, d01.AA, metric)
        b = b.reindex(a.index)
        floors[metric] = stats.aa_floor_pct(a.tolist(), b.tolist())
        v = d01.diff_variant(d01.AA, d01.BASELINE, metric)
        ctx.judgement(stats.judge(a.tolist(), b.tolist(), paired=True), variant=v,
                      window=f"{window}; per block the median over its steps",
                      execution=execution)
        ctx.row(variant=v, metric=d01.AA_FLOOR, value=floors[metric], unit="%", n=len(a),
                window=f"{window}; per block the median over its steps", execution=execution,
                sync_boundary="95% bound of |median paired block difference| / median of the "
                "baseline, the baseline against its copy (bootstrap over block pairs)")
    return floors


def judgements(ctx, jobs: dict, configs, p, window: str) -> None:
    """Each configuration against the baseline, block median by block median, held to
    the A/A floor of the same metric (the baseline against its copy, :func:`aa_floors`)."""
    by_name = {c.name: c for c in configs}
    floors = aa_floors(ctx, jobs, window, p.execution(by_name[d01.BASELINE]))
    names = [c for c in by_name if c not in (d01.BASELINE, d01.AA, d01.BUILTIN)]
    pairs = [(b, d01.BASELINE, m) for m, only in COMPARED for b in (only or names)]
    pairs.append((d01.BASELINE, d01.BUILTIN, d01.STEP_PER_BATCH))  # the instrument's cost
    for b, a, metric in pairs:
        if metric not in jobs[a] or metric not in jobs[b]:
            continue
        ma, mb = _blocks(jobs, a, metric), _blocks(jobs, b, metric)
        j = stats.judge(ma.tolist(), mb.reindex(ma.index).tolist(), paired=True,
                        noise_floor_pct=floors.get(metric))
        ctx.judgement(j, variant=d01.diff_variant(b, a, metric),
                      window=f"{window}; per block the median over its steps",
                      execution=p.execution(by_name[b]) + ("" if by_name[a].bucket_cap_mb ==
                                                           by_name[b].bucket_cap_mb else
                                                           f" vs {by_name[a].bucket_label()}"))
        ctx.log(f"{b} - {a} on {metric}: {j.effect:+.3f} ms ({j.relative_pct:+.1f}%, "
                f"p={j.p:.3g}, A/A floor {floors.get(metric, float('nan')):.2g}%: "
                f"{'resolved' if j.resolved else 'inconclusive'})")


if __name__ == "__main__":
    run("D01", measure, globals().get("snakemake"))
