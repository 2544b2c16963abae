"""The entry of one D01 rank: torchrun starts one per rank (scripts/d01_data_parallel.py's
launcher, perflab.experiments.d01_data_parallel.distributed.torchrun_command).

Each rank is a fresh process, like every experiment job: it joins the process group, times
every configuration's steps (perflab.experiments.d01_data_parallel.ranks) in the job
harness's context (perflab.pipeline.runner), writes ``rank<r>.json`` and leaves.
"""

import datetime as dt
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from perflab.core import io
from perflab.experiments.d01_data_parallel import ranks
from perflab.pipeline import runner


def rank_main(job_path: str) -> None:
    """Join the group, measure, write ``rank<r>.json``, leave."""
    job = json.loads(Path(job_path).read_text())
    rank, local, world = (int(os.environ[k]) for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    p = ranks.Plan(**job["plan"])
    device = p.device(local)
    t0 = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[D01 rank {rank} +{time.perf_counter() - t0:6.1f}s] {msg}", file=sys.stderr,
              flush=True)

    kw = {}
    if p.device_type == "cuda":
        torch.cuda.set_device(device)
        kw["device_id"] = torch.device(device)  # NCCL binds this rank's GPU (its barrier too)
    dist.init_process_group(p.backend, timeout=dt.timedelta(seconds=float(job["timeout_s"])),
                            **kw)
    try:
        record = ranks.measure_rank(job["contract"], p, device, rank, world, log, runner.Context)
        io.atomic_write_json(Path(job["out"]) / f"rank{rank}.json", record)
        log(f"wrote {len(record['steps'])} step records")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    rank_main(sys.argv[1])
