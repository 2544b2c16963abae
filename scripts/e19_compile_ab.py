"""E19 — torch.compile as an intervention on two workloads: GEMM-bound vs pointwise.

The same ``torch.compile(model)`` call on the controlled MLP (its time is in
large matmuls that Inductor hands to the vendor library unchanged) and on the
pointwise chain (hundreds of small elementwise kernels that Inductor fuses).
For each: the forward in eval mode under no_grad, eager vs a compiled deep
copy of the same state; the first compiled call reported apart (it is the
compilation); the steady state as an interleaved A/B with block spread and a
verdict; speedup; the correctness column (max |compiled - eager| on the same
input) and the peak memory of each side alone (CUDA allocator counters; on the
CPU an in-process peak cannot separate the two, so those rows say so).
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import copy

import torch

from perflab.core.names import SYNCED_CALL as SYNCED
from perflab.experiments import e19_compile_ab as e19
from perflab.instruments import compiling, timing
from perflab.instruments.sequential import NO_CHANGE
from perflab.pipeline.runner import run


def one_workload(ctx, name):
    p = ctx.params
    w = ctx.workload(name)
    w.model.eval()
    x, _ = w.batch_on(ctx.device)
    eager = compiling.no_grad_forward(w.model, x)
    kw = dict(mode="inference")
    compiled_v = e19.side_variant(name, e19.COMPILED)
    try:
        compiled_model = torch.compile(copy.deepcopy(w.model))
        fn = compiling.no_grad_forward(compiled_model, x)
        first = timing.time_first_call(fn, ctx.sync)
    except Exception as exc:  # no C++ compiler, unsupported op, ...
        msg = f"torch.compile failed: {compiling.failure(exc)}"
        ctx.log(f"{name}: {msg}")
        ctx.unsupported(variant=compiled_v, metric=e19.FIRST_CALL, unit="ms",
                        execution="compiled", status="error", reason=msg, **kw)
        return
    ctx.row(variant=compiled_v, metric=e19.FIRST_CALL, value=first, unit="ms",
            execution="compiled", sync_boundary=SYNCED,
            window="first call of the compiled copy: tracing + compilation + one forward "
                   "(Inductor cache private to this job)", **kw)
    d = e19.compare_with_eager(ctx, name, eager, fn, w.batch_size,
                               stop_at=e19.STOP_AT.get(name, NO_CHANGE), **kw)
    ctx.log(f"{name}: first compiled call {first / 1e3:.2f} s; eager {d['a']:.3f} ms, "
            f"compiled {d['b']:.3f} ms ({d['a'] / d['b']:.2f}x, Wilcoxon p {d['p']:.3g})")

    for side, f in ((e19.EAGER, eager), (e19.COMPILED, fn)):
        v = e19.side_variant(name, side)
        if not ctx.is_cuda:
            ctx.unsupported(variant=v, metric="peak_allocated", unit="MiB", execution=side,
                            reason=compiling.CPU_PEAK_REASON, **kw)
            continue
        alloc, resv = compiling.isolated_cuda_peak(ctx.device, f, p["inner"], ctx.sync)
        common = dict(variant=v, n=p["inner"], statistic="max", execution=side,
                      window=f"{p['inner']} calls of this side alone, peaks reset before",
                      sync_boundary="allocator peak counters after a final sync", **kw)
        ctx.row(metric="peak_allocated", value=alloc, unit="MiB", **common)
        ctx.row(metric="peak_reserved", value=resv, unit="MiB", **common)


def measure(ctx):
    # the controlled workload (the GEMM-bound MLP by default), then the pointwise chain
    for name in dict.fromkeys((ctx.contract["workload"], e19.POINTWISE)):
        torch._dynamo.reset()
        one_workload(ctx, name)


if __name__ == "__main__":
    run("E19", measure, globals().get("snakemake"))
