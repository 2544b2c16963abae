"""E24 — is the step waiting for its input? A DataLoader-fed training step.

The controlled training step, fed by a DataLoader whose dataset spends a
configured CPU cost preparing each example (perflab.pipeline). For each
worker count (0, 1, 2, ... up to the cores this job may use): per step, the
wait for the next batch, the host-to-device copy (``non_blocking=True``) and
the compute, with the device synchronized at each boundary; the input-wait
share of the step; examples/s; the first batch's wait (worker start-up). The
correctness column: every configuration trains the same initial state on the
same batches in the same order, so its losses must equal those of
``num_workers=0``.

Then pageable vs pinned host memory (CUDA only): the same loop with
``pin_memory=True``, and the bare copy ``x.to(device, non_blocking=True)`` from
a pageable and from a pinned tensor as an interleaved pair (ms, GB/s). On the
CPU there is no host-to-device copy to pin for: those rows say so.
"""

import copy

from perflab import pipeline, timing
from perflab.runner import run

SYNCED = "device synchronized at each phase boundary"
STATS = ("median", "iqr", "p25", "p75", "mean", "min", "max")
CPU_PIN_REASON = ("CPU device: there is no host-to-device copy, so pinned memory and "
                  "non_blocking copies have nothing to overlap or speed up")


def one_config(ctx, w, fresh, ds, workers, pin, reference):
    p = ctx.params
    v = f"workers_{workers}" + ("/pinned" if pin else "")
    model = copy.deepcopy(fresh)
    opt = w.make_optimizer(model.parameters())

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = w.loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    dl = pipeline.loader(ds, w.batch_size, workers, pin)
    r = pipeline.fed_steps(dl, step, ctx.device, ctx.sync, warmup=p["warmup"], steps=p["steps"],
                           has_target=ds.y_pool is not None)
    del dl
    window = (f"{p['steps']} DataLoader-fed steps after the first batch and {p['warmup']} "
              f"warmup steps; num_workers={workers}, pin_memory={pin}, "
              f"{p['item_ops']} preparation passes per example")
    for metric, samples in (("input_wait", r.wait_ms), ("host_to_device", r.h2d_ms),
                            ("compute", r.compute_ms), ("step_latency", r.step_ms)):
        s = ctx.summary(samples, variant=v, metric=metric, window=window, sync_boundary=SYNCED,
                        statistics=STATS)
        if metric == "step_latency":
            median = s["median"]
    common = dict(variant=v, n=p["steps"], window=window, sync_boundary=SYNCED)
    # summed, not a median: a few long waits (workers falling behind) cost their full time
    ctx.row(metric="input_wait_share", value=r.wait_share, unit="%",
            **{**common, "window": window + "; summed input wait / summed step time"})
    ctx.row(metric="throughput", value=w.batch_size / median * 1e3, unit="examples/s",
            statistic="median", **common)
    ctx.row(variant=v, metric="first_batch_wait", value=r.first_wait_ms, unit="ms",
            window="the first batch of a fresh loader (starts its workers)",
            sync_boundary=SYNCED)
    if reference is not None:
        diff = max(abs(a - b) for a, b in zip(r.losses, reference))
        ctx.row(metric="loss_max_abs_diff_vs_workers_0", value=diff, unit="abs",
                **{**common, "n": len(r.losses),
                   "window": "losses of every step (first, warmup, timed) vs num_workers=0"})
    ctx.log(f"{v}: step {median:.3f} ms, input wait {r.wait_share:.1f}% of the step, "
            f"first batch {r.first_wait_ms:.1f} ms")
    return r.losses


def copy_pair(ctx, x_host):
    p, t = ctx.params, ctx.timing
    pageable = x_host.contiguous().clone()
    pinned = pageable.pin_memory()

    def copy_of(src):
        def f():
            return src.to(ctx.device, non_blocking=True)

        return f

    res = timing.interleaved_ab(copy_of(pageable), copy_of(pinned), blocks=p["copy_blocks"],
                                inner=p["copy_inner"], warmup=t["warmup"], sync=ctx.sync)
    mib = pageable.numel() * pageable.element_size() / 2**20
    window = (f"x.to(device, non_blocking=True) of one batch ({mib:.1f} MiB); "
              f"{p['copy_blocks']} interleaved blocks of {p['copy_inner']}")
    d = ctx.ab(res, a="copy/pageable", b="copy/pinned", window=window, metric="host_to_device")
    gb = pageable.numel() * pageable.element_size() / 1e9
    for v, ms in (("copy/pageable", d["a"]), ("copy/pinned", d["b"])):
        ctx.row(variant=v, metric="bandwidth", value=gb / (ms / 1e3), unit="GB/s",
                statistic="median", n=p["copy_blocks"] * p["copy_inner"], window=window,
                sync_boundary="synchronized at both ends of each call; blocks interleaved AB/BA")
    ctx.log(f"copy: pageable {d['a']:.3f} ms, pinned {d['b']:.3f} ms")


def measure(ctx):
    p = ctx.params
    parts = ctx.trainable(variants=("workers_0",))
    if parts is None:
        return
    w, _ = parts
    fresh = copy.deepcopy(w.model)
    x_pool, y_pool = w.make_batch(w.batch_size)  # host tensors: the loader's examples
    length = (1 + p["warmup"] + p["steps"]) * w.batch_size
    ds = pipeline.PreparedDataset(x_pool, y_pool, length, p["item_ops"])
    cores = pipeline.available_cores()
    reference = None
    for k in p["workers"]:
        if k > cores:
            ctx.unsupported(variant=f"workers_{k}", metric="input_wait_share", unit="%",
                            reason=f"{k} workers > the {cores} cores this job may use")
            continue
        losses = one_config(ctx, w, fresh, ds, k, False, reference)
        if k == 0:
            reference = losses
    k_pin = min(p["pin_workers"], cores)
    if not ctx.is_cuda:
        for v, metric in ((f"workers_{k_pin}/pinned", "input_wait_share"),
                          ("copy/pageable", "host_to_device"), ("copy/pinned", "host_to_device")):
            ctx.unsupported(variant=v, metric=metric, unit="%" if "share" in metric else "ms",
                            reason=CPU_PIN_REASON)
        return
    one_config(ctx, w, fresh, ds, k_pin, True, reference)
    copy_pair(ctx, x_pool)


if __name__ == "__main__":
    run("E24", measure, globals().get("snakemake"))
