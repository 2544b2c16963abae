"""Where `perflab diagnose`'s time goes, from the command to the printed verdict.

Runs ``python -m perflab diagnose TARGET`` once in a fresh working directory (so every job
runs, each in its own fresh process, as a user's first run does), wall-clocked, then splits
the time:

- pre-flight: the command's own ``perflab check`` child (build the workload, one step);
- before the first job: Snakemake's start-up, its DAG, and the workflow's ``onstart``
  (which pre-flights the workload again and estimates the run);
- process start, per job: interpreter, imports, device initialization, until the
  harness starts measuring (``process_start_s`` in each job's provenance);
- measurement, per job: ``measure(ctx)`` and the atomic writes (``wall_s``);
- aggregation: the diagnosis job; report: ledger, claims, figures and the report
  notebook (only with ``--report``), both from Snakemake's log (1 s resolution);
- the rest: job exits, scheduling, printing.

Not a test: it prints numbers of this machine, now. From the repository root:

    PYTHONPATH=$PWD python scripts/bench_diagnose.py mlp --device cpu
    PYTHONPATH=$PWD python scripts/bench_diagnose.py mlp --device cuda   # on a GPU machine
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the downstream jobs: aggregation (the verdict) and the report's
AGGREGATION = ("diagnosis",)
REPORT = ("ledger", "claims", "figures", "report_html")
_STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
_RULE = re.compile(r"^(?:local)?rule (\w+):$")
_DONE = re.compile(r"^Finished job(?:id)?:? (\d+)")


def _run(cmd: list[str], log: Path) -> tuple[float, float | None, int]:
    """(wall s, s until Snakemake was started, return code); output streamed to ``log``."""
    t0 = time.time()
    snakemake_at: list[float] = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            cwd=ROOT)
    with open(log, "w") as fh:
        def pump() -> None:
            for line in proc.stdout:
                fh.write(line)
                if not snakemake_at and "-m snakemake" in line:
                    snakemake_at.append(time.time() - t0)

        reader = threading.Thread(target=pump)
        reader.start()
        rc = proc.wait()
        reader.join()
    return time.time() - t0, (snakemake_at or [None])[0], rc


def _snakemake_jobs(workdir: Path) -> list[tuple[str, float, float]]:
    """(rule, start, end) epoch seconds of each job in the newest Snakemake log."""
    logs = sorted((workdir / ".snakemake" / "log").glob("*.snakemake.log"))
    if not logs:
        return []
    jobs, stamp, open_jobs = [], None, {}
    lines = logs[-1].read_text().splitlines()
    for i, line in enumerate(lines):
        if m := _STAMP.match(line.strip()):
            stamp = dt.datetime.strptime(m.group(1), "%a %b %d %H:%M:%S %Y").timestamp()
        elif (m := _RULE.match(line.strip())) and stamp is not None:
            jobid = next((ln.split(":")[1].strip() for ln in lines[i + 1:i + 12]
                          if ln.strip().startswith("jobid:")), None)
            open_jobs[jobid] = (m.group(1), stamp)
        elif (m := _DONE.match(line.strip())) and m.group(1) in open_jobs:
            rule, start = open_jobs.pop(m.group(1))
            jobs.append((rule, start, stamp))
    return jobs


def _provenance(results: Path) -> dict[str, dict]:
    out = {}
    for p in sorted(results.glob("*.json")):
        try:
            data = json.loads(p.read_text())
        except ValueError:
            continue
        if isinstance(data, dict) and "wall_s" in data and "experiment" in data:
            out[data["experiment"]] = data
    return out


def _line(label: str, seconds: float | None, total: float, detail: str = "") -> str:
    if seconds is None:
        return f"  {label:<52} {'n/a':>8}"
    return f"  {label:<52} {seconds:7.1f} s {100 * seconds / total:5.1f}%" + (
        f"   {detail}" if detail else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", nargs="?", default="mlp")
    p.add_argument("--device", default="auto")
    p.add_argument("--cores", type=int, default=1)
    p.add_argument("--report", action="store_true", help="also build the report (diagnose's "
                   "--report)")
    p.add_argument("--directory", help="working directory (default: a fresh temporary one)")
    p.add_argument("--configfile", action="append", default=[])
    a = p.parse_args(argv)
    workdir = Path(a.directory or tempfile.mkdtemp(prefix="perflab-bench-")).resolve()
    cmd = [sys.executable, "-m", "perflab", "diagnose", a.target, "--device", a.device,
           "--cores", str(a.cores), "--directory", str(workdir)]
    cmd += [x for f in a.configfile for x in ("--configfile", str(Path(f).resolve()))]
    cmd += ["--report"] if a.report else []
    log = workdir / "bench_diagnose.log"
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    total, preflight, rc = _run(cmd, log)
    jobs = _snakemake_jobs(workdir)
    prov = {}
    for d in (workdir / "results").glob("*"):
        prov.update(_provenance(d))
    measured = {e: float(v["wall_s"]) for e, v in prov.items()}
    starts = {e: float(v.get("process_start_s") or 0.0) for e, v in prov.items()}
    first = min((s for _, s, _ in jobs), default=None)
    before = None if first is None or preflight is None else first - (started + preflight)
    agg = sum(e - s for r, s, e in jobs if r in AGGREGATION)
    report = sum(e - s for r, s, e in jobs if r in REPORT)
    known = sum(x for x in (preflight, before) if x) + sum(measured.values()) + \
        sum(starts.values()) + agg + report
    print(f"perflab diagnose {a.target} (device {a.device}, --cores {a.cores}"
          f"{', --report' if a.report else ''}): {total:.1f} s from the command to the printed "
          f"verdict (exit status {rc}); log: {log}")
    print(_line("pre-flight (perflab check, a child process)", preflight, total))
    print(_line("before the first job (Snakemake start-up, DAG, onstart)", before, total))
    print(_line(f"process start x {len(starts)} jobs (interpreter, imports)",
                sum(starts.values()), total,
                ", ".join(f"{e} {s:.1f}" for e, s in starts.items())))
    print(_line(f"measurement x {len(measured)} jobs", sum(measured.values()), total,
                ", ".join(f"{e} {s:.1f}" for e, s in measured.items())))
    print(_line("aggregation (the diagnosis job, 1 s resolution)", agg, total))
    print(_line("report (ledger, claims, figures, notebook)", report, total,
                "" if a.report else "not built (--report builds it)"))
    print(_line("the rest (job exits, scheduling, printing)", total - known, total))
    return rc


if __name__ == "__main__":
    sys.exit(main())
