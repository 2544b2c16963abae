"""E21 — recompilation: what a new shape, a mode and a graph break cost.

A compiled function (the pointwise chain's forward, at the depth this
experiment configures, so its compiles stay short) is called at a base batch
size and then at new ones. For ``dynamic=None`` (the default: specialize, and
after a shape change recompile with dynamic shapes) and ``dynamic=True``: the
first call, the steady state, each new shape's first call, and how many graphs
the compiler built for it — the recompile count read from
``torch._dynamo.utils.counters`` (``stats.unique_graphs``), not inferred from
a time. Then the base shape under each configured mode (default,
reduce-overhead, max-autotune: first call, steady, correctness), and
``fullgraph=True`` on a function whose branch depends on a tensor's value:
the graph break it reports becomes a row, with ``torch._dynamo.explain``'s
graph and break counts for the same function compiled without fullgraph.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import torch

from perflab.core.names import SYNCED_CALL as SYNCED
from perflab.experiments import e21_recompile as e21
from perflab.experiments.e19_compile_ab import FIRST_CALL, FORWARD_LATENCY, MAX_ABS_DIFF, POINTWISE
from perflab.instruments import compiling, timing
from perflab.pipeline.runner import run

STATS = ("median", "iqr", "p25", "p75", "min", "max")


def _compile_error(ctx, variant, exc, metric=FIRST_CALL, unit="ms"):
    msg = f"torch.compile failed: {compiling.failure(exc)}"
    ctx.log(f"{variant}: {msg}")
    ctx.unsupported(variant=variant, metric=metric, unit=unit, execution="compiled",
                    status="error", reason=msg, mode="inference")


def _first_and_steady(ctx, variant, fn, eager, window_first):
    """First call, graphs it compiled, steady state and correctness of ``fn``; False on failure."""
    t = ctx.timing
    kw = dict(execution="compiled", mode="inference")
    before = compiling.counters()
    try:
        first = timing.time_first_call(fn, ctx.sync)
    except Exception as exc:
        _compile_error(ctx, variant, exc)
        return None
    after = compiling.counters()
    graphs = compiling.graphs_compiled(before, after)
    ctx.row(variant=variant, metric=FIRST_CALL, value=first, unit="ms", window=window_first,
            sync_boundary=SYNCED, **kw)
    ctx.row(variant=variant, metric=e21.GRAPHS_COMPILED, value=graphs, unit="count",
            window="torch._dynamo.utils.counters stats.unique_graphs during the first call",
            sync_boundary="n/a", **kw)
    # a graph this job compiled before (an earlier variant) is served from its cache
    ctx.row(variant=variant, metric=e21.FXGRAPH_CACHE_HIT, unit="count", sync_boundary="n/a",
            value=compiling.delta(before, after, "inductor.fxgraph_cache_hit"),
            window="Inductor FX-graph cache hits during the first call (the job's private "
                   "cache, filled by earlier variants)", **kw)
    s = ctx.summary(timing.time_calls(fn, warmup=t["warmup"], repeats=ctx.params["repeats"],
                                      sync=ctx.sync),
                    variant=variant, metric=FORWARD_LATENCY, statistics=STATS,
                    window=f"steady state after warmup {t['warmup']}", sync_boundary=SYNCED, **kw)
    ctx.row(variant=variant, metric=MAX_ABS_DIFF, value=compiling.max_abs_diff(fn(), eager()),
            unit="abs", n=1, window="one call of each on the same input and state",
            sync_boundary="outputs compared on the host", **kw)
    ctx.log(f"{variant}: first call {first / 1e3:.2f} s ({graphs} graph(s)), "
            f"steady {s['median']:.3f} ms")
    return first


def _new_shape(ctx, case, compiled, x, b, eager_at):
    """The first call of the compiled function at a new batch ``b``: graphs it compiled,
    then its steady state and correctness at that batch."""
    kw = dict(execution="compiled", mode="inference")
    base = ctx.params["batches"][0]
    v = e21.new_batch_variant(case, b)
    fn = compiling.no_grad_forward(compiled, x)
    before = compiling.counters()
    try:
        ms = timing.time_first_call(fn, ctx.sync)
    except Exception as exc:
        _compile_error(ctx, v, exc, metric=e21.NEW_SHAPE_FIRST_CALL)
        return
    graphs = compiling.graphs_compiled(before, compiling.counters())
    common = dict(variant=v, sync_boundary=SYNCED, **kw)
    ctx.row(metric=e21.NEW_SHAPE_FIRST_CALL, value=ms, unit="ms",
            window=f"first call at the new batch {b} after {base}", **common)
    ctx.row(metric=e21.GRAPHS_COMPILED, value=graphs, unit="count",
            window="torch._dynamo.utils.counters stats.unique_graphs during that call",
            **{**common, "sync_boundary": "n/a"})
    again = timing.time_calls(fn, warmup=0, repeats=ctx.params["repeats"], sync=ctx.sync)
    ctx.summary(again, variant=v, metric=FORWARD_LATENCY, statistics=("median",),
                window="calls after the first at this batch", sync_boundary=SYNCED, **kw)
    ctx.row(variant=v, metric=MAX_ABS_DIFF, value=compiling.max_abs_diff(fn(), eager_at(x)()),
            unit="abs", n=1, window="one call of each at this batch",
            sync_boundary="outputs compared on the host", **kw)
    ctx.log(f"{e21.shapes_variant(case)}: batch {b}: first call {ms:.1f} ms, {graphs} graph(s) "
            "compiled")


def shapes(ctx, model, make_input, eager_at):
    """dynamic=None vs dynamic=True: the base batch, then each new batch size once."""
    batches = ctx.params["batches"]
    kw = dict(execution="compiled", mode="inference")
    for case, dynamic in e21.DYNAMIC_CASES:
        v = e21.shapes_variant(case)
        torch._dynamo.reset()
        compiled = torch.compile(model, dynamic=dynamic)
        x0 = make_input(batches[0])
        start = compiling.counters()
        fn0 = compiling.no_grad_forward(compiled, x0)
        first = _first_and_steady(ctx, v, fn0, eager_at(x0),
                                  f"first call at batch {batches[0]} (dynamic={dynamic})")
        if first is None:
            continue
        for b in batches[1:]:
            _new_shape(ctx, case, compiled, make_input(b), b, eager_at)
        total = compiling.graphs_compiled(start, compiling.counters())
        ctx.row(variant=v, metric=e21.RECOMPILES, value=max(total - 1, 0), unit="count",
                n=len(batches), sync_boundary="n/a", **kw,
                window=f"graphs compiled beyond the first over batches {batches} "
                       "(torch._dynamo.utils.counters stats.unique_graphs)")


def modes(ctx, model, x, eager):
    for mode in ctx.params["modes"]:
        torch._dynamo.reset()
        note = ""
        if mode in ("reduce-overhead", "max-autotune") and not ctx.is_cuda:
            note = "; CUDA graphs (part of this mode) apply only on CUDA: not used on CPU"
        fn = compiling.no_grad_forward(torch.compile(model, mode=mode), x)
        _first_and_steady(ctx, e21.mode_variant(mode), fn, eager,
                          f"first call, mode={mode!r} (Inductor cache private to this job; "
                          f"earlier variants may have filled it){note}")


def branchy(x):
    """A branch on a tensor's value: Dynamo cannot trace it into one graph."""
    if x.sum() > 0:
        return torch.tanh(x) * 2
    return torch.sigmoid(x) - 1


def graph_break(ctx, x):
    kw = dict(execution="compiled", mode="inference")
    torch._dynamo.reset()
    v = e21.FULLGRAPH_VARIANT
    try:
        torch.compile(branchy, fullgraph=True)(x)
    except Exception as exc:  # expected: fullgraph turns the graph break into an error
        ctx.unsupported(variant=v, metric=e21.GRAPH_BREAK, unit="count", status="error",
                        reason=f"fullgraph=True raised {compiling.failure(exc, 160)}",
                        window="one call of torch.compile(fn, fullgraph=True)", **kw)
    else:
        ctx.row(variant=v, metric=e21.GRAPH_BREAK, value=0, unit="count",
                window="fullgraph=True compiled the branch without a graph break",
                sync_boundary="n/a", **kw)
    torch._dynamo.reset()
    try:
        ex = torch._dynamo.explain(branchy)(x)
    except Exception as exc:
        ctx.unsupported(variant=e21.EXPLAIN_VARIANT, metric=e21.GRAPH_BREAKS, unit="count",
                        status="error", reason=f"torch._dynamo.explain failed: "
                        f"{compiling.failure(exc)}", **kw)
        return
    reasons = "; ".join(dict.fromkeys(str(r.reason).splitlines()[0][:80]
                                      for r in ex.break_reasons)) or "none"
    common = dict(variant=e21.EXPLAIN_VARIANT, sync_boundary="n/a", **kw,
                  window=f"torch._dynamo.explain on the same function; break reason: {reasons}")
    ctx.row(metric=e21.GRAPH_BREAKS, value=ex.graph_break_count, unit="count", **common)
    ctx.row(metric=e21.GRAPHS, value=ex.graph_count, unit="count", **common)
    torch._dynamo.reset()
    compiled = torch.compile(branchy)
    ctx.row(variant=e21.BROKEN_COMPILED_VARIANT, metric=MAX_ABS_DIFF,
            value=compiling.max_abs_diff(compiled(x), branchy(x)), unit="abs", n=1,
            window="without fullgraph: the compiled pieces vs eager on the same input",
            sync_boundary="outputs compared on the host", **kw)


def measure(ctx):
    p = ctx.params
    w = ctx.workload(POINTWISE, depth=p["depth"])
    w.model.eval()

    def make_input(b):
        x, _ = w.make_batch(b)
        return x.to(ctx.device)

    def eager_at(x):
        return compiling.no_grad_forward(w.model, x)

    x0 = make_input(p["batches"][0])
    timing.warm(eager_at(x0), ctx.timing["warmup"], ctx.sync)  # start-up is not compile cost
    shapes(ctx, w.model, make_input, eager_at)
    modes(ctx, w.model, x0, eager_at(x0))
    graph_break(ctx, x0)


if __name__ == "__main__":
    run("E21", measure, globals().get("snakemake"))
