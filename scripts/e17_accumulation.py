"""E17 — gradient accumulation: what it does and does not move.

(1) Gradient equivalence: from identical state, the gradient accumulated over
K micro-batches (each loss scaled by 1/K) against the gradient of the full
batch in one pass: the largest absolute difference beside the gradient scale
(mean |g|) and the largest element (max |g|), for every K > 1. (2) The
optimizer step over the full batch for every K as an interleaved round robin
(ms/step, % of K=1). (3) The peak memory of each K alone (CUDA: allocator
peaks; CPU: VmHWM of a fresh process per K), and % of K=1.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import copy

from perflab.core.names import STEP_LATENCY
from perflab.experiments import e17_accumulation as e17
from perflab.instruments import interventions as iv
from perflab.pipeline.runner import run


def equivalence(ctx, w, fresh, batch, ks):
    x, y = w.batch_on(ctx.device, batch)
    full_model = copy.deepcopy(fresh).to(ctx.device)
    iv.accumulate_grads(full_model, w, x, y, 1)
    full = iv.grads_of(full_model)
    del full_model
    scale = iv.mean_abs(full)
    largest = max(float(g.abs().max()) for g in full)
    for k in ks:
        if k == 1:
            continue
        model = copy.deepcopy(fresh).to(ctx.device)
        iv.accumulate_grads(model, w, x, y, k)
        diff = iv.max_abs_diff(iv.grads_of(model), full)
        kw = dict(variant=e17.k_variant(k), n=1, input_shape=w.input_shape(batch // k),
                  window=f"one accumulated gradient of {k} micro-batches of {batch // k} vs one "
                         f"pass over the full batch of {batch}, identical state",
                  sync_boundary="gradients compared after both backward passes")
        ctx.row(metric=e17.GRAD_MAX_ABS_DIFF, value=diff, unit="abs", **kw)
        ctx.row(metric=e17.GRAD_SCALE, value=scale, unit="mean |g|", **kw)
        ctx.row(metric=e17.GRAD_MAX, value=largest, unit="max |g|", **kw)
        ctx.log(f"K={k}: max |diff| {diff:.2e} (gradient mean |g| {scale:.2e}, max |g| "
                f"{largest:.2e})")
        del model


def timed(ctx, w, fresh, batch, ks):
    x, y = w.batch_on(ctx.device, batch)
    variant_steps = {}
    for k in ks:
        model = copy.deepcopy(fresh).to(ctx.device)
        variant_steps[e17.k_variant(k)] = iv.accumulation_step(
            model, w, w.make_optimizer(model.parameters()), x, y, k)
    shapes = {e17.k_variant(k): {"input_shape": w.input_shape(batch // k)} for k in ks}
    iv.timed_variants(ctx, variant_steps, examples=batch,
                      what=f"one optimizer step over {batch} examples", row_kw=shapes,
                      baseline=e17.BASELINE, pct_metric=e17.TIME_PCT_OF_K1)
    for k in ks:
        ctx.row(variant=e17.k_variant(k), metric=e17.MICRO_BATCH, value=batch // k,
                unit="examples", n=1, window=f"{k} micro-batches of the batch of {batch}",
                sync_boundary="n/a", **shapes[e17.k_variant(k)])


def peaks(ctx, w, batch, ks):
    calls = ctx.params["peak_calls"]
    window = f"{calls} optimizer steps of this K alone over {batch} examples"
    metric = "peak_allocated" if ctx.is_cuda else "peak_rss"
    got = {}
    for k in ks:
        got[k] = iv.variant_peak(ctx.contract, "accumulation", {"k": k, "batch": batch}, calls)
        iv.peak_rows(ctx, e17.k_variant(k), got[k], window, input_shape=w.input_shape(batch // k))
    base = got.get(1, {}).get(metric)
    for k in ks:
        v = got[k].get(metric)
        if base and v is not None:
            ctx.row(variant=e17.k_variant(k), metric=e17.MEMORY_PCT_OF_K1, value=100 * v / base,
                    unit="%", n=1, window=window, sync_boundary=f"ratio of {metric}",
                    input_shape=w.input_shape(batch // k))


def measure(ctx):
    p = ctx.params
    batch = p["batch"]
    ks = []
    for k in p["ks"]:
        if batch % k:
            ctx.unsupported(variant=e17.k_variant(k), metric=STEP_LATENCY, unit="ms", status="error",
                            reason=f"K={k} does not divide the batch of {batch}")
        else:
            ks.append(k)
    trained = ctx.trainable(batch=batch, variants=tuple(e17.k_variant(k) for k in ks))
    if trained is None or not ks:
        return
    w = trained[0]
    del trained  # its optimizer holds the device parameters: free them before any peak
    fresh = copy.deepcopy(w.model).cpu()
    w.model = fresh  # each variant gets its own device copy
    equivalence(ctx, w, fresh, batch, ks)
    timed(ctx, w, fresh, batch, ks)
    peaks(ctx, w, batch, ks)


if __name__ == "__main__":
    run("E17", measure, globals().get("snakemake"))
