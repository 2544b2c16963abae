"""E16 — activation checkpointing, earned with a measurement at two batch sizes.

Normal vs checkpointed (each (Linear, GELU) block under
``torch.utils.checkpoint(..., use_reentrant=False)``) at each batch size:
(1) correctness — one forward + backward from identical state: loss and
gradient norm of both, their differences and the largest gradient difference;
(2) the training step of both as an interleaved pair (ms/step, examples/s,
% of normal); (3) the peak memory of each alone (CUDA: allocator peaks; CPU:
VmHWM of a fresh process per variant) and the saving.
"""

import copy

from perflab import interventions as iv
from perflab import steps
from perflab.runner import run

VARIANTS = ("normal", "checkpointed")


def _model(fresh, device, variant):
    model = copy.deepcopy(fresh).to(device)
    return iv.Checkpointed(model) if variant == "checkpointed" else model


def correctness(ctx, w, fresh, batch):
    x, y = w.batch_on(ctx.device, batch)
    got = {}
    for v in VARIANTS:
        model = _model(fresh, ctx.device, v)
        loss = w.loss_fn(model(x), y)
        loss.backward()
        got[v] = {"loss": float(loss.detach()), "grad_norm": iv.grad_norm(model),
                  "grads": [p.grad.detach().clone() for p in model.parameters()]}
    kw = dict(n=1, window=f"one forward + backward from identical state, batch {batch}",
              sync_boundary="values read after backward", input_shape=w.input_shape(batch))
    for v in VARIANTS:
        ctx.row(variant=f"b{batch}/{v}", metric="loss", value=got[v]["loss"], unit="loss", **kw)
        ctx.row(variant=f"b{batch}/{v}", metric="grad_norm", value=got[v]["grad_norm"], unit="L2",
                **kw)
    a, b = got["normal"], got["checkpointed"]
    d = f"b{batch}/checkpointed_vs_normal"
    ctx.row(variant=d, metric="loss_abs_diff", value=abs(a["loss"] - b["loss"]), unit="abs", **kw)
    ctx.row(variant=d, metric="grad_norm_abs_diff", value=abs(a["grad_norm"] - b["grad_norm"]),
            unit="abs", **kw)
    ctx.row(variant=d, metric="grad_max_abs_diff", value=iv.max_abs_diff(a["grads"], b["grads"]),
            unit="abs", **kw)
    ctx.row(variant=d, metric="grad_scale", value=iv.mean_abs(a["grads"]), unit="mean |g|", **kw)
    ctx.log(f"batch {batch}: loss {a['loss']:.6f} vs {b['loss']:.6f}, grad-norm "
            f"{a['grad_norm']:.6f} vs {b['grad_norm']:.6f}")


def timed(ctx, w, fresh, batch):
    x, y = w.batch_on(ctx.device, batch)
    variant_steps = {}
    for v in VARIANTS:
        model = _model(fresh, ctx.device, v)
        variant_steps[f"b{batch}/{v}"] = steps.train_step(model, w,
                                                          w.make_optimizer(model.parameters()), x, y)
    shape = {"input_shape": w.input_shape(batch)}
    iv.timed_variants(ctx, variant_steps, examples=batch, what=f"batch {batch}",
                      row_kw={v: shape for v in variant_steps}, baseline=f"b{batch}/normal",
                      pct_metric="time_pct_of_normal")


def peaks(ctx, w, batch):
    calls = ctx.params["peak_calls"]
    window = f"{calls} training steps of this variant alone, batch {batch}"
    shape = w.input_shape(batch)
    got = {}
    for v in VARIANTS:
        got[v] = iv.variant_peak(ctx.contract, "checkpoint",
                                 {"checkpointed": v == "checkpointed", "batch": batch}, calls)
        iv.peak_rows(ctx, f"b{batch}/{v}", got[v], window, input_shape=shape)
    metric = "peak_allocated" if ctx.is_cuda else "peak_rss"
    a, b = got["normal"].get(metric), got["checkpointed"].get(metric)
    if a is not None and b is not None:
        kw = dict(n=1, window=window, sync_boundary=f"difference of {metric}", input_shape=shape)
        ctx.row(variant=f"b{batch}/checkpointed", metric="memory_saved", value=a - b, unit="MiB",
                **kw)
        ctx.row(variant=f"b{batch}/checkpointed", metric="memory_pct_of_normal", value=100 * b / a,
                unit="%", **kw)
        ctx.log(f"batch {batch}: {metric} normal {a:.1f} MiB, checkpointed {b:.1f} MiB")


def measure(ctx):
    p = ctx.params
    trained = ctx.trainable(batch=p["batches"][0], variants=VARIANTS)
    if trained is None:
        return
    w = trained[0]
    del trained  # its optimizer holds the device parameters: free them before any peak
    fresh = copy.deepcopy(w.model).cpu()
    w.model = fresh  # each variant gets its own device copy
    try:
        iv.Checkpointed(fresh)
    except iv.NotApplicable as exc:
        for v in VARIANTS:
            ctx.unsupported(variant=v, metric="step_latency", unit="ms", reason=str(exc))
        return
    for batch in p["batches"]:
        correctness(ctx, w, fresh, batch)
        timed(ctx, w, fresh, batch)
    for batch in p["batches"]:
        peaks(ctx, w, batch)


if __name__ == "__main__":
    run("E16", measure, globals().get("snakemake"))
