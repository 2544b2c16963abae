"""E15 — mixed precision as an experiment: numerics, time and memory, never merged.

(1) One step from identical state in fp32, autocast fp16 (with GradScaler) and
autocast bf16: loss, gradient norm (unscaled), their differences from fp32 and
the largest parameter difference after the optimizer step. (2) ``finite_steps``
training steps of each: are all losses finite? (3) At each batch size, the
training step of every precision as an interleaved round robin (ms/step,
examples/s, % of fp32). (4) Peak memory of each precision alone at each batch
size (CUDA: allocator peaks; CPU: VmHWM of a fresh process per variant).

A precision this device cannot run (an error on its first step) becomes
``unsupported`` rows with the error as the reason.
"""

import copy
import math

import torch

from perflab import interventions as iv
from perflab.runner import run


def _dtype_label(precision):
    dt = iv.AMP_DTYPES[precision]
    return "float32" if dt is None else f"float32 params, autocast {str(dt).removeprefix('torch.')}"


def _row(ctx, **kw):
    """A numerics row; a non-finite value (fp16 overflow) becomes an error row, not a crash."""
    value = kw.pop("value")
    if math.isfinite(value):
        ctx.row(value=value, **kw)
        return
    kw.pop("n", None)
    ctx.unsupported(status="error", reason=f"not finite ({value}): an fp16 overflow, a step "
                    "the GradScaler would skip", **kw)


def numerics(ctx, w, fresh, batch):
    """One-step numerics and finiteness; returns the precisions that ran."""
    p = ctx.params
    x, y = w.batch_on(ctx.device)
    one = dict(n=1, window=f"one step from identical state, batch {batch}",
               sync_boundary="values read after the step")
    results, ok = {}, []
    for prec in p["precisions"]:
        try:
            results[prec] = iv.amp_one_step(fresh, w, x, y, prec, ctx.device, w.make_optimizer)
            ok.append(prec)
        except (RuntimeError, TypeError, ValueError) as exc:
            reason = (f"autocast {prec} on {ctx.device.type} failed: "
                      f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            ctx.log(reason)
            ctx.unsupported(variant=f"numerics/{prec}", metric="loss", unit="loss",
                            reason=reason, dtype=_dtype_label(prec))
            for b in p["batches"]:
                for metric, unit in (("step_latency", "ms"), ("peak_memory", "MiB")):
                    ctx.unsupported(variant=f"b{b}/{prec}", metric=metric, unit=unit,
                                    reason=reason, dtype=_dtype_label(prec))
    base = results.get("fp32")
    for prec in ok:
        r, kw = results[prec], dict(variant=f"numerics/{prec}", dtype=_dtype_label(prec), **one)
        _row(ctx, metric="loss", value=r["loss"], unit="loss", **kw)
        _row(ctx, metric="grad_norm", value=r["grad_norm"], unit="L2", **kw)
        if base is not None and prec != "fp32":
            _row(ctx, metric="loss_abs_diff", value=abs(r["loss"] - base["loss"]), unit="abs", **kw)
            _row(ctx, metric="grad_norm_rel_diff",
                 value=abs(r["grad_norm"] - base["grad_norm"]) / base["grad_norm"],
                 unit="relative", **kw)
            _row(ctx, metric="param_max_abs_diff",
                 value=iv.max_abs_diff(r["params"], base["params"]), unit="abs", **kw)
        if prec == "fp32":
            _row(ctx, metric="parameter_scale", value=iv.mean_abs(r["params"]), unit="mean |p|",
                 **kw)
        ctx.log(f"{prec}: loss {r['loss']:.5f} grad-norm {r['grad_norm']:.5f}")

    steps_n = p["finite_steps"]
    for prec in ok:
        model = copy.deepcopy(fresh).to(ctx.device)
        step = iv.amp_step(model, w, w.make_optimizer(model.parameters()), x, y, prec, ctx.device)
        losses = torch.stack([step().detach().float() for _ in range(steps_n)]).cpu()
        kw = dict(variant=f"finite/{prec}", dtype=_dtype_label(prec), n=steps_n,
                  window=f"{steps_n} training steps from the initial state, batch {batch}",
                  sync_boundary="losses read once after the last step")
        ctx.row(metric="finite_losses", value=int(torch.isfinite(losses).sum()),
                unit=f"of {steps_n} steps", **kw)
        last = float(losses[-1])
        if math.isfinite(last):
            ctx.row(metric="final_loss", value=last, unit="loss", **kw)
        else:
            ctx.unsupported(variant=f"finite/{prec}", metric="final_loss", unit="loss",
                            status="error", reason=f"the last loss is {last}", dtype=_dtype_label(prec))
        del model, step
    return ok


def timed(ctx, w, fresh, batch, precisions):
    x, y = w.batch_on(ctx.device, batch)
    variant_steps, row_kw = {}, {}
    for prec in precisions:
        model = copy.deepcopy(fresh).to(ctx.device)
        v = f"b{batch}/{prec}"
        variant_steps[v] = iv.amp_step(model, w, w.make_optimizer(model.parameters()), x, y, prec,
                                       ctx.device)
        row_kw[v] = dict(dtype=_dtype_label(prec), input_shape=w.input_shape(batch))
    iv.timed_variants(ctx, variant_steps, examples=batch, what=f"batch {batch}", row_kw=row_kw,
                      baseline=f"b{batch}/fp32", pct_metric="time_pct_of_fp32")


def peaks(ctx, w, batch, precisions):
    calls = ctx.params["peak_calls"]
    shape = w.input_shape(batch)
    window = (f"{calls} training steps of this precision alone (the optimizer state exists "
              f"from step 1), batch {batch}")
    got = {}
    for prec in precisions:
        r = iv.variant_peak(ctx.contract, "amp", {"precision": prec, "batch": batch}, calls)
        got[prec] = r
        iv.peak_rows(ctx, f"b{batch}/{prec}", r, window, dtype=_dtype_label(prec), input_shape=shape)
    metric = "peak_allocated" if ctx.is_cuda else "peak_rss"
    base = got.get("fp32", {}).get(metric)
    for prec in precisions:
        v = got[prec].get(metric)
        if base and v is not None:
            ctx.row(variant=f"b{batch}/{prec}", metric="memory_pct_of_fp32", value=100 * v / base,
                    unit="%", n=1, window=window, sync_boundary=f"ratio of {metric}",
                    dtype=_dtype_label(prec), input_shape=shape)


def measure(ctx):
    p = ctx.params
    first = p["batches"][0]
    trained = ctx.trainable(batch=first, variants=tuple(p["precisions"]))
    if trained is None:
        return
    w = trained[0]
    del trained  # its optimizer holds the device parameters: free them before any peak
    fresh = copy.deepcopy(w.model).cpu()
    ok = numerics(ctx, w, fresh, first)
    w.model = fresh  # the device copy is no longer needed: each variant has its own
    for batch in p["batches"]:
        timed(ctx, w, fresh, batch, ok)
    for batch in p["batches"]:
        peaks(ctx, w, batch, ok)


if __name__ == "__main__":
    run("E15", measure, globals().get("snakemake"))
