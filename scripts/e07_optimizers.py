"""E07 — intervene on the optimizer: .step() in isolation, and fused vs foreach AdamW.

Gradients are computed once (the training step's own — the workload's
train_step where it gives one — copied as its optimizer step begins); then
each optimizer's ``.step()`` alone is timed (warmed, synchronized) with those
same gradients present: SGD, SGD with
momentum, AdamW foreach (the default), AdamW fused. The correctness column
compares one fused step with one foreach step from identical state and
gradients (max abs difference against the parameter and update scales).
Finally the whole training step (the workload's own where it gives one) with
foreach and with fused AdamW runs as an interleaved pair, so the end-to-end
change is measured back to back.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import copy

from perflab.experiments.e07_optimizers import (
    EID,
    FOREACH,
    FUSED,
    FUSED_VS_FOREACH,
    MAX_ABS_DIFF,
    OPTIMIZER_STEP,
    PARAMETER_SCALE,
    STEP_FOREACH,
    STEP_FUSED,
    UPDATE_SCALE,
)
from perflab.instruments import optim, steps, timing
from perflab.pipeline.runner import run


def measure(ctx):
    p, t = ctx.params, ctx.timing
    step = ctx.step(variants=tuple(p["optimizers"]), metric=OPTIMIZER_STEP)
    if step is None:
        return
    w = step.workload
    lr = w.params.get("lr", 1e-3)
    fresh = copy.deepcopy(w.model)  # the initial state, for the correctness check and the pair

    # gradients once (the step's own, up to its optimizer step); every optimizer below
    # steps with these same gradients present
    grads = optim.step_gradients(step)
    optim.set_gradients(w.model, grads)
    ctx.sync()
    window = (f"isolated .step() after warmup {t['warmup']}; same gradients present, "
              "parameters move with each call")
    for name in p["optimizers"]:
        try:
            opt = optim.factory(name, lr)(optim.trainable(w.model))
            samples = timing.time_calls(opt.step, warmup=t["warmup"], repeats=t["repeats"],
                                        sync=ctx.sync)
        except (RuntimeError, TypeError, ValueError) as exc:  # e.g. fused not built here
            ctx.unsupported(variant=name, metric=OPTIMIZER_STEP, unit="ms",
                            reason=f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            ctx.log(f"{name}: unsupported ({exc})")
            continue
        s = ctx.summary(samples, variant=name, metric=OPTIMIZER_STEP, window=window,
                        sync_boundary="synchronized at both ends of each .step()")
        ctx.log(f"{name}: median {s['median']:.3f} ms IQR {s['iqr']:.3f}")
        del opt

    try:
        agree = optim.one_step_agreement(fresh, grads, optim.factory(FOREACH, lr),
                                         optim.factory(FUSED, lr))
    except (RuntimeError, TypeError, ValueError) as exc:
        ctx.unsupported(variant=FUSED_VS_FOREACH, metric=MAX_ABS_DIFF, unit="abs",
                        reason=f"fused AdamW unavailable: {exc}")
        return
    one = dict(variant=FUSED_VS_FOREACH, n=1, window="one step from identical state and gradients",
               sync_boundary="values compared after both steps")
    ctx.row(metric=MAX_ABS_DIFF, value=agree["max_abs_diff"], unit="abs", **one)
    ctx.row(metric=PARAMETER_SCALE, value=agree["parameter_scale"], unit="mean |p|", **one)
    ctx.row(metric=UPDATE_SCALE, value=agree["update_scale"], unit="mean |dp|", **one)
    ctx.log(f"fused vs foreach: max |diff| {agree['max_abs_diff']:.2e} "
            f"(parameter scale {agree['parameter_scale']:.2e}, update {agree['update_scale']:.2e})")

    model_a, model_b = copy.deepcopy(fresh), copy.deepcopy(fresh)
    step_a, step_b = (steps.build(w, ctx.device, model=m, batches=step.batches,
                                  optimizer=optim.factory(name, lr)(optim.trainable(m)))
                      for m, name in ((model_a, FOREACH), (model_b, FUSED)))
    res = ctx.interleaved(step_a, step_b, blocks=p["pair_blocks"], inner=p["pair_inner"],
                          warmup=t["warmup"], variant=f"{STEP_FUSED}_minus_{STEP_FOREACH}")
    d = ctx.ab(res, a=STEP_FOREACH, b=STEP_FUSED, batch_size=w.batch_size,
               window=f"full training step, {timing.ab_window(res, t['warmup'])}")
    ctx.log(f"full step foreach {d['a']:.3f} ms vs fused {d['b']:.3f} ms "
            f"({100 * d['diff'] / d['a']:+.1f}%, Wilcoxon p {d['p']:.3g})")


if __name__ == "__main__":
    run(EID, measure, globals().get("snakemake"))
