"""Does an ended torch.profiler session leave a process's step slower afterwards?

The chapter's controlled step (``perflab.instruments.workloads.mlp``, built by ``perflab.instruments.steps.build``)
in one fresh process: ``--before`` blocks of synchronized calls (``perflab.instruments.timing.time_calls``)
before any profiling, then ``--sessions`` profiling sessions (``perflab.instruments.profiling
.profile_steps``, CPU + CUDA activities on a GPU), each followed by ``--after`` blocks.
One row per block: its median (ms), the sessions that had ended before it, and the
``TEARDOWN_CUPTI`` setting of the process (whether Kineto finalizes CUPTI when a session
ends). Run it once per setting, each in its own process:

    python scripts/probe_profiler_aftereffect.py --out a.csv
    TEARDOWN_CUPTI=1 python scripts/probe_profiler_aftereffect.py --out b.csv

It is why E14's unprofiled calls are no peer of the between-process floor
(``Experiment.process_peer``): they follow its sessions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import pandas as pd

from perflab.core.names import STEP_LATENCY


def blocks(step, sync, *, n: int, calls: int) -> list[float]:
    """``n`` block medians (ms) of ``calls`` synchronized calls each, no warmup."""
    from perflab.instruments import timing

    return [statistics.median(timing.time_calls(step, warmup=0, repeats=calls, sync=sync))
            for _ in range(n)]


def probe(device: str, *, batch: int, calls: int, before: int, after: int, sessions: int,
          warmup: int) -> pd.DataFrame:
    """The block medians of one process, in time order (see the module docstring)."""
    import torch

    from perflab.instruments import profiling, steps, timing, workloads

    dev = torch.device(device)
    step = steps.build(workloads.mlp(dev, batch=batch), dev)
    sync = timing.synchronizer(dev)
    timing.warm(step, warmup, sync)
    out = [(0, m) for m in blocks(step, sync, n=before, calls=calls)]
    for done in range(1, sessions + 1):
        profiling.profile_steps(step, device=dev, sync=sync, wait=5, warmup=5, active=10)
        out += [(done, m) for m in blocks(step, sync, n=after, calls=calls)]
    return pd.DataFrame({
        "block": range(len(out)), "sessions_ended": [s for s, _ in out],
        "value": [m for _, m in out], "unit": "ms", "statistic": "median",
        "metric": STEP_LATENCY, "calls_per_block": calls, "batch": batch,
        "workload": "mlp", "dtype": "float32", "mode": "train", "execution": "eager",
        "device": str(dev), "teardown_cupti": os.environ.get("TEARDOWN_CUPTI", "unset"),
        "window": f"{calls} calls after warmup {warmup}; sessions schedule(wait=5, "
                  "warmup=5, active=10, repeat=1)",
        "instrument": "perflab.instruments.timing.time_calls",
        "sync_boundary": "device synchronized at both ends of every call"})


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--calls", type=int, default=200, help="synchronized calls per block")
    ap.add_argument("--before", type=int, default=2, help="blocks before any session")
    ap.add_argument("--after", type=int, default=2, help="blocks after each session")
    ap.add_argument("--sessions", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--out", help="CSV to write (default: print)")
    a = ap.parse_args(argv)
    for name in ("batch", "calls", "before", "after", "sessions"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be >= 1")
    if a.warmup < 0:
        ap.error("--warmup must be >= 0")
    rows = probe(a.device, batch=a.batch, calls=a.calls, before=a.before, after=a.after,
                 sessions=a.sessions, warmup=a.warmup)
    if a.out:
        rows.to_csv(a.out, index=False)
    by = rows.groupby("sessions_ended").value.median()
    print(f"TEARDOWN_CUPTI={rows.teardown_cupti[0]} on {rows.device[0]}: block medians (ms) "
          "by sessions ended: " + ", ".join(f"{k}: {v:.3f}" for k, v in by.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
