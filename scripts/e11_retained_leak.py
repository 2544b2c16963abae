"""E11 — the accumulating branch: a monitoring loop that keeps a graph-connected tensor.

The controlled model in ``eval()`` mode (a flag, not ``no_grad``) is only read:
each iteration computes the mean top-1 probability of the batch and appends
it to a list, in three variants:

- ``retained_graph``: the tensor itself (it carries its iteration's autograd
  graph, so every saved activation of that forward stays reachable),
- ``no_grad``: the same tensor computed under ``torch.no_grad()`` (no graph),
- ``item``: ``.item()``, a Python float.

Memory is read after every iteration (the raw series is the samples file) and
reported every ``every`` iterations, at the end, and after
``torch.cuda.empty_cache()``. Two instruments:

- the process-level one: ``torch.cuda.memory_allocated`` on CUDA; on a CPU the
  resident set (VmRSS), which also holds freed-but-kept heap pages;
- ``retained_graph_bytes``: the bytes of the tensors autograd saved for
  backward that are reachable from the kept list (walking each kept tensor's
  ``grad_fn`` graph; parameters and the input batch excluded): the retained
  graph counted tensor by tensor, the same on every device.

The monitored metric (mean over the iterations of the kept values) is
reported per variant: identical, because the computation is identical.
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import gc
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from perflab.experiments.e11_retained_leak import (
    ALL,
    ALLOCATED,
    ITEM,
    MONITORED_METRIC,
    MONITORED_METRIC_MAX_ABS_DIFF,
    NO_GRAD,
    RETAINED_GRAPH,
    RETAINED_GRAPH_BYTES,
    RETAINED_GRAPH_GROWTH,
    RSS,
    after_empty_cache_variant,
    final_variant,
    growth_metric,
    mark_variant,
    median_increment_metric,
)
from perflab.instruments import memory
from perflab.pipeline.runner import run

LOOPS = {  # loop -> what it keeps, for the windows
    RETAINED_GRAPH: "kept.append(metric): the tensor, still connected to its graph",
    NO_GRAD: "under torch.no_grad(): kept.append(metric), no graph built",
    ITEM: "kept.append(metric.item()): a Python float",
}
MiB = memory.MiB
HOST = "n/a (host bookkeeping)"  # the sync boundary of a tensor-accounting row
GRAPH_WHAT = ("tensor accounting: bytes of the saved-for-backward tensors reachable from "
              "the kept list (grad_fn._saved_*; parameters and input excluded)")


@dataclass
class Instrument:
    """The process-level reading of this device, and what the windows say about it."""

    name: str  # allocated (CUDA) or rss (CPU)
    what: str
    sync_boundary: str
    read: Callable[[], float]  # MiB, after a sync
    exclude: list  # tensors the retained-graph count leaves out (parameters, the input)

    def graph_mib(self, kept) -> float:
        return memory.bytes_saved_by_graph(kept, self.exclude) / MiB


def _instrument(ctx, exclude) -> Instrument:
    cuda = ctx.is_cuda

    def read() -> float:
        ctx.sync()
        return memory.cuda_counters(ctx.device).allocated_mib if cuda else memory.rss_mib()

    return Instrument(
        ALLOCATED if cuda else RSS,
        "torch.cuda.memory_allocated" if cuda else
        "VmRSS of this process (includes freed-but-kept heap pages; no live-tensor "
        "counter exists on a CPU)",
        "read after torch.cuda.synchronize()" if cuda
        else "read after the iteration returned (the CPU runs synchronously)",
        read, exclude)


def _one_iteration(loop, model, x):
    if loop == NO_GRAD:
        with torch.no_grad():
            return model(x).softmax(-1).amax(-1).mean()
    metric = model(x).softmax(-1).amax(-1).mean()
    return metric.item() if loop == ITEM else metric


def _iterate(ctx, inst: Instrument, loop: str, model, x, iterations: int, every: int):
    """The monitoring loop, memory read after every iteration; returns (kept, readings)."""
    how = LOOPS[loop]
    kept, series = [], []
    for i in range(iterations):
        kept.append(_one_iteration(loop, model, x))
        series.append(inst.read())
        if i % every == 0:
            win = f"after iteration {i} of {iterations} ({how})"
            ctx.row(variant=mark_variant(loop, i), metric=inst.name, value=series[-1],
                    unit="MiB", window=f"{win}; {inst.what}", sync_boundary=inst.sync_boundary)
            ctx.row(variant=mark_variant(loop, i), metric=RETAINED_GRAPH_BYTES,
                    value=inst.graph_mib(kept), unit="MiB", window=f"{win}; {GRAPH_WHAT}",
                    sync_boundary=HOST)
    return kept, series


def _final_rows(ctx, inst: Instrument, loop: str, kept, series, iterations: int) -> float:
    """Memory after the loop, and after empty_cache (CUDA); returns the retained graph MiB."""
    final_win = f"after all {iterations} iterations ({LOOPS[loop]})"
    ctx.row(variant=final_variant(loop), metric=inst.name, value=series[-1], unit="MiB",
            window=f"{final_win}; {inst.what}", sync_boundary=inst.sync_boundary)
    graph_final = inst.graph_mib(kept)
    ctx.row(variant=final_variant(loop), metric=RETAINED_GRAPH_BYTES, value=graph_final,
            unit="MiB", window=f"{final_win}; {GRAPH_WHAT}", sync_boundary=HOST)
    if ctx.is_cuda:
        torch.cuda.empty_cache()
        ctx.row(variant=after_empty_cache_variant(loop), metric=ALLOCATED, value=inst.read(),
                unit="MiB", window=f"{final_win}, then torch.cuda.empty_cache(); {inst.what}",
                sync_boundary=inst.sync_boundary)
    else:
        ctx.unsupported(variant=after_empty_cache_variant(loop), metric=ALLOCATED,
                        unit="MiB", reason="torch.cuda.empty_cache acts on the CUDA "
                        "caching allocator; a CPU has none to empty")
    return graph_final


def _growth_rows(ctx, inst: Instrument, loop: str, series, graph_final: float,
                 iterations: int) -> float:
    """How fast the loop grows memory, three ways; returns the least-squares slope."""
    how = LOOPS[loop]
    slope = float(np.polyfit(np.arange(iterations), series, 1)[0])
    ctx.row(variant=loop, metric=growth_metric(inst.name), value=slope,
            unit="MiB/iteration", n=iterations,
            window=f"least-squares slope over the {iterations} per-iteration readings "
            f"({how}); {inst.what}", sync_boundary=inst.sync_boundary)
    # robust to a one-off jump (a heap trim, a new allocator segment): sustained growth
    median_step = float(np.median(np.diff(series))) if len(series) > 1 else 0.0
    ctx.row(variant=loop, metric=median_increment_metric(inst.name), value=median_step,
            unit="MiB/iteration", n=iterations - 1,
            window=f"median of the {iterations - 1} iteration-to-iteration changes "
            f"({how}); {inst.what}", sync_boundary=inst.sync_boundary)
    ctx.row(variant=loop, metric=RETAINED_GRAPH_GROWTH, value=graph_final / iterations,
            unit="MiB/iteration", n=iterations,
            window=f"retained graph bytes after {iterations} iterations / {iterations}; "
            f"{GRAPH_WHAT}", sync_boundary=HOST)
    return slope


def _one_loop(ctx, inst: Instrument, loop: str, model, x, iterations: int,
              every: int) -> float:
    """One monitoring loop's rows and samples; returns its monitored metric."""
    gc.collect()
    if ctx.is_cuda:
        torch.cuda.empty_cache()
    kept, series = _iterate(ctx, inst, loop, model, x, iterations, every)
    graph_final = _final_rows(ctx, inst, loop, kept, series, iterations)
    slope = _growth_rows(ctx, inst, loop, series, graph_final, iterations)
    # a host read of each kept value, after the loop (detached: reading needs no graph)
    values = [float(k.detach()) if isinstance(k, torch.Tensor) else k for k in kept]
    monitored = float(np.mean(values))
    ctx.row(variant=loop, metric=MONITORED_METRIC, value=monitored,
            unit="probability", n=iterations,
            window=f"mean over {iterations} iterations of the mean top-1 probability",
            sync_boundary="read on the host after the loop")
    for i, value in enumerate(series):
        ctx.samples.append({"experiment": ctx.eid, "variant": loop, "execution": "eager",
                            "metric": inst.name, "unit": "MiB", "block": 0, "index": i,
                            "value": value})
    ctx.log(f"{loop}: {inst.name} {series[0]:.1f} -> {series[-1]:.1f} MiB "
            f"({slope:.3f} MiB/iteration), retained graph {graph_final:.2f} MiB, "
            f"metric {monitored:.6f}")
    del kept, values
    return monitored


def measure(ctx):
    p = ctx.params
    iterations, every = int(p["iterations"]), int(p["every"])
    w = ctx.workload()
    model = w.model
    model.eval()  # a flag on the module tree; autograd still records
    x, _ = w.batch_on(ctx.device)
    inst = _instrument(ctx, exclude=[*model.parameters(), x])
    monitored = {loop: _one_loop(ctx, inst, loop, model, x, iterations, every)
                 for loop in LOOPS}
    spread = max(monitored.values()) - min(monitored.values())
    ctx.row(variant=ALL, metric=MONITORED_METRIC_MAX_ABS_DIFF, value=spread,
            unit="probability", n=len(monitored),
            window="largest minus smallest monitored metric across the three variants",
            sync_boundary="read on the host after the loop")


if __name__ == "__main__":
    run("E11", measure, globals().get("snakemake"))
