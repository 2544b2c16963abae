"""Snakemake's console, as ``perflab`` shows it: one progress line per finished job.

Snakemake prints ~20 lines a job (its rule, inputs, outputs, resources, timestamps); a
diagnosis is then mostly boilerplate. Without ``-v`` the command keeps what a user acts on —
``[3/6] E05 phases  12 s`` per finished job, perflab's own lines, warnings, and each error
block whole — and hides the rest, which stays in Snakemake's own log
(``.snakemake/log/*.snakemake.log``, named at the end of every run). With ``-v``, and on a
dry run (whose job list is the point), everything is shown as Snakemake prints it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from typing import TextIO

_RULE = re.compile(r"^(?:local)?(?:rule|checkpoint) (\S+):$")
_JOBID = re.compile(r"^\s+jobid: (\d+)$")
_WILDCARDS = re.compile(r"^\s+wildcards: (.+)$")
_FINISHED = re.compile(r"^Finished jobid: (\d+)(?: \(Rule: (\S+)\))?")
_STEPS = re.compile(r"^(\d+) of (\d+) steps \([\d.]+%\) done$")
#: the timestamp Snakemake prints before each job's start and end: the progress line's time
#: comes from these where present (a pipe may deliver lines late), else from our clock
_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
_LOG = re.compile(r"^Complete log(?: file)?: (.+)$|^Complete log\(s\): (.+)$")
#: lines shown in the compact view: perflab's own, warnings and errors, and the lines an
#: error block indents under its first ("Error in rule x:" and its message, log, command)
_KEEP = re.compile(r"^(perflab\b|Error|Exiting|WorkflowError|MissingInput|Traceback|"
                   r"RuleException|IncompleteFiles|LockException|Nothing to be done|"
                   r"Will exit after|Shutting down|KeyboardInterrupt)|error|warning",
                   re.IGNORECASE)
#: lines that match _KEEP but tell the user nothing: the report notebook's kernel warning
_NOISE = re.compile(r"^\[IPKernelApp\]")


def label(rule: str) -> str:
    """``e05_phases`` -> ``E05 phases``; a rule that is no experiment keeps its name."""
    m = re.match(r"^([a-z]\d\d)_(.+)$", rule)
    return f"{m.group(1).upper()} {m.group(2).replace('_', ' ')}" if m else rule


class Compact:
    """Feeds on Snakemake's lines; writes the compact view to ``out``."""

    def __init__(self, out: TextIO, clock=time.monotonic):
        self.out, self.clock = out, clock
        self.started: dict[str, tuple[str, float]] = {}  # jobid -> (rule, start)
        self.rule: str | None = None
        self.last: str | None = None  # the jobid whose rule block is being read
        self.in_error = False
        self.log: str | None = None
        self.finished: tuple[str, float] | None = None  # awaiting its "k of n steps" line
        self.stamp: float | None = None  # Snakemake's last timestamp line
        #: the lines hidden since the last progress line: shown when the run fails, so an
        #: error Snakemake words unusually is never hidden
        self.tail: list[str] = []

    def feed(self, line: str) -> None:
        line = line.rstrip("\n")
        if m := _STAMP.match(line):
            self.stamp = time.mktime(time.strptime(" ".join(m.group(1).split()),
                                                   "%a %b %d %H:%M:%S %Y"))
            return
        now = self.stamp if self.stamp is not None else self.clock()
        if m := _RULE.match(line):
            self.rule, self.in_error = m.group(1), False
            return
        if (m := _JOBID.match(line)) and self.rule and not self.in_error:
            self.started[m.group(1)] = (label(self.rule), now)
            self.rule, self.last = None, m.group(1)
            return
        if (m := _WILDCARDS.match(line)) and self.last in self.started:
            # one rule, several jobs (W01's interventions, E08's sizes): name the job
            rule, start = self.started[self.last]
            values = ",".join(v.split("=", 1)[-1] for v in m.group(1).split(", "))
            self.started[self.last] = (f"{rule} {values}", start)
            return
        if m := _FINISHED.match(line):
            rule, start = self.started.pop(m.group(1), (label(m.group(2) or "?"), now))
            self.finished = (rule, now - start)
            return
        if (m := _STEPS.match(line)) and self.finished:
            rule, took = self.finished
            self.finished = None
            self.out.write(f"[{m.group(1)}/{m.group(2)}] {rule:<36} {took:6.0f} s\n")
            self.out.flush()
            self.tail = []
            return
        if m := _LOG.match(line):
            self.log = (m.group(1) or m.group(2)).strip()
            return
        if line.startswith("Error in rule") or line.startswith("Error in group"):
            self.in_error = True
        elif self.in_error and line and not line[0].isspace():
            self.in_error = False
        if self.in_error or (_KEEP.search(line) and not _NOISE.match(line)):
            self.out.write(line + "\n")
            self.out.flush()
        elif line.strip():
            self.tail.append(line)

    def failed(self, last: int = 30) -> None:
        """The run failed: show the lines hidden since the last finished job."""
        if self.tail:
            self.out.write("perflab: Snakemake's last lines before it stopped:\n"
                           + "\n".join(self.tail[-last:]) + "\n")


def run(cmd: list[str], env: dict | None = None, verbose: bool = False,
        out: TextIO | None = None) -> int:
    """Run Snakemake's ``cmd``: its console as is with ``verbose``, else the compact view.
    Returns its exit status."""
    out = out or sys.stderr
    if verbose:
        return subprocess.call(cmd, env=env)
    view = Compact(out)
    env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}  # lines as they come
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, bufsize=1) as p:
        assert p.stdout is not None
        for line in p.stdout:
            view.feed(line)
    if p.returncode != 0:
        view.failed()
    if view.log:
        out.write(f"perflab: Snakemake's full output: {view.log} (-v shows it here)\n")
    return p.returncode
