"""The one end-to-end pipeline run the suite shares (the ``pipeline_run`` fixture, conftest.py).

The whole workflow on the tiny contract (config/test.yaml, CPU), through Snakemake, once per
session into a temp directory. Every test that needs a finished run or an experiment's
outputs at the tiny contract reads it, so no experiment runs twice at that contract: an
experiment test that still runs its script itself tests something this run cannot (a
patched contract, an injected failure, a command line) and says so where it does.

The run starts with the session, in the background (`snakemake --cores 1`: one core), and
the tests that read it run last (tests/conftest.py): the tests that do not need it run on
the other core meanwhile.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import REPO_ROOT as ROOT
from conftest import TEST_CONFIG

TAG = f"cpu-{os.cpu_count()}c-tiny"


def command(work: Path, *args: str) -> list[str]:
    """Snakemake on the tiny contract with ``work`` as its working directory."""
    return [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"),
            "--directory", str(work), "--configfile", str(TEST_CONFIG), "--config", "device=cpu",
            *args]


def snakemake(work: Path, *args: str, timeout: int = 1500) -> subprocess.CompletedProcess:
    return subprocess.run(command(work, *args), capture_output=True, text=True, timeout=timeout)


class Background:
    """The shared run (the default target, one core) going on while other tests run."""

    def __init__(self, work: Path, output: Path):
        self.work, self.output = work, output
        with open(output, "w") as fh:  # a file, not a pipe: a full pipe would stall the run
            self.proc = subprocess.Popen(command(work, "--cores", "1"), stdout=fh,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def wait(self, timeout: float = 3000) -> Path:
        """The finished run's working directory; fails with Snakemake's output if it failed."""
        rc = self.proc.wait(timeout=timeout)
        assert rc == 0, self.output.read_text()[-8000:]
        return self.work

    def stop(self) -> None:
        """End the run (and its job) if the session ends first."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=60)


def results_dir(work: Path) -> Path:
    return work / "results" / TAG


def first_log(work: Path) -> Path:
    """The log of the shared run itself (later invocations in the same directory add logs)."""
    return sorted((work / ".snakemake" / "log").glob("*.snakemake.log"))[0]
