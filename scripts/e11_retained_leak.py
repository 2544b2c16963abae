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

import gc

import numpy as np
import torch

from perflab import memory
from perflab.runner import run

VARIANTS = {
    "retained_graph": "kept.append(metric): the tensor, still connected to its graph",
    "no_grad": "under torch.no_grad(): kept.append(metric), no graph built",
    "item": "kept.append(metric.item()): a Python float",
}
MiB = memory.MiB


def _one_iteration(variant, model, x):
    if variant == "no_grad":
        with torch.no_grad():
            return model(x).softmax(-1).amax(-1).mean()
    metric = model(x).softmax(-1).amax(-1).mean()
    return metric.item() if variant == "item" else metric


def measure(ctx):
    p = ctx.params
    iterations, every = int(p["iterations"]), int(p["every"])
    w = ctx.workload()
    model = w.model
    model.eval()  # a flag on the module tree; autograd still records
    x, _ = w.batch_on(ctx.device)
    exclude = [*model.parameters(), x]
    cuda = ctx.is_cuda
    instrument = "allocated" if cuda else "rss"
    what = ("torch.cuda.memory_allocated" if cuda else
            "VmRSS of this process (includes freed-but-kept heap pages; no live-tensor "
            "counter exists on a CPU)")
    sync_b = ("read after torch.cuda.synchronize()" if cuda
              else "read after the iteration returned (the CPU runs synchronously)")
    graph_what = ("tensor accounting: bytes of the saved-for-backward tensors reachable from "
                  "the kept list (grad_fn._saved_*; parameters and input excluded)")

    def read() -> float:
        ctx.sync()
        return memory.cuda_counters(ctx.device).allocated_mib if cuda else memory.rss_mib()

    monitored = {}
    for variant, how in VARIANTS.items():
        gc.collect()
        if cuda:
            torch.cuda.empty_cache()
        kept = []
        series = []
        for i in range(iterations):
            kept.append(_one_iteration(variant, model, x))
            series.append(read())
            if i % every == 0:
                v = f"{variant}/i{i:02d}"
                win = f"after iteration {i} of {iterations} ({how})"
                ctx.row(variant=v, metric=instrument, value=series[-1], unit="MiB",
                        window=f"{win}; {what}", sync_boundary=sync_b)
                ctx.row(variant=v, metric="retained_graph_bytes",
                        value=memory.bytes_saved_by_graph(kept, exclude) / MiB, unit="MiB",
                        window=f"{win}; {graph_what}", sync_boundary="n/a (host bookkeeping)")
        final_win = f"after all {iterations} iterations ({how})"
        ctx.row(variant=f"{variant}/final", metric=instrument, value=series[-1], unit="MiB",
                window=f"{final_win}; {what}", sync_boundary=sync_b)
        graph_final = memory.bytes_saved_by_graph(kept, exclude) / MiB
        ctx.row(variant=f"{variant}/final", metric="retained_graph_bytes", value=graph_final,
                unit="MiB", window=f"{final_win}; {graph_what}",
                sync_boundary="n/a (host bookkeeping)")
        if cuda:
            torch.cuda.empty_cache()
            ctx.row(variant=f"{variant}/after_empty_cache", metric="allocated", value=read(),
                    unit="MiB", window=f"{final_win}, then torch.cuda.empty_cache(); {what}",
                    sync_boundary=sync_b)
        else:
            ctx.unsupported(variant=f"{variant}/after_empty_cache", metric="allocated",
                            unit="MiB", reason="torch.cuda.empty_cache acts on the CUDA "
                            "caching allocator; a CPU has none to empty")
        slope = float(np.polyfit(np.arange(iterations), series, 1)[0])
        ctx.row(variant=variant, metric=f"{instrument}_growth", value=slope,
                unit="MiB/iteration", n=iterations,
                window=f"least-squares slope over the {iterations} per-iteration readings "
                f"({how}); {what}", sync_boundary=sync_b)
        # robust to a one-off jump (a heap trim, a new allocator segment): sustained growth
        median_step = float(np.median(np.diff(series))) if len(series) > 1 else 0.0
        ctx.row(variant=variant, metric=f"{instrument}_median_increment", value=median_step,
                unit="MiB/iteration", n=iterations - 1,
                window=f"median of the {iterations - 1} iteration-to-iteration changes "
                f"({how}); {what}", sync_boundary=sync_b)
        ctx.row(variant=variant, metric="retained_graph_growth", value=graph_final / iterations,
                unit="MiB/iteration", n=iterations,
                window=f"retained graph bytes after {iterations} iterations / {iterations}; "
                f"{graph_what}", sync_boundary="n/a (host bookkeeping)")
        # a host read of each kept value, after the loop (detached: reading needs no graph)
        values = [float(k.detach()) if isinstance(k, torch.Tensor) else k for k in kept]
        monitored[variant] = float(np.mean(values))
        ctx.row(variant=variant, metric="monitored_metric", value=monitored[variant],
                unit="probability", n=iterations,
                window=f"mean over {iterations} iterations of the mean top-1 probability",
                sync_boundary="read on the host after the loop")
        for i, value in enumerate(series):
            ctx.samples.append({"experiment": ctx.eid, "variant": variant, "execution": "eager",
                                "metric": instrument, "unit": "MiB", "block": 0, "index": i,
                                "value": value})
        ctx.log(f"{variant}: {instrument} {series[0]:.1f} -> {series[-1]:.1f} MiB "
                f"({slope:.3f} MiB/iteration), retained graph {graph_final:.2f} MiB, "
                f"metric {monitored[variant]:.6f}")
        del kept, values
    spread = max(monitored.values()) - min(monitored.values())
    ctx.row(variant="all", metric="monitored_metric_max_abs_diff", value=spread,
            unit="probability", n=len(monitored),
            window="largest minus smallest monitored metric across the three variants",
            sync_boundary="read on the host after the loop")


if __name__ == "__main__":
    run("E11", measure, globals().get("snakemake"))
