"""Benchmark `perflab run` on the known-answer scripts: verdict and command-to-verdict time.

    python scripts/bench_run.py --out DIR [--sizes cpu|cuda] [--only a,b] [--timeout S]
        [--contract fixed|adaptive|both --budget 60s]

Runs ``python -m perflab.attach.run --steps N --out DIR/<script> -- python examples/scripts/<script>``
for each script (a fresh process each) — or, given ``--contract``, under ``--budget`` with that
contract (``both``: fixed then adaptive for each script in turn, so a noisy shared machine
drifts over both alike) — then prints and writes ``DIR/bench_run.csv``: the
verdict against the one known by construction, and the time from the command to the printed
verdict split into the script's start-up (process start to its first step: imports, model
build, first calls), the observed steps (first step to the stop), and the verdict (after
the script). Plus the observers' own cost where the run measured it. Under a budget, also
how the run stopped (decided, or the budget and what it lacked), the estimate against the actual
wall (issue 40's target: within 25 %) and whether the wall kept to the budget (adaptive: the
budget is the total maximum; fixed: seconds of steady state). Not a timed test: the
issue's targets (H200 <= 90 s for a step up to 150 ms; this 2-core CPU <= 3 min) are read
off its table. Each script's own output goes to DIR/<script>/output.log.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "examples" / "scripts"

#: script -> (expected verdict on a CPU, on CUDA, args on a CPU, args on CUDA). "memory_grows"
#: is the memory finding; "" is no known answer (the Trainer: attached and judged, that's all)
CASES = {
    "input_bound.py": ("input_pipeline", "input_pipeline", ["--delay-ms", "2"],
                       ["--delay-ms", "2"]),
    # on CUDA a step of real device work (~9 ms at fp32) beside the host's launches (~1.5 ms):
    # then the per-step reads, keeping the host from running ahead, are what the step waits for
    "sync_item.py": ("not synchronization", "synchronization", ["--hidden", "256"],
                     ["--hidden", "4096", "--batch-size", "4096"]),
    "optimizer_bound.py": ("optimizer", "optimizer", ["--params", "300"], ["--params", "600"]),
    "tiny_kernels.py": ("host_overhead", "host_overhead", [], []),
    "leak.py": ("memory_grows", "memory_grows", ["--batch-size", "256"],
                ["--batch-size", "1024"]),
    "compute_bound.py": ("device_compute", "device_compute", [],
                         ["--width", "4096", "--batch-size", "8192"]),
    "membw_bound.py": ("memory_bandwidth", "memory_bandwidth", ["--rows", "2048"],
                       ["--rows", "32768", "--dim", "4096"]),
    "hf_trainer.py": ("", "", ["--layers", "1", "--seq", "64", "--batch-size", "4"],
                      ["--layers", "2", "--seq", "256", "--batch-size", "16"]),
    # last: on CUDA it compiles with inductor, up to Dynamo's recompile limit (8 graphs)
    "recompile.py": ("recompiling", "recompiling", ["--backend", "aot_eager"], []),
}


def matches(expected: str, t: dict) -> str:
    if not expected:
        return "n/a"
    if expected == "memory_grows":
        return "yes" if t.get("memory_grows") else "no"
    if expected.startswith("not "):
        return "yes" if t.get("verdict") != expected[4:] else "no"
    return "yes" if t.get("verdict") == expected else "no"


def stopping_columns(d: Path, contract: str | None, budget: str, total_s: float) -> dict:
    """How a budgeted run stopped, from its evidence: the contract, the stop (decided /
    budget / fixed), what it lacked, the timed steps, the pre-flight estimate and its error
    against the command's wall (%), and whether the wall kept to an adaptive budget."""
    if not contract:
        return {}
    from perflab.kit.sampling import parse_budget_s

    ev_path = d / "evidence.json"
    ev = json.loads(ev_path.read_text()) if ev_path.is_file() else {"status": {}, "steps": []}
    st = ev["status"].get("stopping") or {}
    walls = [r["wall_ms"] for r in ev["steps"] if r["kind"] in ("observed", "bare")
             and r["wall_ms"] is not None]
    est = st.get("estimate_s")
    b = parse_budget_s(budget)
    return {"contract": contract, "budget_s": b,
            "stopped": st.get("stopped") or ("fixed" if contract == "fixed" else "none"),
            "lacking": "; ".join(st.get("lacking", [])) if st.get("stopped") == "budget" else "",
            "timed_steps": len(walls),
            # the machine's load shows here first: compare the two contracts' step times
            "step_ms_median": round(statistics.median(walls), 3) if walls else None,
            "estimate_s": round(est, 1) if est else None,
            "estimate_err_pct": round(100 * (est - total_s) / total_s) if est else None,
            "within_budget": (total_s <= b) if contract == "adaptive" else None}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT", "bench_run"))
    p.add_argument("--sizes", choices=("cpu", "cuda"), default=None,
                   help="argument set (default: cuda when a GPU is visible)")
    p.add_argument("--steps", type=int, default=16, help="timed steps per script (>= 16: two hooks-on/off pairs, the observers' cost)")
    p.add_argument("--only", help="comma-separated script names")
    p.add_argument("--timeout", type=int, default=150, help="seconds per script")
    p.add_argument("--contract", choices=("fixed", "adaptive", "both"),
                   help="run under --budget with this stopping contract instead of --steps")
    p.add_argument("--budget", default="60s", help="with --contract: perflab run's --budget")
    args = p.parse_args()
    contracts = {None: [None], "both": ["fixed", "adaptive"]}.get(args.contract,
                                                                  [args.contract])
    if args.sizes is None:
        import torch

        args.sizes = "cuda" if torch.cuda.is_available() else "cpu"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    names = args.only.split(",") if args.only else list(CASES)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x))
    rows = []
    for name, contract in ((n, c) for n in names for c in contracts):
        cpu_exp, cuda_exp, cpu_args, cuda_args = CASES[name]
        expected = cuda_exp if args.sizes == "cuda" else cpu_exp
        extra = cuda_args if args.sizes == "cuda" else cpu_args
        d = out / (Path(name).stem + (f"-{contract}" if contract else ""))
        d.mkdir(parents=True, exist_ok=True)
        # perflab.attach.run, not the `perflab` command: it needs none of the pipeline's
        # packages (the H200 has no Snakemake)
        how = (["--contract", contract, "--budget", args.budget] if contract else
               ["--steps", str(args.steps)])
        cmd = [sys.executable, "-m", "perflab.attach.run", *how, "--out", str(d), "--",
               "python", str(SCRIPTS / name), *extra]
        print(f"bench_run: {name} ...", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        with open(d / "output.log", "w") as log:
            try:
                rc = subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    timeout=args.timeout, cwd=d).returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
        total = time.perf_counter() - t0
        t = json.loads((d / "timings.json").read_text()) if (d / "timings.json").is_file() \
            else {}
        row = {"script": name, "sizes": args.sizes, "expected": expected or "(none)",
               "verdict": t.get("verdict", f"none (rc {rc})"),
               "memory_grows": t.get("memory_grows"), "right": matches(expected, t),
               "command_to_verdict_s": round(total, 1),
               **{k: round(t[k], 1) if t.get(k) is not None else None
                  for k in ("perflab_start_s", "startup_s", "observed_s", "child_end_s",
                            "verdict_s")},
               "observers_cost_pct": (round(t["observers_cost_pct"], 1)
                                      if t.get("observers_cost_pct") is not None else None),
               "cost_resolved": t.get("observers_cost_resolved"), "rc": rc,
               **stopping_columns(d, contract, args.budget, total)}
        rows.append(row)
        print("  " + ", ".join(f"{k}={v}" for k, v in row.items() if k != "script"),
              file=sys.stderr, flush=True)
        # after every script: a run cut short keeps the table of what finished
        with open(out / "bench_run.csv", "w", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    right = [r for r in rows if r["right"] != "n/a"]
    print(f"bench_run: {sum(r['right'] == 'yes' for r in right)}/{len(right)} verdicts as "
          f"known; table {out / 'bench_run.csv'}")
    for r in rows:
        print(f"{r['script']:20} {r['verdict']:18} expected {r['expected']:20} "
              f"{r['right']:4} total {r['command_to_verdict_s']} s (perflab start "
              f"{r['perflab_start_s']}, script start-up {r['startup_s']}, observed "
              f"{r['observed_s']}, child end {r['child_end_s']}, verdict {r['verdict_s']}) cost "
              f"{r['observers_cost_pct']}% resolved={r['cost_resolved']}"
              + (f" [{r['contract']}: stopped {r['stopped']} {r['lacking']}, "
                 f"{r['timed_steps']} timed steps, estimate {r['estimate_s']} s "
                 f"({r['estimate_err_pct']} %), within budget {r['within_budget']}]"
                 if r.get("contract") else ""))
    by = {(r["script"], r.get("contract")): r for r in rows}
    for name in names:  # under --contract both: the two contracts' verdicts side by side
        f, a = by.get((name, "fixed")), by.get((name, "adaptive"))
        if f and a:
            same = (f["verdict"], f["memory_grows"]) == (a["verdict"], a["memory_grows"])
            print(f"{name:20} fixed {f['verdict']} in {f['command_to_verdict_s']} s, adaptive "
                  f"{a['verdict']} in {a['command_to_verdict_s']} s: "
                  + ("same verdict" if same else "VERDICTS DIFFER"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
