"""E18 — attention against sequence length: what the kernel physically allocates.

For each T: the manual implementation (scores and weights materialized,
[B, H, T, T] each) and ``F.scaled_dot_product_attention`` — (1) agreement of
the output and of the q/k/v gradient after one forward + backward; (2) which
SDPA backend actually ran (the aten operator in a profile of one call) and
which backends could run (SDPA restricted to each with ``sdpa_kernel``);
(3) forward + backward ms (synchronized, warmed); (4) the peak memory of each
implementation alone. On CUDA everything runs under a capped allocator budget
(``budget_gib``, the chapter's card less what its display held), so the
manual path's out-of-memory at long T reproduces on a large GPU; an OOM
becomes ``oom`` rows with the reason, never a crash.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import contextlib
import gc

import torch

from perflab.core.names import SYNCED_CALL
from perflab.experiments import e18_attention_seq as e18
from perflab.instruments import interventions as iv
from perflab.instruments import memory, timing
from perflab.pipeline.runner import run


def guarded(ctx, fn, where):
    """(fn(), None), or (None, the reason) if it ran out of memory."""
    reason = None
    try:
        return fn(), None
    except (RuntimeError, MemoryError) as exc:
        if not memory.is_oom(exc):
            raise
        peak = (f"; peak allocated before the failure "
                f"{memory.cuda_counters(ctx.device).max_allocated_mib:.1f} MiB"
                if ctx.is_cuda else "")
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        reason = f"{type(exc).__name__} during {where}{peak}: {first}"
    gc.collect()
    if ctx.is_cuda:
        torch.cuda.empty_cache()
    ctx.log(f"OOM: {reason}")
    return None, reason


def budget(ctx):
    p = ctx.params
    if not ctx.is_cuda:
        ctx.unsupported(variant=e18.BUDGET_VARIANT, metric=e18.MEMORY_BUDGET, unit="MiB",
                        reason="CPU: no allocator cap (set_per_process_memory_fraction is CUDA "
                               "only); the manual path runs until the host runs out")
        return contextlib.nullcontext()
    cap = memory.capped_cuda_budget(p["budget_gib"], ctx.device)
    kw = dict(variant=e18.BUDGET_VARIANT, n=1, window="every measurement of this job",
              sync_boundary="torch.cuda.set_per_process_memory_fraction", model="allocator cap")
    ctx.row(metric=e18.MEMORY_BUDGET, value=p["budget_gib"] * 1024, unit="MiB", **kw)
    total = torch.cuda.get_device_properties(ctx.device).total_memory
    ctx.row(metric=e18.MEMORY_FRACTION, value=min(1.0, p["budget_gib"] * 1024**3 / total),
            unit="fraction of device", **kw)
    return cap


def correctness(ctx, ws, qkv, T):
    got, reasons = {}, {}
    for impl in e18.IMPLS:
        got[impl], reasons[impl] = guarded(ctx, lambda: iv.attention_outputs(ws[impl], qkv),
                                           f"{impl} forward + backward at T={T}")
    kw = dict(variant=e18.comparison_variant(T), n=1, model=f"attention sdpa vs manual T{T}",
              window="one forward + backward on identical q/k/v",
              sync_boundary="tensors compared after both backward passes")
    if any(reasons.values()):
        reason = "; ".join(r for r in reasons.values() if r)
        for metric in (e18.OUT_MAX_ABS_DIFF, e18.GRAD_MAX_ABS_DIFF):
            ctx.unsupported(metric=metric, unit="abs", status="oom", reason=reason,
                            **{k: v for k, v in kw.items() if k not in ("n",)})
        return
    (om, gm), (os_, gs) = got[e18.MANUAL], got[e18.SDPA]
    ctx.row(metric=e18.OUT_MAX_ABS_DIFF, value=float((om - os_).abs().max()), unit="abs", **kw)
    ctx.row(metric=e18.GRAD_MAX_ABS_DIFF, value=float((gm - gs).abs().max()), unit="abs", **kw)
    ctx.row(metric=e18.OUTPUT_SCALE, value=float(om.abs().mean()), unit="mean |out|", **kw)


def backends(ctx, w, qkv, T):
    step = iv.attention_step(w, qkv.detach().clone().requires_grad_(True))
    kw = dict(n=1, model=w.description, sync_boundary="profiler operator names of one call")
    ran, reason = guarded(ctx, lambda: iv.sdpa_backend_ran(step), f"the SDPA probe at T={T}")
    eligible, r2 = guarded(ctx, lambda: iv.sdpa_backend_eligible(step),
                           f"the SDPA eligibility probe at T={T}")
    for name in iv.SDPA_BACKENDS:
        v = e18.backend_variant(T, name)
        if ran is None:
            ctx.unsupported(variant=v, metric=e18.BACKEND_RAN, unit="bool", status="oom",
                            reason=reason, **kw)
        else:
            ctx.row(variant=v, metric=e18.BACKEND_RAN, value=float(name in ran), unit="bool",
                    window="one unrestricted forward + backward, profiled", **kw)
        if eligible is None:
            ctx.unsupported(variant=v, metric=e18.BACKEND_ELIGIBLE, unit="bool", status="oom",
                            reason=r2, **kw)
        else:
            why = eligible[name]
            ctx.row(variant=v, metric=e18.BACKEND_ELIGIBLE, value=float(not why), unit="bool",
                    window="forward + backward with SDPA restricted to this backend (sdpa_kernel)",
                    reason=why, **kw)
    if ran is not None:
        ctx.log(f"T={T}: SDPA ran {sorted(ran) or 'no recognised backend'}; eligible "
                f"{[n for n, why in (eligible or {}).items() if not why]}")


def timed(ctx, w, qkv, impl, T):
    p = ctx.params
    step = iv.attention_step(w, qkv.detach().clone().requires_grad_(True))
    window = f"forward + backward, {p['repeats']} repeats after warmup {p['warmup']}"
    samples, reason = guarded(ctx, lambda: timing.time_calls(step, warmup=p["warmup"],
                                                             repeats=p["repeats"], sync=ctx.sync),
                              f"{impl} timing at T={T}")
    v = e18.seq_variant(T, impl)
    if samples is None:
        ctx.unsupported(variant=v, metric=e18.FWD_BWD_LATENCY, unit="ms", status="oom",
                        reason=reason, model=w.description)
        return None
    s = ctx.summary(samples, variant=v, metric=e18.FWD_BWD_LATENCY, window=window,
                    sync_boundary=SYNCED_CALL, model=w.description,
                    statistics=("median", "iqr", "p25", "p75", "mean", "min", "max"))
    return s["median"]


def measure(ctx):
    p = ctx.params
    with budget(ctx):
        for T in p["seqs"]:
            ws = {impl: ctx.workload("attention", impl=impl, seq=T) for impl in e18.IMPLS}
            qkv, _ = ws[e18.MANUAL].batch_on(ctx.device)
            correctness(ctx, ws, qkv, T)
            backends(ctx, ws[e18.SDPA], qkv, T)
            med = {impl: timed(ctx, ws[impl], qkv, impl, T) for impl in e18.IMPLS}
            ctx.log(f"T={T}: " + ", ".join(f"{k} {'OOM' if v is None else f'{v:.3f} ms'}"
                                           for k, v in med.items()))
            del ws, qkv
            window = f"{p['peak_calls']} forward + backward calls of this implementation alone"
            for impl in e18.IMPLS:
                r = iv.variant_peak(ctx.contract, "attention", {"impl": impl, "seq": T},
                                    p["peak_calls"])
                model = f"attention {impl} T{T}"
                iv.peak_rows(ctx, e18.seq_variant(T, impl), r, window, model=model)


if __name__ == "__main__":
    run("E18", measure, globals().get("snakemake"))
