"""The one end-to-end pipeline run the suite shares (the ``pipeline_run`` fixture, conftest.py).

The whole workflow on the tiny contract (config/test.yaml, CPU), through Snakemake, once per
session into a temp directory. Every test that needs a finished run or an experiment's
outputs at the tiny contract reads it, so no experiment runs twice at that contract: an
experiment test that still runs its script itself tests something this run cannot (a
patched contract, an injected failure, a command line) and says so where it does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO_ROOT as ROOT
from conftest import TEST_CONFIG

TAG = f"cpu-{os.cpu_count()}c-tiny"


def snakemake(work: Path, *args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    """Snakemake on the tiny contract with ``work`` as its working directory."""
    cmd = [
        sys.executable, "-m", "snakemake",
        "-s", str(ROOT / "Snakefile"),
        "--directory", str(work),
        "--configfile", str(TEST_CONFIG),
        "--config", "device=cpu",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def run(work: Path) -> Path:
    """The default target, one core; fails with Snakemake's output if the run fails."""
    proc = snakemake(work, "--cores", "1")
    assert proc.returncode == 0, (proc.stdout[-4000:], proc.stderr[-6000:])
    return work


def results_dir(work: Path) -> Path:
    return work / "results" / TAG


def first_log(work: Path) -> Path:
    """The log of the shared run itself (later invocations in the same directory add logs)."""
    return sorted((work / ".snakemake" / "log").glob("*.snakemake.log"))[0]
