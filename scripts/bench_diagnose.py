"""Where `perflab diagnose`'s time goes, from the command to the printed verdict.

Runs ``python -m perflab diagnose TARGET`` once in a fresh working directory (so every job
runs, each in its own fresh process, as a user's first run does), wall-clocked, then splits
the time:

- pre-flight: the command's own ``perflab check`` child (build the workload, one step),
  until it starts Snakemake;
- the Snakemake invocation, split by :mod:`perflab.views.bench_pipeline` (the one reader of a
  run's log and provenance, as ``perflab bench-pipeline`` prints it): measurement (each
  job's ``wall_s``), each experiment job's process floor (interpreter, imports, device
  initialization, writing), the diagnosis job (aggregation, under "other jobs"), figures
  and report (only with ``--report``), scheduling and gaps;
- after Snakemake: reading and printing the verdict.

Not a test: it prints numbers of this machine, now. From the repository root:

    PYTHONPATH=$PWD python scripts/bench_diagnose.py mlp --device cpu
    PYTHONPATH=$PWD python scripts/bench_diagnose.py mlp --device cuda   # on a GPU machine
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from perflab.views import bench_pipeline

ROOT = Path(__file__).resolve().parents[1]


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


def _line(label: str, seconds: float | None, total: float) -> str:
    if seconds is None:
        return f"  {label:<44} {'n/a':>8}"
    return f"  {label:<44} {seconds:7.1f} s {100 * seconds / total:5.1f} %"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", nargs="?", default="mlp")
    p.add_argument("--device", default="auto")
    p.add_argument("--cores", type=int, default=1)
    p.add_argument("--report", action="store_true", help="also build the report (diagnose's "
                   "--report)")
    p.add_argument("--no-whatif", action="store_true", help="skip W01, diagnose's what-if "
                   "step (diagnose's --no-whatif)")
    p.add_argument("--directory", help="working directory (default: a fresh temporary one)")
    p.add_argument("--configfile", action="append", default=[])
    a = p.parse_args(argv)
    workdir = Path(a.directory or tempfile.mkdtemp(prefix="perflab-bench-")).resolve()
    cmd = [sys.executable, "-m", "perflab", "diagnose", a.target, "--device", a.device,
           "--cores", str(a.cores), "--directory", str(workdir)]
    cmd += [x for f in a.configfile for x in ("--configfile", str(Path(f).resolve()))]
    cmd += ["--report"] if a.report else []
    cmd += ["--no-whatif"] if a.no_whatif else []
    log = workdir / "bench_diagnose.log"
    workdir.mkdir(parents=True, exist_ok=True)
    total, preflight, rc = _run(cmd, log)
    print(f"perflab diagnose {a.target} (device {a.device}, --cores {a.cores}"
          f"{', --report' if a.report else ''}): {total:.1f} s from the command to the printed "
          f"verdict (exit status {rc}); log: {log}")
    try:
        b = bench_pipeline.breakdown(workdir)
    except (FileNotFoundError, ValueError) as exc:
        print(f"  no Snakemake split: {exc}")
        return rc or 1
    after = None if preflight is None else total - preflight - b.wall_s
    print(_line("pre-flight (perflab check, a child process)", preflight, total))
    print(_line("the Snakemake invocation (split below)", b.wall_s, total))
    print(_line("after Snakemake (reading, printing)", after, total))
    print(bench_pipeline.format_breakdown(b))
    return rc


if __name__ == "__main__":
    sys.exit(main())
