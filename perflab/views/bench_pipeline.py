"""Where a pipeline run's time went: measurement against each kind of overhead.

Reads one finished ``snakemake`` invocation — its log (``.snakemake/log/*.snakemake.log``:
which jobs ran, their rules, outputs, start and finish) and the provenance JSON each
experiment job wrote (``wall_s``: the measurement inside its fresh process) — and splits
the invocation's wall time into:

* **measurement**: the experiment jobs' ``wall_s``, summed;
* **process floor**: the rest of each experiment job's time (interpreter start, imports,
  device initialisation before ``measure`` begins, writing after it);
* **figures**, **report** (``report_html``) and **other jobs** (ledger, claims, diagnosis,
  aggregations): their jobs' whole time;
* **scheduling and gaps**: the wall time no job covers (building the DAG, Snakemake's
  bookkeeping between jobs, start-up and shutdown).

The log stamps jobs to the second. Where Snakemake's metadata records the same job
(``.snakemake/metadata/``: start = its incomplete marker, end = its output's mtime, to
the microsecond), those times are used instead.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

#: the overhead kinds, in the order they are printed
KINDS = ("process floor", "figures", "report", "other jobs", "scheduling and gaps")
REPORT_RULES = ("report_html",)
FIGURE_RULE_PREFIX = "figure"
TARGET_RULES = ("all",)  # the default target: no work of its own

_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
_RULE = re.compile(r"^(?:local)?(?:rule|checkpoint) (\S+):$")
_FIELD = re.compile(r"^\s+(\w+): (.*)$")
_FINISHED = re.compile(r"^Finished job(?:id)?:? (\d+)")
_ELAPSED = re.compile(r"^Elapsed time: (?:(\d+) days?, )?(\d+):(\d\d):(\d\d(?:\.\d+)?)")
_LOG_NAME = re.compile(r"(\d{4}-\d\d-\d\dT\d{6}\.\d+)\.snakemake\.log$")
#: how far a metadata time may sit from the log's second-resolution stamp of the same job
_META_SLACK_S = 2.0


@dataclass
class Job:
    jobid: str
    rule: str
    outputs: list[str] = field(default_factory=list)
    start_s: float | None = None  # seconds since the invocation started
    end_s: float | None = None
    measured_s: float | None = None  # the experiment's own wall_s; None: not an experiment

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s

    @property
    def kind(self) -> str:
        """The overhead kind of this job's time outside measurement."""
        if self.measured_s is not None:
            return "process floor"  # an experiment job: its time outside measure()
        if self.rule.startswith(FIGURE_RULE_PREFIX):
            return "figures"
        if self.rule in REPORT_RULES:
            return "report"
        return "other jobs"


@dataclass
class Breakdown:
    log: Path
    wall_s: float
    jobs: list[Job]
    timed_by: str  # "metadata" or "log" (which clock the job times came from)

    @property
    def measurement_s(self) -> float:
        return sum(j.measured_s for j in self.jobs if j.measured_s is not None)

    def overhead_s(self) -> dict[str, float]:
        out = {k: 0.0 for k in KINDS}
        for j in self.jobs:
            out[j.kind] += j.duration_s - (j.measured_s or 0.0)
        out["scheduling and gaps"] = self.wall_s - sum(j.duration_s for j in self.jobs)
        return out

    @property
    def overhead_share(self) -> float:
        return (self.wall_s - self.measurement_s) / self.wall_s


def latest_log(workdir: str | Path) -> Path:
    """The newest Snakemake log under ``workdir`` in which at least one job finished."""
    logs = sorted((Path(workdir) / ".snakemake" / "log").glob("*.snakemake.log"))
    for log in reversed(logs):
        if any(_FINISHED.match(line) for line in log.read_text().splitlines()):
            return log
    raise FileNotFoundError(f"no Snakemake log with a finished job under "
                            f"{Path(workdir) / '.snakemake' / 'log'}")


def _log_start(log: Path) -> dt.datetime:
    m = _LOG_NAME.search(log.name)
    if not m:
        raise ValueError(f"{log}: not a Snakemake log name (YYYY-MM-DDTHHMMSS.ffffff.snakemake.log)")
    return dt.datetime.strptime(m.group(1), "%Y-%m-%dT%H%M%S.%f")


def parse_log(log: str | Path) -> tuple[float, list[Job]]:
    """(wall seconds, the jobs that finished) of one invocation, times from the log's stamps."""
    log = Path(log)
    t0 = _log_start(log)
    jobs: dict[str, Job] = {}
    stamp = None
    pending: Job | None = None
    wall = None
    for line in log.read_text().splitlines():
        if m := _STAMP.match(line):
            stamp = (dt.datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y") - t0).total_seconds()
        elif m := _RULE.match(line):
            pending = Job(jobid="", rule=m.group(1), start_s=stamp)
        elif pending is not None and (m := _FIELD.match(line)):
            key, value = m.groups()
            if key == "output":
                pending.outputs = [p.strip() for p in value.split(",") if p.strip()]
            elif key == "jobid":
                pending.jobid = value.strip()
                jobs[pending.jobid] = pending
        elif m := _FINISHED.match(line):
            pending = None
            if m.group(1) in jobs:
                jobs[m.group(1)].end_s = stamp
        elif m := _ELAPSED.match(line):
            days, h, mi, s = m.groups()
            wall = int(days or 0) * 86400 + int(h) * 3600 + int(mi) * 60 + float(s)
        elif not line.startswith(" "):
            pending = None
    done = [j for j in jobs.values() if j.end_s is not None and j.rule not in TARGET_RULES]
    if wall is None:  # an older Snakemake, or a run cut short: up to the last stamp
        wall = stamp or 0.0
    return wall, done


def _metadata_times(workdir: Path, output: str) -> tuple[float, float] | None:
    """(start, end) epoch seconds Snakemake recorded for the job that wrote ``output``."""
    key = base64.urlsafe_b64encode(output.encode()).decode()
    path = workdir / ".snakemake" / "metadata" / key
    try:
        rec = json.loads(path.read_text())
        return float(rec["starttime"]), float(rec["endtime"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _refine_with_metadata(workdir: Path, log: Path, jobs: list[Job]) -> bool:
    """Replace each job's log times by its metadata's where both describe the same job.

    The log's name is local time; metadata is epoch seconds: a record is used only when
    it lies within a couple of seconds of the log's stamps (the same invocation, the same
    clock), and only if every job has one, so all jobs are timed by one clock.
    """
    t0 = _log_start(log).timestamp()  # naive: local time, as Snakemake named the log
    refined = {}
    for j in jobs:
        times = [t for t in (_metadata_times(workdir, o) for o in j.outputs) if t]
        if not times:
            return False
        start = min(t[0] for t in times) - t0
        end = max(t[1] for t in times) - t0
        if not (j.start_s - _META_SLACK_S <= start <= j.start_s + 1 + _META_SLACK_S
                and j.end_s - _META_SLACK_S <= end <= j.end_s + 1 + _META_SLACK_S):
            return False
        refined[j.jobid] = (start, end)
    for j in jobs:
        j.start_s, j.end_s = refined[j.jobid]
    return True


def _measured_s(workdir: Path, job: Job) -> float | None:
    """The job's measurement time: ``wall_s`` of the provenance JSONs it wrote, or None.

    An aggregation (E08's, W01's) writes a provenance whose ``wall_s`` sums its jobs'
    (:func:`perflab.experiments.e08_batch_sweep.sweep.combines_jobs`): those are counted in the jobs, not twice.
    """
    from perflab.experiments.e08_batch_sweep.sweep import combines_jobs

    total = None
    for out in job.outputs:
        if not out.endswith(".json"):
            continue
        try:
            prov = json.loads((workdir / out).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(prov, dict) and "wall_s" in prov and not combines_jobs(prov):
            total = (total or 0.0) + float(prov["wall_s"])
    return total


def breakdown(workdir: str | Path, log: str | Path | None = None) -> Breakdown:
    """The time split of one invocation in ``workdir`` (default: its newest log with jobs)."""
    workdir = Path(workdir)
    log = Path(log) if log else latest_log(workdir)
    wall, jobs = parse_log(log)
    if not jobs:
        raise ValueError(f"{log}: no job finished in this invocation")
    timed_by = "metadata" if _refine_with_metadata(workdir, log, jobs) else "log"
    for j in jobs:
        j.measured_s = _measured_s(workdir, j)
    return Breakdown(log=log, wall_s=wall, jobs=jobs, timed_by=timed_by)


def _line(label: str, seconds: float, wall: float, note: str = "") -> str:
    return f"  {label:<34} {seconds:8.1f} s  {100 * seconds / wall:5.1f} %" + \
        (f"   {note}" if note else "")


def format_breakdown(b: Breakdown) -> str:
    """The table ARTIFACT.md's "Expected time" quotes."""
    exp = [j for j in b.jobs if j.measured_s is not None]
    by_kind = {k: [j for j in b.jobs if j.kind == k] for k in KINDS}
    over = b.overhead_s()
    floors = [j.duration_s - j.measured_s for j in exp]
    notes = {
        "process floor": f"{len(exp)} experiment jobs, median {statistics.median(floors):.1f} s "
                         "each" if floors else "no experiment job",
        "figures": f"{len(by_kind['figures'])} job(s)",
        "report": f"{len(by_kind['report'])} job(s)",
        "other jobs": ", ".join(sorted({j.rule for j in by_kind["other jobs"]})) or "none",
        "scheduling and gaps": "wall time no job covers",
    }
    w = b.wall_s
    lines = [f"pipeline benchmark: {b.log.name} ({len(b.jobs)} jobs; job times from the "
             f"{b.timed_by})",
             _line("total wall", w, w),
             _line("measurement (sum of wall_s)", b.measurement_s, w),
             _line("overhead (wall - measurement)", w - b.measurement_s, w)]
    lines += ["  " + _line(k, over[k], w, notes[k]) for k in KINDS]
    lines.append(f"  overhead share: {100 * b.overhead_share:.1f} % of the wall")
    return "\n".join(lines)


def jobs_table(b: Breakdown) -> list[dict]:
    """One row per job: rule, kind, start and duration (s), measured wall_s."""
    return [{"jobid": j.jobid, "rule": j.rule,
             "kind": "experiment" if j.measured_s is not None else j.kind, "start_s": round(j.start_s, 3),
             "duration_s": round(j.duration_s, 3),
             "measured_s": None if j.measured_s is None else round(j.measured_s, 3)}
            for j in sorted(b.jobs, key=lambda j: j.start_s)]
