"""E02 — "How fast is the model?" is four questions.

Times one model and one batch four legitimate ways — forward under
inference_mode, forward with grad enabled, forward + backward, the full
training step (the workload's own train_step fed from its loader where it
gives them) — each warmed and synchronized. With ``compile: true`` the
same four run on ``torch.compile(model)``, the first compiled call of each
reported apart from its steady state (the first call is compilation). The
steady states of all of them, eager and compiled, are one interleaved round
robin (balanced order, block by block), so the answers are compared like with
like: measured side by side, not one after another.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import torch

from perflab.core.names import STEP_LATENCY
from perflab.core.names import SYNCED_CALL as SYNCED
from perflab.experiments.e02_four_questions import (
    EID,
    FIRST_CALL,
    FORWARD_BACKWARD,
    FORWARD_GRAD,
    FORWARD_INFERENCE,
    TRAIN_STEP,
)
from perflab.instruments import steps, timing
from perflab.pipeline.runner import run


def four_questions(w, model, opt, x, y, device):
    """(mode, callable or why not) of each question; the step is the workload's own if it has one."""
    why = "the workload gives no make_batch and loss_fn (its own loader and train_step)"
    rebuilt = x is not None and w.gives("loss_fn")
    step = (steps.build(w, device, model=model, optimizer=opt)
            if opt is not None or w.train_step is not None else "workload has no optimizer")
    return {
        FORWARD_INFERENCE: ("inference", steps.forward_inference(model, x) if x is not None
                            else why),
        FORWARD_GRAD: ("train", steps.forward_grad(model, x) if x is not None else why),
        FORWARD_BACKWARD: ("train", steps.forward_backward(model, w, x, y) if rebuilt else why),
        TRAIN_STEP: ("train", step),
    }


def _first_compiled_calls(ctx, w, opt, x, y):
    """Each compiled question's first call (compilation), alone; the steps that compiled."""
    compiled = torch.compile(w.model)
    ok = {}
    for variant, (mode, fn) in four_questions(w, compiled, opt, x, y, ctx.device).items():
        if isinstance(fn, str):
            ctx.unsupported(variant=variant, metric=STEP_LATENCY, unit="ms", mode=mode,
                            execution="compiled", reason=fn)
            continue
        torch._dynamo.reset()  # each variant's first call traces and compiles afresh
        try:
            first = timing.time_first_call(fn, ctx.sync)
        except Exception as exc:  # no C++ compiler, unsupported op, ...
            msg = f"torch.compile failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            ctx.log(msg)
            ctx.unsupported(variant=variant, metric=FIRST_CALL, unit="ms", mode=mode,
                            execution="compiled", status="error", reason=msg)
            continue
        ctx.row(variant=variant, metric=FIRST_CALL, value=first, unit="ms", mode=mode,
                execution="compiled", sync_boundary=SYNCED,
                window="first compiled call after torch._dynamo.reset(); Inductor cache "
                       "private to this job (may hold graphs of earlier variants)")
        ctx.log(f"compiled {variant}: first call {first / 1e3:.2f} s")
        ok[("compiled", variant)] = (mode, fn)
    return ok


def measure(ctx):
    t, p = ctx.timing, ctx.params
    w = ctx.workload()
    x, y = w.batch_on(ctx.device) if w.gives("make_batch") else (None, None)
    opt = w.make_optimizer(w.model.parameters()) if w.make_optimizer else None
    timed = {}
    for variant, (mode, fn) in four_questions(w, w.model, opt, x, y, ctx.device).items():
        if isinstance(fn, str):
            ctx.unsupported(variant=variant, metric=STEP_LATENCY, unit="ms", mode=mode,
                            reason=fn)
            continue
        timed[("eager", variant)] = (mode, fn)
    if p["compile"]:
        timed.update(_first_compiled_calls(ctx, w, opt, x, y))
    # every question, eager and compiled, timed as one interleaved round robin: each block
    # runs every one of them once, in balanced order, so drift on the machine hits all alike
    repeats = t["repeats"] if p.get("repeats") is None else p["repeats"]  # a scale's (the CPU's)
    inner = max(1, repeats // p["blocks"])
    res = timing.interleaved_round_robin({k: fn for k, (_, fn) in timed.items()},
                                         blocks=p["blocks"], inner=inner, warmup=t["warmup"],
                                         sync=ctx.sync)
    window = (f"steady state after warmup {t['warmup']}; {p['blocks']} round-robin blocks of "
              f"{inner} calls of each question (eager and compiled interleaved)")
    for (execution, variant), (mode, _) in timed.items():
        s = ctx.summary(res.samples[(execution, variant)], variant=variant,
                        metric=STEP_LATENCY, mode=mode, execution=execution, window=window,
                        sync_boundary=f"{SYNCED}; {timing.ROUND_ROBIN_ORDER}",
                        block=res.blocks[(execution, variant)])
        ctx.log(f"{execution} {variant}: median {s['median']:.3f} ms")


if __name__ == "__main__":
    run(EID, measure, globals().get("snakemake"))
