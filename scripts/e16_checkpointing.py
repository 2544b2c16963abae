"""E16 — activation checkpointing, earned with a measurement at two batch sizes.

Normal vs checkpointed (each (Linear, GELU) block under
``torch.utils.checkpoint(..., use_reentrant=False)``) at each batch size:
(1) correctness — one forward + backward from identical state: loss and
gradient norm of both, their differences and the largest gradient difference;
(2) the training step of both as an interleaved pair (ms/step, examples/s,
% of normal); (3) the peak memory of each alone (CUDA: allocator peaks; CPU:
VmHWM of a fresh process per variant) and the saving.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import copy

from perflab.core.names import STEP_LATENCY
from perflab.experiments import e16_checkpointing as e16
from perflab.instruments import interventions as iv
from perflab.instruments import steps
from perflab.pipeline.runner import run


def _model(fresh, device, variant):
    model = copy.deepcopy(fresh).to(device)
    return iv.Checkpointed(model) if variant == e16.CHECKPOINTED else model


def correctness(ctx, w, fresh, batch):
    x, y = w.batch_on(ctx.device, batch)
    got = {}
    for v in e16.VARIANTS:
        model = _model(fresh, ctx.device, v)
        loss = w.loss_fn(model(x), y)
        loss.backward()
        got[v] = {"loss": float(loss.detach()), "grad_norm": iv.grad_norm(model),
                  "grads": iv.grads_of(model)}
    kw = dict(n=1, window=f"one forward + backward from identical state, batch {batch}",
              sync_boundary="values read after backward", input_shape=w.input_shape(batch))
    for v in e16.VARIANTS:
        ctx.row(variant=e16.batch_variant(batch, v), metric=e16.LOSS, value=got[v]["loss"],
                unit="loss", **kw)
        ctx.row(variant=e16.batch_variant(batch, v), metric=e16.GRAD_NORM,
                value=got[v]["grad_norm"], unit="L2", **kw)
    a, b = got[e16.NORMAL], got[e16.CHECKPOINTED]
    d = e16.comparison_variant(batch)
    ctx.row(variant=d, metric=e16.LOSS_ABS_DIFF, value=abs(a["loss"] - b["loss"]), unit="abs",
            **kw)
    ctx.row(variant=d, metric=e16.GRAD_NORM_ABS_DIFF,
            value=abs(a["grad_norm"] - b["grad_norm"]), unit="abs", **kw)
    ctx.row(variant=d, metric=e16.GRAD_MAX_ABS_DIFF,
            value=iv.max_abs_diff(a["grads"], b["grads"]), unit="abs", **kw)
    ctx.row(variant=d, metric=e16.GRAD_SCALE, value=iv.mean_abs(a["grads"]),
            unit="mean |g|", **kw)
    ctx.log(f"batch {batch}: loss {a['loss']:.6f} vs {b['loss']:.6f}, grad-norm "
            f"{a['grad_norm']:.6f} vs {b['grad_norm']:.6f}")


def timed(ctx, w, fresh, batch):
    x, y = w.batch_on(ctx.device, batch)
    variant_steps = {}
    for v in e16.VARIANTS:
        model = _model(fresh, ctx.device, v)
        variant_steps[e16.batch_variant(batch, v)] = steps.train_step(
            model, w, w.make_optimizer(model.parameters()), x, y)
    shape = {"input_shape": w.input_shape(batch)}
    iv.timed_variants(ctx, variant_steps, examples=batch, what=f"batch {batch}",
                      row_kw={v: shape for v in variant_steps},
                      baseline=e16.batch_variant(batch, e16.NORMAL),
                      pct_metric=e16.TIME_PCT_OF_NORMAL)


def peaks(ctx, w, batch):
    calls = ctx.params["peak_calls"]
    window = f"{calls} training steps of this variant alone, batch {batch}"
    shape = w.input_shape(batch)
    got = {}
    for v in e16.VARIANTS:
        got[v] = iv.variant_peak(ctx.contract, "checkpoint",
                                 {"checkpointed": v == e16.CHECKPOINTED, "batch": batch}, calls)
        iv.peak_rows(ctx, e16.batch_variant(batch, v), got[v], window, input_shape=shape)
    metric = "peak_allocated" if ctx.is_cuda else "peak_rss"
    a, b = got[e16.NORMAL].get(metric), got[e16.CHECKPOINTED].get(metric)
    if a is not None and b is not None:
        kw = dict(n=1, window=window, sync_boundary=f"difference of {metric}", input_shape=shape)
        v = e16.batch_variant(batch, e16.CHECKPOINTED)
        ctx.row(variant=v, metric=e16.MEMORY_SAVED, value=a - b, unit="MiB", **kw)
        ctx.row(variant=v, metric=e16.MEMORY_PCT_OF_NORMAL, value=100 * b / a, unit="%", **kw)
        ctx.log(f"batch {batch}: {metric} normal {a:.1f} MiB, checkpointed {b:.1f} MiB")


def measure(ctx):
    p = ctx.params
    trained = ctx.trainable(batch=p["batches"][0], variants=e16.VARIANTS)
    if trained is None:
        return
    w = trained[0]
    del trained  # its optimizer holds the device parameters: free them before any peak
    fresh = copy.deepcopy(w.model).cpu()
    w.model = fresh  # each variant gets its own device copy
    try:
        iv.Checkpointed(fresh)
    except iv.NotApplicable as exc:
        for v in e16.VARIANTS:
            ctx.unsupported(variant=v, metric=STEP_LATENCY, unit="ms", reason=str(exc))
        return
    for batch in p["batches"]:
        correctness(ctx, w, fresh, batch)
        timed(ctx, w, fresh, batch)
    for batch in p["batches"]:
        peaks(ctx, w, batch)


if __name__ == "__main__":
    run("E16", measure, globals().get("snakemake"))
