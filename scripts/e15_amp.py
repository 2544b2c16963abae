"""E15 — mixed precision as an experiment: numerics, time and memory, never merged.

(1) One step from identical state in fp32, autocast fp16 (with GradScaler) and
autocast bf16: loss, gradient norm (unscaled), their differences from fp32 and
the largest parameter difference after the optimizer step. (2) ``finite_steps``
training steps of each: are all losses finite? (3) At each batch size, the
training step of every precision as an interleaved round robin (ms/step,
examples/s, % of fp32). (4) Peak memory of each precision alone at each batch
size (CUDA: allocator peaks; CPU: VmHWM of a fresh process per variant).

A precision this device cannot run (torch has no kernel for it: "not implemented", "not
supported") becomes ``unsupported`` rows with the error as the reason; any other failure of
its first step (a bug, a wrong shape) becomes ``error`` rows, never "unsupported".
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import copy
import math
import re

import torch

from perflab.core.names import STEP_LATENCY
from perflab.experiments import e15_amp as e15
from perflab.instruments import interventions as iv
from perflab.pipeline.runner import run


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


#: what torch says when a dtype has no kernel on this device: the precision is unsupported
#: here. Any other failure (a wrong shape, a bug, an overflow's exception) is an error
NOT_SUPPORTED = re.compile(r"not (?:implemented|supported)|unsupported|no kernel", re.I)


def failure_status(exc: BaseException) -> str:
    """"unsupported" where the device has no kernel for the precision, else "error"."""
    if isinstance(exc, NotImplementedError):
        return "unsupported"
    first = str(exc).splitlines()[0] if str(exc) else ""
    return "unsupported" if (isinstance(exc, RuntimeError)
                             and NOT_SUPPORTED.search(first)) else "error"


def _failed(ctx, prec, exc):
    """Rows saying why ``prec`` did not run here: its numerics and every batch size's, as
    ``unsupported`` where the device cannot run it, else as an ``error``."""
    status = failure_status(exc)
    reason = (f"autocast {prec} on {ctx.device.type} failed: "
              f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}")
    ctx.log(f"{status}: {reason}")
    ctx.unsupported(variant=e15.numerics_variant(prec), metric=e15.LOSS, unit="loss",
                    reason=reason, status=status, dtype=_dtype_label(prec))
    for b in ctx.params["batches"]:
        for metric, unit in ((STEP_LATENCY, "ms"), ("peak_memory", "MiB")):
            ctx.unsupported(variant=e15.batch_variant(b, prec), metric=metric, unit=unit,
                            reason=reason, status=status, dtype=_dtype_label(prec))


def _one_step_rows(ctx, prec, r, base, batch):
    """The numerics rows of one precision's step, against fp32's (``base``) when it ran."""
    kw = dict(variant=e15.numerics_variant(prec), dtype=_dtype_label(prec), n=1,
              window=f"one step from identical state, batch {batch}",
              sync_boundary="values read after the step")
    _row(ctx, metric=e15.LOSS, value=r["loss"], unit="loss", **kw)
    _row(ctx, metric=e15.GRAD_NORM, value=r["grad_norm"], unit="L2", **kw)
    if base is not None and prec != e15.FP32:
        _row(ctx, metric=e15.LOSS_ABS_DIFF, value=abs(r["loss"] - base["loss"]), unit="abs", **kw)
        _row(ctx, metric=e15.GRAD_NORM_REL_DIFF,
             value=abs(r["grad_norm"] - base["grad_norm"]) / base["grad_norm"],
             unit="relative", **kw)
        _row(ctx, metric=e15.PARAM_MAX_ABS_DIFF,
             value=iv.max_abs_diff(r["params"], base["params"]), unit="abs", **kw)
    if prec == e15.FP32:
        _row(ctx, metric=e15.PARAMETER_SCALE, value=iv.mean_abs(r["params"]), unit="mean |p|",
             **kw)
    ctx.log(f"{prec}: loss {r['loss']:.5f} grad-norm {r['grad_norm']:.5f}")


def _finite_rows(ctx, w, fresh, x, y, prec, batch):
    """``finite_steps`` training steps of one precision: how many losses are finite."""
    steps_n = ctx.params["finite_steps"]
    model = copy.deepcopy(fresh).to(ctx.device)
    step = iv.amp_step(model, w, w.make_optimizer(model.parameters()), x, y, prec, ctx.device)
    losses = torch.stack([step().detach().float() for _ in range(steps_n)]).cpu()
    kw = dict(variant=e15.finite_variant(prec), dtype=_dtype_label(prec), n=steps_n,
              window=f"{steps_n} training steps from the initial state, batch {batch}",
              sync_boundary="losses read once after the last step")
    ctx.row(metric=e15.FINITE_LOSSES, value=int(torch.isfinite(losses).sum()),
            unit=f"of {steps_n} steps", **kw)
    last = float(losses[-1])
    if math.isfinite(last):
        ctx.row(metric=e15.FINAL_LOSS, value=last, unit="loss", **kw)
    else:
        ctx.unsupported(variant=e15.finite_variant(prec), metric=e15.FINAL_LOSS, unit="loss",
                        status="error", reason=f"the last loss is {last}", dtype=_dtype_label(prec))


def numerics(ctx, w, fresh, batch):
    """One-step numerics and finiteness; returns the precisions that ran."""
    x, y = w.batch_on(ctx.device)
    results, ok = {}, []
    for prec in ctx.params["precisions"]:
        try:
            results[prec] = iv.amp_one_step(fresh, w, x, y, prec, ctx.device, w.make_optimizer)
            ok.append(prec)
        except (RuntimeError, TypeError, ValueError, NotImplementedError) as exc:
            _failed(ctx, prec, exc)
    for prec in ok:
        _one_step_rows(ctx, prec, results[prec], results.get(e15.FP32), batch)
    for prec in ok:
        _finite_rows(ctx, w, fresh, x, y, prec, batch)
    return ok


def timed(ctx, w, fresh, batch, precisions):
    x, y = w.batch_on(ctx.device, batch)
    variant_steps, row_kw = {}, {}
    for prec in precisions:
        model = copy.deepcopy(fresh).to(ctx.device)
        v = e15.batch_variant(batch, prec)
        variant_steps[v] = iv.amp_step(model, w, w.make_optimizer(model.parameters()), x, y, prec,
                                       ctx.device)
        row_kw[v] = dict(dtype=_dtype_label(prec), input_shape=w.input_shape(batch))
    iv.timed_variants(ctx, variant_steps, examples=batch, what=f"batch {batch}", row_kw=row_kw,
                      baseline=e15.batch_variant(batch, e15.FP32),
                      pct_metric=e15.TIME_PCT_OF_FP32)


def peaks(ctx, w, batch, precisions):
    calls = ctx.params["peak_calls"]
    shape = w.input_shape(batch)
    window = (f"{calls} training steps of this precision alone (the optimizer state exists "
              f"from step 1), batch {batch}")
    got = {}
    for prec in precisions:
        r = iv.variant_peak(ctx.contract, "amp", {"precision": prec, "batch": batch}, calls)
        got[prec] = r
        iv.peak_rows(ctx, e15.batch_variant(batch, prec), r, window, dtype=_dtype_label(prec),
                     input_shape=shape)
    metric = "peak_allocated" if ctx.is_cuda else "peak_rss"
    base = got.get(e15.FP32, {}).get(metric)
    for prec in precisions:
        v = got[prec].get(metric)
        if base and v is not None:
            ctx.row(variant=e15.batch_variant(batch, prec), metric=e15.MEMORY_PCT_OF_FP32,
                    value=100 * v / base, unit="%", n=1, window=window,
                    sync_boundary=f"ratio of {metric}", dtype=_dtype_label(prec),
                    input_shape=shape)


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
