"""The one end-to-end pipeline run the suite shares (the ``pipeline_run`` fixture, conftest.py).

The whole workflow on the tiny contract (config/test.yaml, CPU), through Snakemake, once per
session into a temp directory. Every test that needs a finished run or an experiment's
outputs at the tiny contract reads it, so no experiment runs twice at that contract: an
experiment test that still runs its script itself tests something this run cannot (a
patched contract, an injected failure, a command line) and says so where it does.

The run starts with the session, in the background (`snakemake --cores 1`: one core), and
the tests that read it run last (tests/conftest.py): the tests that do not need it run on
the other core meanwhile. When it ends, the tests marked ``background`` (long ones that drive
their own Snakemake runs or command lines) run on that core in a pytest session of their own
(:class:`Delegated`), and this session reports their outcomes at their turn, after the
readers: the suite's wall is about the larger of the two cores' shares, not their sum (the
durations pytest prints are still each test's own).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
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


# ---------------------------------------------------------------- tests run in the background

#: set in the background session: where it writes its tests' reports (and that it is that one)
REPORTS_ENV = "PERFLAB_TEST_BACKGROUND_REPORTS"
#: seconds between looks at the background session's reports
POLL_S = 0.5


def in_background_session() -> bool:
    return bool(os.environ.get(REPORTS_ENV))


class Delegated:
    """The tests marked ``background``, run by a second pytest session of their own.

    They are the suite's long tests that drive their own subprocesses (Snakemake runs, the
    command line) and read neither the shared run nor this session's state. The second
    session starts once the shared run has ended (at once without one), on the core the
    shared run leaves to it, with the environment this session started with (a test here may
    patch ``os.environ`` meanwhile), and writes each test's reports as they happen; this
    session reports them as its own at each test's turn (tests/conftest.py), durations and
    captured output included.
    """

    def __init__(self, nodeids: list[str], basetemp: Path, after: Background | None):
        self.nodeids, self.basetemp, self.after = nodeids, basetemp, after
        self.reports = basetemp.parent / f"{basetemp.name}-reports.jsonl"
        self.output = basetemp.parent / f"{basetemp.name}-pytest.out"
        self.env = {**os.environ, REPORTS_ENV: str(self.reports)}
        self.proc: subprocess.Popen | None = None
        self.started_at = self.ended_at = None
        self._stopped = False
        self._thread = threading.Thread(target=self._start, name="background-tests",
                                        daemon=True)
        self._thread.start()

    def _start(self) -> None:
        if self.after is not None:
            self.after.proc.wait()
        self.started_at = time.time()  # the timeline (tests/conftest.py) says the split
        if self._stopped:
            return
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "--basetemp", str(self.basetemp), *self.nodeids]
        with open(self.output, "w") as fh:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=fh,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.proc.wait()
        self.ended_at = time.time()

    def _records(self) -> list[dict]:
        if not self.reports.is_file():
            return []
        lines = self.reports.read_text().splitlines()
        return [json.loads(line) for line in lines if line.endswith("}")]

    def reports_of(self, nodeid: str) -> list[dict] | None:
        """The serialized reports (setup, call, teardown) of ``nodeid``, once it finished;
        None if the background session ended without running it."""
        while True:
            ended = self.proc is not None and self.proc.poll() is not None
            mine = [r for r in self._records() if r["nodeid"] == nodeid]
            if any(r["finished"] for r in mine):
                return [r["report"] for r in mine if not r["finished"]]
            if ended:
                return None
            time.sleep(POLL_S)

    def end_time(self) -> float | None:
        """When the background session ended (it may still be writing its last reports when
        this session has read them all: wait a little for it)."""
        if self.proc is not None and self.ended_at is None:
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                return None
            self.ended_at = self.ended_at or time.time()
        return self.ended_at

    def why_not_run(self) -> str:
        tail = self.output.read_text()[-4000:] if self.output.is_file() else ""
        return f"the background session ended (exit {self.proc.returncode}):\n{tail}"

    def stop(self) -> None:
        """End the background session (and what it runs) if this session ends first."""
        self._stopped = True
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=60)
