"""A workload that fails on demand, for the failure-handling tests (tests/test_failures.py).

``failing_workload:make`` builds the chapter's MLP unless PERFLAB_TEST_FAIL says how
to fail and PERFLAB_TEST_FAIL_ONLY (if set) occurs in the job's command line (under
Snakemake's ``script:``, the copied script's name holds the experiment's slug).
PERFLAB_TEST_FAIL may also name a mode per job, ``slug=mode,slug=mode``, so one run
injects each fault into its own experiment:

- ``raise``: a Python exception, as a bug in an experiment would raise;
- ``oom``: ``torch.OutOfMemoryError``, as an allocation too large for the device raises;
- ``kill``: SIGKILL to the job's own process, as the kernel's OOM killer (or a
  scheduler enforcing its memory limit) ends it: no handler runs, nothing is flushed;
- ``hang``: sleep, so a test can kill the whole run while the job is in flight.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import torch

from perflab.instruments.workloads import mlp


def _fault(spec: str, only: str) -> tuple[str, str]:
    """(mode, only) for this job: ``spec`` as given, or the mode of the job whose slug is in
    this command line (``slug=mode,...``; none there: no fault)."""
    if "=" not in spec:
        return spec, only
    argv = " ".join(sys.argv)
    for slug, _, mode in (item.partition("=") for item in spec.split(",")):
        if slug and slug in argv:
            return mode, slug
    return "", ""


def make(device: torch.device, **params):
    mode, only = _fault(os.environ.get("PERFLAB_TEST_FAIL", ""),
                        os.environ.get("PERFLAB_TEST_FAIL_ONLY", ""))
    # the faults are the measured job's: the run's pre-flight (a child process that sets
    # PERFLAB_PREFLIGHT, perflab/pipeline/preflight.py) builds the workload unharmed
    if os.environ.get("PERFLAB_PREFLIGHT"):
        mode = ""
    if mode and (not only or only in " ".join(sys.argv)):
        print(f"failing_workload: injecting {mode!r}", file=sys.stderr, flush=True)
        if mode == "raise":
            raise RuntimeError("injected failure: the experiment raised")
        if mode == "oom":
            raise torch.OutOfMemoryError(
                "CUDA out of memory. Tried to allocate 80.00 GiB (simulated by the test)"
            )
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "hang":  # until the test kills the whole run
            time.sleep(600)
        raise ValueError(f"PERFLAB_TEST_FAIL={mode!r}: use raise, oom or kill")
    return mlp(device, **params)
