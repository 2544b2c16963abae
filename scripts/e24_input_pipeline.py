"""E24 — is the step waiting for its input? A DataLoader-fed training step.

The controlled training step, fed by a DataLoader whose dataset spends a
configured CPU cost preparing each example (perflab.experiments.e24_input_pipeline.dataset). For each
worker count (0, 1, 2, ... up to the cores this job may use): per step, the
wait for the next batch, the host-to-device copy (``non_blocking=True``) and
the compute, with the device synchronized at each boundary; the input-wait
share of the step; examples/s; the first batch's wait (worker start-up).
The configurations run interleaved: in blocks whose order across them is
balanced (Williams), each block a fresh iterator whose first batch (worker
start-up) and warmup steps are not timed, so drift on the machine hits every
configuration alike; the most workers are judged against none block by block.
The correctness column: every configuration trains its own copy of the same
initial state on the same batches in the same order, so its losses must equal
those of ``num_workers=0``.

Then pageable vs pinned host memory (CUDA only): the same loop with
``pin_memory=True`` (one more configuration of the interleaving), and the bare copy ``x.to(device, non_blocking=True)`` from
a pageable and from a pinned tensor as an interleaved pair (ms, GB/s). On the
CPU there is no host-to-device copy to pin for: those rows say so.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import copy

from perflab.core.names import SYNCED_PHASES as SYNCED
from perflab.experiments import e24_input_pipeline as e24
from perflab.experiments.e24_input_pipeline import dataset as pipeline
from perflab.instruments import stats, timing
from perflab.pipeline.runner import run

DRAINED = SYNCED + "; " + timing.DRAINED_THROUGHPUT
STATS = ("median", "iqr", "p25", "p75", "mean", "min", "max")
CPU_PIN_REASON = ("CPU device: there is no host-to-device copy, so pinned memory and "
                  "non_blocking copies have nothing to overlap or speed up")


def trainer(w, fresh):
    """A training step on its own copy of the initial model, with its own optimizer."""
    model = copy.deepcopy(fresh)
    opt = w.make_optimizer(model.parameters())

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = w.loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def interleaved(ctx, w, fresh, ds, configs):
    """Every configuration's fed steps, in blocks whose order across them is balanced.

    ``configs`` is ``[(variant, num_workers, pin_memory)]``. Block ``b`` runs each
    configuration once, in the ``b``-th Williams order, each on a fresh iterator
    (its workers start with it and stop after it), so drift on the machine hits
    every configuration alike. Returns each configuration's run.
    """
    p = ctx.params
    steps = {v: trainer(w, fresh) for v, _, _ in configs}
    loaders = {v: pipeline.loader(ds, w.batch_size, k, pin) for v, k, pin in configs}
    runs = dict.fromkeys(steps)
    orders = timing.williams_orders(len(configs))
    for b in range(p["blocks"]):
        for i in orders[b % len(orders)]:
            v = configs[i][0]
            runs[v] = pipeline.fed_steps(loaders[v], steps[v], ctx.device, ctx.sync,
                                         warmup=p["warmup"], steps=p["steps"],
                                         has_target=ds.y_pool is not None, run=runs[v], block=b)
    return runs


def config_rows(ctx, w, v, workers, pin, r, reference):
    """The rows of one configuration's interleaved run ``r``."""
    p = ctx.params
    window = (f"{p['blocks']} blocks interleaved with the other configurations (balanced "
              f"order), each a fresh iterator: its first batch and {p['warmup']} warmup steps "
              f"untimed, then {p['steps']} timed steps; num_workers={workers}, "
              f"pin_memory={pin}, {p['item_ops']} preparation passes per example")
    for metric, samples in ((e24.INPUT_WAIT, r.wait_ms), (e24.HOST_TO_DEVICE, r.h2d_ms),
                            (e24.COMPUTE, r.compute_ms), (e24.STEP_LATENCY, r.step_ms)):
        s = ctx.summary(samples, variant=v, metric=metric, window=window, sync_boundary=SYNCED,
                        statistics=STATS, block=r.block)
        if metric == e24.STEP_LATENCY:
            median = s["median"]
    common = dict(variant=v, n=len(r.step_ms), window=window, sync_boundary=SYNCED)
    # summed, not a median: a few long waits (workers falling behind) cost their full time
    ctx.row(metric=e24.INPUT_WAIT_SHARE, value=r.wait_share, unit="%",
            **{**common, "window": window + "; summed input wait / summed step time"})
    ctx.row(metric=e24.THROUGHPUT, value=w.batch_size / median * 1e3, unit="examples/s",
            statistic="median", **{**common, "sync_boundary": DRAINED})
    ctx.row(variant=v, metric=e24.FIRST_BATCH_WAIT, value=r.first_wait_ms, unit="ms",
            window="the first batch of the first block's fresh loader (starts its workers)",
            sync_boundary=SYNCED)
    if reference is not None:
        diff = max(abs(a - b) for a, b in zip(r.losses, reference))
        ctx.row(metric=e24.LOSS_MAX_ABS_DIFF_VS_REFERENCE, value=diff, unit="abs",
                **{**common, "n": len(r.losses),
                   "window": "losses of every step (first, warmup, timed; every block) vs "
                             "num_workers=0"})
    ctx.log(f"{v}: step {median:.3f} ms, input wait {r.wait_share:.1f}% of the step, "
            f"first batch {r.first_wait_ms:.1f} ms")


def judge_most_workers(ctx, runs, most):
    """The most workers against none, block by block (the blocks ran next to each other)."""
    a, b = runs[e24.REFERENCE].block_medians(), runs[most].block_medians()
    j = stats.judge(a, b, paired=True, noise_floor_pct=ctx.noise_floor_pct)
    ctx.judgement(j, variant=e24.pair_variant(most),
                  window=f"block medians of the step, {len(a)} interleaved blocks")
    ctx.log(f"{most} vs {e24.REFERENCE}: {j.relative_pct:+.1f}% ({j.verdict}, p={j.p:.3g})")


def copy_pair(ctx, x_host):
    p, t = ctx.params, ctx.timing
    pageable = x_host.contiguous().clone()
    pinned = pageable.pin_memory()

    def copy_of(src):
        def f():
            return src.to(ctx.device, non_blocking=True)

        return f

    res = ctx.interleaved(copy_of(pageable), copy_of(pinned), blocks=p["copy_blocks"],
                          inner=p["copy_inner"], warmup=t["warmup"],
                          variant=f"{e24.COPY_PINNED}_minus_{e24.COPY_PAGEABLE}")
    mib = pageable.numel() * pageable.element_size() / 2**20
    window = (f"x.to(device, non_blocking=True) of one batch ({mib:.1f} MiB); "
              f"{timing.ab_window(res, t['warmup'])}")
    d = ctx.ab(res, a=e24.COPY_PAGEABLE, b=e24.COPY_PINNED, window=window,
               metric=e24.HOST_TO_DEVICE)
    gb = pageable.numel() * pageable.element_size() / 1e9
    for v, ms in ((e24.COPY_PAGEABLE, d["a"]), (e24.COPY_PINNED, d["b"])):
        ctx.row(variant=v, metric=e24.BANDWIDTH, value=gb / (ms / 1e3), unit="GB/s",
                statistic="median", n=len(res.a_samples), window=window,
                sync_boundary="synchronized at both ends of each call; blocks interleaved AB/BA")
    ctx.log(f"copy: pageable {d['a']:.3f} ms, pinned {d['b']:.3f} ms")


def measure(ctx):
    p = ctx.params
    parts = ctx.trainable(variants=(e24.REFERENCE,))
    if parts is None:
        return
    w, _ = parts
    fresh = copy.deepcopy(w.model)
    x_pool, y_pool = w.make_batch(w.batch_size)  # host tensors: the loader's examples
    length = (1 + p["warmup"] + p["steps"]) * w.batch_size  # one block's batches
    ds = pipeline.PreparedDataset(x_pool, y_pool, length, p["item_ops"])
    cores = pipeline.available_cores()
    configs = [(e24.workers_variant(k), k, False) for k in p["workers"] if k <= cores]
    k_pin = min(p["pin_workers"], cores)
    if ctx.is_cuda:
        configs.append((e24.workers_variant(k_pin, True), k_pin, True))
    runs = interleaved(ctx, w, fresh, ds, configs)
    reference = runs[e24.REFERENCE].losses if e24.REFERENCE in runs else None
    for k in p["workers"]:  # rows in the configured order, a skipped count in its place
        if k > cores:
            ctx.unsupported(variant=e24.workers_variant(k), metric=e24.INPUT_WAIT_SHARE, unit="%",
                            reason=f"{k} workers > the {cores} cores this job may use")
            continue
        v = e24.workers_variant(k)
        config_rows(ctx, w, v, k, False, runs[v], None if k == 0 else reference)
    if ctx.is_cuda:
        v = e24.workers_variant(k_pin, True)
        config_rows(ctx, w, v, k_pin, True, runs[v], reference)
    unpinned = [(k, v) for v, k, pin in configs if not pin and k > 0]
    if reference is not None and unpinned:
        judge_most_workers(ctx, runs, max(unpinned)[1])
    if not ctx.is_cuda:
        for v, metric, unit in ((e24.workers_variant(k_pin, True), e24.INPUT_WAIT_SHARE, "%"),
                                (e24.COPY_PAGEABLE, e24.HOST_TO_DEVICE, "ms"),
                                (e24.COPY_PINNED, e24.HOST_TO_DEVICE, "ms")):
            ctx.unsupported(variant=v, metric=metric, unit=unit, reason=CPU_PIN_REASON)
        return
    copy_pair(ctx, x_pool)


if __name__ == "__main__":
    run("E24", measure, globals().get("snakemake"))
