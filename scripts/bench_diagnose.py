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

``--contract`` picks the sampling contract (issue 40): ``fixed``, every job's fixed count
(no budget); ``adaptive``, ``--budget`` (default 60 s) split across the jobs, each sampling
until decided or its share is spent; ``both``, one run of each on the same commit, then
whether their verdicts agree. An adaptive run also prints the pre-flight's split and its
estimate against the wall it came to (the estimate's error, in %).

Not a test: it prints numbers of this machine, now. From the repository root:

    PYTHONPATH=$PWD python scripts/bench_diagnose.py mlp --device cpu
    PYTHONPATH=$PWD python scripts/bench_diagnose.py mlp --device cuda   # on a GPU machine
    PYTHONPATH=$PWD python scripts/bench_diagnose.py mlp --device cpu --no-whatif --contract both
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from perflab.kit.sampling import parse_budget_s
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


#: what the command prints: the budget's split and estimate, and the verdict
SPLIT = re.compile(r"^budget .*estimated (?:(\d+)-)?(\d+) s from the command to the verdict"
                   r"(?:, about (\d+) s)?")
VERDICT = re.compile(r"^perflab: verdict: (.*)$")
WAITED = re.compile(r"device \S+ free after ([0-9.]+) s")


def _read_log(log: Path) -> dict:
    """The split line, its estimate (s), the verdict and the seconds spent waiting for the
    device lock (another run measuring on this machine), from a run's output."""
    out = {"split": None, "estimate_s": None, "verdict": None, "lock_wait_s": 0.0}
    for line in log.read_text().splitlines():
        if m := SPLIT.match(line):
            out["split"], out["estimate_s"] = line, float(m.group(2))
            out["estimate_low_s"] = float(m.group(1) or m.group(2))
            out["estimate_mid_s"] = float(m.group(3) or m.group(2))
        elif m := VERDICT.match(line):
            out["verdict"] = m.group(1).split(" — ")[0].strip()
        elif m := WAITED.search(line):
            out["lock_wait_s"] += float(m.group(1))
    return out


def _jobs_lock_wait_s(workdir: Path) -> float:
    """Seconds the run's jobs waited for the device lock (each provenance's
    ``device_lock.waited_s``): time another run measuring on this machine added."""
    import json

    total = 0.0
    for path in workdir.glob("results/**/*.json"):
        try:
            lock = json.loads(path.read_text()).get("device_lock") or {}
        except (OSError, ValueError, AttributeError):
            continue
        total += float(lock.get("waited_s") or 0.0) if isinstance(lock, dict) else 0.0
    return total


def bench(a, contract: str) -> dict:
    """One run of ``perflab diagnose`` under ``contract``, its time split printed."""
    workdir = Path(a.directory or tempfile.mkdtemp(prefix="perflab-bench-")).resolve()
    workdir = workdir / contract if a.contract == "both" else workdir
    cmd = [sys.executable, "-m", "perflab", "diagnose", a.target, "--device", a.device,
           "--cores", str(a.cores), "--directory", str(workdir)]
    cmd += [x for f in a.configfile for x in ("--configfile", str(Path(f).resolve()))]
    cmd += ["--report"] if a.report else []
    cmd += ["--no-whatif"] if a.no_whatif else []
    cmd += ["--budget", f"{a.budget:g}s"] if contract == "adaptive" else []
    log = workdir / "bench_diagnose.log"
    workdir.mkdir(parents=True, exist_ok=True)
    total, preflight, rc = _run(cmd, log)
    got = {**_read_log(log), "contract": contract, "wall_s": total, "rc": rc}
    print(f"perflab diagnose {a.target} [{contract}"
          f"{f', --budget {a.budget:g} s' if contract == 'adaptive' else ''}] (device "
          f"{a.device}, --cores {a.cores}{', --report' if a.report else ''}"
          f"{', --no-whatif' if a.no_whatif else ''}): {total:.1f} s from the command to the "
          f"printed verdict (exit status {rc}); verdict: {got['verdict'] or 'none'}; log: {log}")
    if rc != 0:  # why it stopped, here (the log may be on a machine that is given back)
        tail = log.read_text(errors="replace").strip().splitlines()[-6:] if log.is_file() else []
        print("\n".join(f"  | {t}" for t in tail))
    got["lock_wait_s"] += _jobs_lock_wait_s(workdir)
    if got["lock_wait_s"]:
        print(f"  of which waiting for the device lock (another run measuring): "
              f"{got['lock_wait_s']:.1f} s")
    if got["split"]:
        lo, hi, mid = got["estimate_low_s"], got["estimate_s"], got["estimate_mid_s"]
        errs = [100 * (e - total) / total for e in (lo, hi)]
        inside = "inside" if lo <= total <= hi else "outside"
        print(f"  {got['split']}\n  estimate {lo:.0f}-{hi:.0f} s vs wall {total:.1f} s: "
              f"{errs[0]:+.0f} % / {errs[1]:+.0f} % ({inside} the range); about {mid:.0f} s: "
              f"{100 * (mid - total) / total:+.0f} %")
        got["estimate_mid_err_pct"] = 100 * (mid - total) / total
        got["estimate_err_pct"] = errs
    try:
        b = bench_pipeline.breakdown(workdir)
    except (FileNotFoundError, ValueError) as exc:
        print(f"  no Snakemake split: {exc}")
        got["rc"] = rc or 1
        return got
    after = None if preflight is None else total - preflight - b.wall_s
    print(_line("pre-flight (perflab check, a child process)", preflight, total))
    print(_line("the Snakemake invocation (split below)", b.wall_s, total))
    print(_line("after Snakemake (reading, printing)", after, total))
    print(bench_pipeline.format_breakdown(b))
    if contract == "adaptive":
        print(_per_job(workdir))
    return got


def _per_job(workdir: Path) -> str:
    """Each measuring job's wall against what the pre-flight estimated its fixed count at
    and the share it was given (the split's file, :data:`budget.ESTIMATE_FILE`)."""
    import json

    from perflab.pipeline import budget

    found = sorted(workdir.glob(f"results/**/{budget.ESTIMATE_FILE}"))
    if not found:
        return "  per job: no estimate file (the split was not written)"
    est = json.loads(found[0].read_text())
    parts = []
    for eid, share in est["shares_s"].items():
        if eid == "start-up":
            continue
        prov = found[0].parent / f"{eid.lower()}_*.json"
        walls = [json.loads(p.read_text()).get("wall_s") for p in found[0].parent.glob(
            prov.name) if not p.name.endswith("_samples.json")]
        wall = next((w for w in walls if isinstance(w, (int, float))), None)
        fixed = est["fixed_s"].get(eid)
        parts.append(f"{eid} {'n/a' if wall is None else f'{wall:.1f}'} s (share {share:.1f}"
                     + (f", fixed count est. {fixed:.1f}" if fixed is not None else "") + ")")
    return (f"  per job, wall (in-process) vs the split; a job's start est. "
            f"{est['start_s']:.1f} s: " + "; ".join(parts))


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
    p.add_argument("--contract", choices=("fixed", "adaptive", "both"), default="fixed",
                   help="fixed: every job's fixed count; adaptive: --budget split across the "
                   "jobs; both: one run of each, and whether their verdicts agree")
    p.add_argument("--budget", type=parse_budget_s, default=60.0,
                   help="the adaptive contract's budget (default 60 s)")
    a = p.parse_args(argv)
    runs = [bench(a, c) for c in (("fixed", "adaptive") if a.contract == "both"
                                  else (a.contract,))]
    if len(runs) == 2:
        f, ad = runs
        same = f["verdict"] is not None and f["verdict"] == ad["verdict"]
        print(f"verdicts {'agree' if same else 'DIFFER'}: fixed {f['verdict']!r} in "
              f"{f['wall_s']:.1f} s, adaptive {ad['verdict']!r} in {ad['wall_s']:.1f} s "
              f"({100 * (ad['wall_s'] - f['wall_s']) / f['wall_s']:+.0f} %)")
    return max(r["rc"] for r in runs)


if __name__ == "__main__":
    sys.exit(main())
