"""The escalation tool: a memory snapshot of the controlled training step, as an HTML timeline.

When the aggregate counters (E09) stop being enough — a hidden peak whose
owner matters — record the allocator's history over a few steps with
``torch.cuda.memory._record_memory_history`` and take a
``torch.cuda.memory._snapshot()``, rendered to an HTML timeline by PyTorch's
own ``torch.cuda._memory_viz.trace_plot`` (every allocation, with its stack
trace). These are underscore-prefixed, less stable interfaces: an escalation
tool, not a metric. The page embeds the snapshot; opening it loads PyTorch's
MemoryViz.js viewer over the network.

On a machine without CUDA there is no allocator history: the page says so
and why, instead of showing anything.

Under Snakemake (rule ``memory_snapshot``) the contract is E09's; by hand::

    python scripts/memory_snapshot.py --out snapshot.html [--configfile config/test.yaml]
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import argparse
import html
import sys
import time

import torch

from perflab.pipeline import config as cfgmod
from perflab.pipeline.runner import Context, log_to

PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>perflab memory snapshot</title></head>
<body><h1>Memory snapshot: unsupported on this device</h1><p>{reason}</p></body></html>
"""


def snapshot_html(contract: dict, log=print) -> tuple[str, str]:
    """(HTML page, status): the snapshot timeline on CUDA, an explanation elsewhere."""
    device = torch.device(contract["device"])
    if device.type != "cuda":
        reason = (f"The device of this run is {html.escape(str(device))}. "
                  "torch.cuda.memory._record_memory_history records the CUDA caching "
                  "allocator's events; a CPU has no such allocator, so there is no snapshot. "
                  "The CPU's memory rows are in E09 (peak RSS, tensor accounting).")
        return PAGE.format(reason=reason), "unsupported"
    ctx = Context("E09", contract, log)
    step = ctx.training_step()
    if step is None:
        return PAGE.format(reason="The workload has no optimizer: no training step."), \
            "unsupported"
    steps = int(contract["params"].get("snapshot_steps", 3))
    from torch.cuda import _memory_viz

    torch.cuda.memory._record_memory_history(max_entries=100_000)
    try:
        for _ in range(steps):
            step()
        torch.cuda.synchronize(device)
        snap = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    log(f"snapshot of {steps} controlled steps: "
        f"{sum(len(t) for t in snap.get('device_traces', []))} trace events")
    return _memory_viz.trace_plot(snap), "ok"


def write(contract: dict, out: str, log=print) -> str:
    page, status = snapshot_html(contract, log)
    with open(out, "w") as fh:
        fh.write(page)
    log(f"memory snapshot ({status}) -> {out}")
    return status


def _log(msg: str) -> None:
    print(f"[snapshot {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    smk = globals().get("snakemake")
    if smk is not None:
        with log_to(smk.log[0]):
            write(smk.params.contract, smk.output.html, _log)
    else:
        p = argparse.ArgumentParser(description=__doc__,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--configfile", action="append", default=[])
        p.add_argument("--device", help="auto, cpu, cuda or cuda:N")
        p.add_argument("--out", required=True, help="HTML page to write")
        a = p.parse_args()
        cfg = cfgmod.load(a.configfile, {"device": a.device} if a.device else {})
        write(cfgmod.contract(cfg, "E09"), a.out, _log)
