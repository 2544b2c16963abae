"""``perflab``: a thin command line over the Snakemake pipeline.

    perflab check mypkg.models:make_step           # build it and run one step: a clear error or OK
    perflab diagnose mypkg.models:make_step        # the verdict, with its evidence rows (and W01)
    perflab diagnose mypkg.models:make_step --report   # and the ledger, figures and report
    perflab whatif mypkg.models:make_step          # each intervention that applies, measured
    perflab bench-pipeline [--run] [--directory D] # a run's wall: measurement vs overhead
    perflab run [--steps N] -- python train.py [args]   # attach to an unmodified script

``diagnose`` resolves the config exactly as the Snakefile does (so a bad key
or target stops here with the same message), runs ``perflab check`` in a child
process on the resolved device (a model that raises is reported with the target
and the phase, before any job starts; the child's CUDA context is gone before
the first measured job), then runs Snakemake on the experiments the verdict
reads, to the diagnosis alone (``--report``: also the ledger, claims, figures
and report), with ``--keep-going`` (one experiment that fails does not stop the
others), under the diagnose contract (``config/diagnose.yaml``, beneath the
user's config files), and prints the verdict — where a job failed, drawn from
what ran, naming each experiment that did not finish and why (its log's last
line).
Its last step is W01 (``--no-whatif`` skips it): every intervention that applies, measured
in a second Snakemake invocation after the verdict is printed, then the diagnosis again.
``whatif`` runs W01 alone and prints its table. Extra arguments after ``--`` go to Snakemake
unchanged.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

_STARTED_UNIX = time.time()  # `perflab run` splits its command's time from here

from perflab.experiments.catalogue import EXPERIMENTS  # noqa: E402 (after the start time)
from perflab.kit import sampling  # noqa: E402
from perflab.pipeline import budget as budgetmod  # noqa: E402
from perflab.pipeline import config as cfgmod  # noqa: E402
from perflab.pipeline import preflight  # noqa: E402
from perflab.views import console, current, partial  # noqa: E402

if TYPE_CHECKING:  # torch: imported by the commands that build a workload here, not on every
    # command's start (1.7 s on this CPU, before diagnose's fork server and pre-flight start)
    from perflab.instruments.workloads import Workload

ROOT = Path(__file__).resolve().parents[1]
#: the experiments whose rows the verdict reads (perflab/views/diagnose.py), by device, as each
#: declares (``Experiment.diagnosis``): C00 (the A/A floor a near-threshold verdict is judged
#: by), E05's phases, R01's roofline and R02's trace (the step's syncs and the device's idle
#: time); on CUDA also E06 (device time with the device kept ahead: host-exposed time beside
#: R02's launch wait). E01, E07 and E13 are read when a run has them; the verdict does not
#: need them.
DIAGNOSE_RUN = {kind: ",".join(eid for eid, e in EXPERIMENTS.items() if kind in e.diagnosis)
                for kind in ("cuda", "cpu")}
#: the diagnose contract, merged beneath the user's config files
DIAGNOSE_CONFIG = ROOT / "config" / "diagnose.yaml"
#: the what-if step of diagnose (off with --no-whatif), and what `perflab whatif` runs
WHATIF = "W01"
#: what `perflab whatif` runs: W01 and the calibration whose A/A floor its A/Bs are held to
WHATIF_RUN = f"C00,{WHATIF}"


def _only(args) -> list[str] | None:
    """The interventions ``--only`` names (comma-separated), or None for all."""
    only = getattr(args, "only", None)
    return [n.strip() for n in only.split(",") if n.strip()] if only else None


def _configfiles(args) -> list:
    # what-if reads of C00 only its A/A floor, as the verdict does: on a CPU GPT-2 its other
    # parts (planted 2x, peers, process and profiler floors) were 46 s of a 3-minute budget;
    # one contract also lets a what-if after a diagnose reuse its C00
    own = [DIAGNOSE_CONFIG] if args.command in ("diagnose", "whatif") else []
    return own + [Path(f).resolve() for f in args.configfile]


def _config(args) -> dict:
    overrides = {"workload": args.target, "device": args.device}
    if _only(args):
        overrides["experiments"] = {WHATIF: {"interventions": _only(args)}}
    if getattr(args, "scale", None):
        overrides["scale"] = args.scale
    try:
        if args.command == "diagnose" and not args.run:
            device = cfgmod.load(_configfiles(args), overrides)["resolved_device"]
            args.run = DIAGNOSE_RUN["cuda" if device.startswith("cuda") else "cpu"]
        if getattr(args, "run", None):
            overrides["run"] = args.run
        return cfgmod.load(_configfiles(args), overrides)
    except cfgmod.ConfigError as exc:
        sys.exit(f"perflab: {exc}")


def _check(cfg: dict, timeout_s: float | None = None) -> Workload:
    """Build and step the workload here; one message naming the target for a failure, a
    builder that calls sys.exit, or one that blocks past ``timeout_s`` (SIGALRM: the
    main thread of a POSIX process; elsewhere no time-out)."""
    import signal

    from perflab.instruments import workloads

    target, params = cfgmod.workload_spec(cfg)

    class Expired(BaseException):  # not an Exception: no handler of the builder's keeps it
        pass

    def expired(*_):
        raise Expired

    alarm = timeout_s and hasattr(signal, "SIGALRM")
    if alarm:
        before = signal.signal(signal.SIGALRM, expired)
        signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        return workloads.check(target, cfg["resolved_device"], **params)
    except workloads.WorkloadError as exc:
        sys.exit(f"perflab: {exc}")
    except SystemExit as exc:
        sys.exit(f"perflab: workload {target!r} called sys.exit({exc.code!r}) while being "
                 "built or stepped")
    except Expired:
        sys.exit(f"perflab: workload {target!r}: building and stepping it did not finish "
                 f"within {timeout_s:g} s (--timeout): does the builder or the step block "
                 "(a lock, input(), a network wait)?")
    finally:
        if alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, before)


def check(args) -> int:
    cfg = _config(args)
    w = _check(cfg, args.timeout)
    print(f"{args.target}: OK on {cfg['resolved_device']} — {w.description}, batch "
          f"{w.batch_size}, input {w.input_shape()}, {w.parameter_count()} parameters, "
          f"optimizer {w.optimizer_name}")
    if _only(args):
        _check_interventions(cfg, w, _only(args))
    return 0


def _check_interventions(cfg: dict, w: Workload, names: list[str]) -> None:
    """Each named intervention applies to the built workload, or one error naming it."""
    import torch

    from perflab.experiments.w01_whatif import transforms, whatif

    params = cfg["experiments"][WHATIF]
    reasons = whatif.plan(transforms.probe(w, torch.device(cfg["resolved_device"]), params))
    bad = [n for n in names if reasons[n]]
    if bad:
        usable = [n for n, why in reasons.items() if not why]
        sys.exit(f"perflab: intervention {bad[0]!r} does not apply to {cfg['workload']}: "
                 f"{reasons[bad[0]]} (these apply here: {', '.join(usable) or 'none'})")


def _passed_configfiles(snakemake_args: list[str]) -> list[str]:
    """The config files Snakemake arguments name (``--configfile(s) A B``, ``--configfile=A``)."""
    files, taking = [], False
    for a in snakemake_args:
        flag, eq, value = a.partition("=")
        if flag in ("--configfile", "--configfiles"):
            taking = not eq
            files += [value] if eq else []
        elif taking and not a.startswith("-"):
            files.append(a)
        else:
            taking = False
    return files


def _read_passed_configfiles(snakemake_args: list[str]) -> None:
    """Read each config file passed on to Snakemake strictly first: Snakemake parses
    ``--configfile`` before any workflow code runs and names neither the file nor the line
    of a YAML error (``snakemake.settings.types.ConfigSettings``)."""
    for f in _passed_configfiles(snakemake_args):
        try:
            cfgmod.load_yaml(f)
        except cfgmod.ConfigError as exc:
            sys.exit(f"perflab: {exc}")


def _env() -> dict:
    """This environment, with the user's working directory and the project importable:
    jobs and the pre-flight are fresh processes that import the user's module too."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path.cwd()), str(ROOT), env.get("PYTHONPATH")) if p)
    return env


@contextlib.contextmanager
def _fork_server(cfg: dict, env: dict, workdir: Path, dry: bool = False):
    """The run's fork server (perflab.core.forkserver), started now, before the pre-flight:
    its imports (11 s on an H100's host) then overlap the pre-flight's, and the first job
    finds it serving; started by the workflow's onstart after the pre-flight, it was still
    importing when the first job came, which ran in a fresh interpreter (C00: 28 s, 14 of
    them its own work). The workflow finds it in ``env`` and starts none; it stops when the
    command's Snakemake invocations are done."""
    from perflab.core import forkserver

    if dry or str(cfg.get("fork_server", True)).lower() != "true" \
            or env.get(forkserver.ENV_SOCKET):
        yield
        return
    sock = os.path.join(tempfile.gettempdir(), f"perflab-fork-{os.getpid()}.sock")
    log = workdir / "logs" / cfgmod.result_dir(cfg).name / "fork_server.log"
    proc = forkserver.start(sock, log, str(cfg["device"]), budgetmod.JOB_IMPORTS)
    env[forkserver.ENV_SOCKET] = sock
    try:
        yield
    finally:
        forkserver.stop(proc, sock)


def _preflight(args, cfg: dict, env: dict) -> int:
    """Build the workload and step it once in a child process: 0, or the error printed.

    The answer goes to the workflow's onstart (``env``), which would otherwise run the same
    child again. With ``--only``, the `perflab check` child also checks that each named
    intervention applies (the onstart then pre-flights again)."""
    if _only(args) and getattr(args, "budget", None) is not None:
        print("perflab: --budget needs the pre-flight's step time, which --only's check does "
              "not report: give one of them", file=sys.stderr)
        return 1
    if _only(args):
        pre = [sys.executable, "-m", "perflab", "check", args.target, "--device", args.device,
               "--only", ",".join(_only(args))]
        pre += ["--scale", args.scale] if args.scale else []
        pre += [x for f in args.configfile for x in ("--configfile", str(Path(f).resolve()))]
        try:
            return subprocess.call(pre, env=env, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(f"perflab: workload {args.target!r}: `perflab check` did not finish within "
                  f"{args.timeout:g} s and was stopped (--timeout)", file=sys.stderr)
            return 1
    spec = preflight.workload_spec(cfg)
    t0 = time.perf_counter()
    # a --budget's estimate costs R01 and R02 from probes of their instruments (a second)
    probe = None if getattr(args, "budget", None) is None else \
        {**(os.environ if env is None else env), preflight.PROBE_ENV: "1",
         preflight.PROBE_THREADS_ENV: str(_job_threads(args, cfg))}
    answer = preflight.run_child(spec, timeout_s=args.timeout, env=probe or env)
    child_s = time.perf_counter() - t0
    if not answer["ok"]:
        print(f"perflab: {answer['error']}", file=sys.stderr)
        return 1
    print(f"{args.target}: OK on {answer['device']} — {answer['description']}, batch "
          f"{answer['batch']}" + (f", a step {answer['step_ms']:.3g} ms" if answer["step_ms"]
                                  else ""))
    libraries = answer.pop(preflight.LIBRARY_MODULES, None) or []
    env.update(preflight.done_env(spec, answer))
    code = _split_budget(args, cfg, answer, child_s, env)
    _preload_libraries(env, libraries)
    return code


def _preload_libraries(env: dict, names: list[str]) -> None:
    """Have the run's fork server import the libraries the pre-flight's build imported, so
    each job forked after pays its build and first step, not their import (the budget's
    split costs a job's start at the pre-flight's second check, made with them imported)."""
    from perflab.core import forkserver

    sock = env.get(forkserver.ENV_SOCKET)
    if names and sock:
        forkserver.preload(sock, names)


def _job_threads(args, cfg: dict) -> int:
    """The intra-op threads a local job runs with: the config's, or (``threads: auto``) the
    cores Snakemake gives it, every one of ``--cores`` (workflow/rules/common.smk)."""
    threads = cfg.get("threads")
    return threads if isinstance(threads, int) and threads > 0 else int(getattr(args, "cores", 1))


def _budget_eids(args, cfg: dict) -> list[str]:
    """The measuring jobs a --budget is split over: diagnose's (W01 too unless --no-whatif),
    or whatif's."""
    eids = list(cfg["resolved_experiments"])
    if args.command == "diagnose" and not args.no_whatif and WHATIF not in eids:
        eids.append(WHATIF)
    return eids


def _measured_wall_s(args, cfg: dict, eid: str) -> float | None:
    """The job's own wall time in an earlier run here (its provenance's ``wall_s``): a
    measurement of its fixed count on this machine, better than the contract's estimate."""
    import json

    path = Path(args.directory).resolve() / cfgmod.experiment_outputs(cfg, eid)["provenance"]
    try:
        prov = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if (prov.get("contract") or {}).get("sampling"):
        return None  # measured under a budget: not what its fixed count takes
    wall = prov.get("wall_s")
    return float(wall) if isinstance(wall, (int, float)) and wall > 0 else None


def _plain_start_s(answer: dict, child_s: float) -> float:
    """A fresh interpreter's start that builds nothing (Snakemake's, the diagnosis view's):
    the pre-flight child's wall less its device start, check, compiling, waits and steps."""
    spent = sum(float(answer.get(k) or 0.0) for k in (
        "device_init_s", "check_s", "check_warm_s", "server_wait_s", "lock_wait_s",
        "steps_s"))
    return max(child_s - spent, 0.0)


def _split_budget(args, cfg: dict, answer: dict, child_s: float, env: dict | None = None
                  ) -> int:
    """With --budget: what is left of it after the pre-flight, split across the jobs from the
    step time and start cost the pre-flight measured, printed, and handed to the jobs as
    ``sampling`` (``args.sampling``: a config file beside the results, the last one read)."""
    if getattr(args, "budget", None) is None:
        return 0
    if not answer.get("step_ms"):
        print("perflab: --budget needs a timed training step and the pre-flight timed none "
              "(no optimizer, or no steady step): run without --budget", file=sys.stderr)
        return 1
    spent = time.time() - _STARTED_UNIX
    fork = str(cfg.get("fork_server", True)).lower() == "true"
    eids = _budget_eids(args, cfg)
    contracts = {e: cfgmod.contract(cfg, e) for e in eids}
    step_ms = float(answer.get("step_min_ms") or answer["step_ms"])
    sized = budgetmod.sized_for_step(contracts, step_ms)  # e.g. a long step's A/A blocks
    for e, params in sized.items():
        contracts[e]["params"].update(params)
    fixed = preflight.estimate_s(contracts.values(), step_ms, answer.get("probes"))
    # an experiment of claim_processes runs that many processes, each its fixed count
    procs = {e: 1 + sum(1 for x, _ in cfgmod.process_jobs(cfg) if x == e) for e in eids}
    fixed = {e: procs[e] * (_measured_wall_s(args, cfg, e) or fixed.get(e, 0.0))
             for e in eids}
    least = budgetmod.least_s(contracts, fixed)
    from perflab.core import forkserver

    sock = (env or {}).get(forkserver.ENV_SOCKET)
    if fork and sock:
        # a job's start is the server's probe fork: wait for it where the pre-flight beat the
        # server (on an H100 a 13 s pre-flight of a 15 ms step did, and each start was then
        # costed at the pre-flight's cold check, 4.6-5.9 s, where a fork took 1 s: refused)
        forkserver.wait_ready(sock, preflight.SERVER_WAIT_S)
    start = budgetmod.start_s(answer, child_s, fork, forkserver.probe_s(sock) if sock else None)
    # where the pre-flight's seconds went, so a slow one (or a refused budget) says which
    # part was slow
    split_line = (f"  pre-flight child {child_s:.1f} s: {preflight.child_split(answer, child_s)}"
                  f"; start-up a job {start:.1f} s" + (" (a fork of the run's server: its "
                                                      "probe and a check)" if fork else "")
                  + ("; C00's A/A blocks of {} calls (about {:.1f} s each at {:.0f} ms a step)"
                     .format(sized["C00"]["aa_inner"],
                             sized["C00"]["aa_inner"] * step_ms / 1e3, step_ms)
                     if "C00" in sized else ""))
    # more starts than experiments: their further processes, which build, step and compile
    # as the others do; Snakemake and the diagnosis view, which only start an interpreter
    try:
        shares = budgetmod.split(args.budget - spent, fixed, start,
                                 other_jobs=2, other_start_s=_plain_start_s(answer, child_s),
                                 further_jobs=sum(procs.values()) - len(procs),
                                 least=least)
    except budgetmod.BudgetError as exc:
        print(split_line, file=sys.stderr)
        print(f"perflab: --budget {args.budget:.0f} s is too small: the pre-flight took "
              f"{spent:.0f} s of it; {exc}: give --budget {math.ceil(spent + exc.need_s)}s or "
              "more (or no --budget: the fixed counts)", file=sys.stderr)
        return 1
    high = budgetmod.estimate_s(shares, fixed, least)
    print(budgetmod.line(args.budget, shares, spent, high,
                         budgetmod.estimate_low_s(shares, fixed, least)))
    print(split_line)
    if spent + high > args.budget * 1.05:
        print(f"perflab: the adaptive jobs' first rounds alone are estimated beyond --budget "
              f"{args.budget:.0f} s (from the pre-flight's step time): the run may take about "
              f"{spent + high:.0f} s", file=sys.stderr)
    args.sampling = Path(args.directory).resolve() / cfgmod.result_dir(cfg) / "sampling.yaml"
    args.sampling.parent.mkdir(parents=True, exist_ok=True)
    budgetmod.write_config(args.sampling, shares, args.budget, procs, sized)
    budgetmod.write_estimate(args.sampling.with_name(budgetmod.ESTIMATE_FILE), shares, fixed,
                             start, answer.get("probes"))
    return 0


def _snakemake(args, cfg: dict, run: str, targets: list[str], snakemake_args: list[str],
               env: dict | None = None) -> tuple[int, Path]:
    """The pre-flight (`perflab check`, in a child process), then Snakemake on ``run``.

    ``env``: the environment of a pre-flight that already answered (not run again)."""
    # The pre-flight runs in a child process. Run here, it would leave this process holding
    # a CUDA context, the model and its optimizer state for the whole run, and every
    # measured job would share the device with it (the validity gate flagged exactly that
    # on the H200).
    _read_passed_configfiles(snakemake_args)
    workdir = Path(args.directory).resolve()
    if env is not None:
        return _call_snakemake(args, _command(args, workdir, run, targets, snakemake_args),
                               env), workdir
    env = _env()
    with _fork_server(cfg, env, workdir, _dry(args, snakemake_args)):
        rc = _preflight(args, cfg, env)
        if rc != 0:
            args.preflight_failed = True  # nothing ran: no verdict to draw (its line said why)
            return rc, workdir
        return _call_snakemake(args, _command(args, workdir, run, targets, snakemake_args),
                               env), workdir


def _command(args, workdir: Path, run: str, targets: list[str],
             snakemake_args: list[str]) -> list[str]:
    """The Snakemake command line of one invocation."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"),
           "--directory", str(workdir), "--cores", str(args.cores), "--keep-going",
           *targets]  # before --config, whose values would otherwise swallow them
    files = [*_configfiles(args), *([args.sampling] if getattr(args, "sampling", None) else [])]
    if files:
        cmd += ["--configfile", *map(str, files)]
    cmd += ["--config", f"workload={args.target}", f"run={run}", f"device={args.device}"]
    if args.scale:
        cmd.append(f"scale={args.scale}")
    if _only(args):
        cmd.append("experiments={%s: {interventions: [%s]}}" % (WHATIF, ", ".join(_only(args))))
    return cmd + snakemake_args + (["-n"] if getattr(args, "dry_run", False) else [])


def _dry(args, snakemake_args: list[str]) -> bool:
    return getattr(args, "dry_run", False) or "-n" in snakemake_args \
        or "--dry-run" in snakemake_args


def _call_snakemake(args, cmd: list[str], env: dict) -> int:
    """Snakemake's console compact (one line per finished job), whole with -v or a dry run
    (``perflab.views.console``); the command itself is printed with -v."""
    verbose = getattr(args, "verbose", False) or _dry(args, cmd)
    if getattr(args, "verbose", False):
        print("perflab: " + " ".join(cmd), file=sys.stderr)
    return console.run(cmd, env=env, verbose=verbose)


def diagnose(args, snakemake_args: list[str]) -> int:
    """The verdict, printed as soon as its evidence is in; then, unless --no-whatif, W01's
    interventions measured and the diagnosis printed again with them (one pre-flight)."""
    cfg = _config(args)
    run = args.run
    # `all` leaves W01 out (it runs only when asked), so all,W01 is how it joins
    whatif_after = not args.no_whatif and WHATIF not in run.upper().replace(" ", "").split(",")
    if not whatif_after or _dry(args, snakemake_args):
        return _diagnose_run(args, cfg, f"{run},{WHATIF}" if whatif_after else run,
                             snakemake_args)
    _read_passed_configfiles(snakemake_args)
    env = _env()
    with _fork_server(cfg, env, Path(args.directory).resolve(), _dry(args, snakemake_args)):
        return _diagnose_then_whatif(args, cfg, run, snakemake_args, env)


def _diagnose_then_whatif(args, cfg: dict, run: str, snakemake_args: list[str],
                          env: dict) -> int:
    rc = _preflight(args, cfg, env)
    if rc != 0:
        return rc
    rc = _diagnose_run(args, cfg, run, snakemake_args, env)
    if rc != 0:
        print(f"perflab: {WHATIF} not run: a job failed (its log is named above); the verdict "
              "above is drawn from what ran", file=sys.stderr)
        return rc
    print(f"perflab: the verdict above stands on its evidence; now {WHATIF} measures each "
          "intervention that applies (--no-whatif skips this), and the diagnosis is printed "
          "again with them", file=sys.stderr)
    return _diagnose_run(args, cfg, f"{run},{WHATIF}", snakemake_args, env)


def _diagnose_run(args, cfg: dict, run: str, snakemake_args: list[str],
                  env: dict | None = None) -> int:
    """One Snakemake invocation for the diagnosis of ``run``, its verdict printed."""
    md_rel = cfgmod.result_dir(cfg) / "diagnosis.md"
    # the diagnosis alone by default: no ledger, claims, figures or report notebook
    started = time.time()
    eids = [*cfg["resolved_experiments"], *([WHATIF] if WHATIF in run.split(",") else [])]
    # each result file a target: a deleted one is measured again (config.result_files)
    targets = [] if args.report else [str(md_rel), *cfgmod.result_files(cfg, eids)]
    rc, workdir = _snakemake(args, cfg, run, targets, snakemake_args, env)
    if getattr(args, "preflight_failed", False):
        return rc  # a verdict of nothing measured would only restate the pre-flight's error
    md = workdir / md_rel
    if rc != 0 and not _dry(args, snakemake_args) \
            and not (md.is_file() and md.stat().st_mtime >= started):
        # a job failed, so the diagnosis rule never ran: draw the verdict from what did
        _partial_diagnosis(cfg, workdir, started)
    if md.is_file() and (rc == 0 or md.stat().st_mtime >= started):
        eids = cfg["resolved_experiments"]
        other = current.other_code(cfg, eids, workdir)
        if other:  # never a verdict of other code printed as this code's
            for eid, why in other.items():
                print(f"perflab: {eid} was {why}", file=sys.stderr)
            print(f"perflab: no verdict: {md} rests on results of other code or parameters "
                  "than these; run again to measure these (their jobs re-run)", file=sys.stderr)
            return rc or 1
        print(md.read_text())
        print(current.measured_line(cfg, eids, workdir))
        report = md.parent / "report.html"
        print(f"evidence rows: {md.with_suffix('.csv')}"
              + (f"\nreport: {report}" if args.report and report.is_file() else
                 " (--report for the ledger, figures and report)"))
    return rc


def whatif(args, snakemake_args: list[str]) -> int:
    """W01 with C00 (its A/A floor: no intervention is called resolved without one): its
    table, with the bounds of any localization this directory holds."""
    args.run = WHATIF_RUN
    cfg = _config(args)
    md = Path(cfgmod.experiment_outputs(cfg, WHATIF)["md"])
    rc, workdir = _snakemake(args, cfg, WHATIF_RUN,
                             [str(md), *cfgmod.result_files(cfg, WHATIF_RUN.split(","))],
                             snakemake_args)
    if rc == 0 and (workdir / md).is_file():
        other = current.other_code(cfg, [WHATIF], workdir)
        if other:  # never another code's measurements shown as this code's
            print(f"perflab: no table: {WHATIF} was {other[WHATIF]}", file=sys.stderr)
            return 1
        print((workdir / md).read_text())
        print(current.measured_line(cfg, [WHATIF], workdir))
        print(f"rows and each intervention's job: {(workdir / md).parent}")
    return rc


def _partial_diagnosis(cfg: dict, workdir: Path, started: float) -> None:
    """The verdict from the result files that exist (the workflow's paths are relative)."""
    here = Path.cwd()
    os.chdir(workdir)
    try:
        partial.diagnosis(cfg, cfg["resolved_experiments"], f"logs/{cfg['resolved_tag']}",
                          started)
    except Exception as exc:  # nothing to draw from, or unreadable rows: say so, keep rc
        print(f"perflab: no partial diagnosis ({type(exc).__name__}: {exc})", file=sys.stderr)
    finally:
        os.chdir(here)


def bench_pipeline(args, snakemake_args: list[str]) -> int:
    """Print where one invocation's time went (``perflab.views.bench_pipeline``); with
    ``--run``, run the pipeline first (``--cores 1`` and the arguments after ``--``)."""
    from perflab.views import bench_pipeline as bench

    workdir = Path(args.directory).resolve()
    if args.run:
        _read_passed_configfiles(snakemake_args)
        cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"),
               "--directory", str(workdir), "--cores", "1", *snakemake_args]
        rc = _call_snakemake(args, cmd, _env())
        if rc != 0:
            return rc
    try:
        b = bench.breakdown(workdir, args.log)
    except (FileNotFoundError, ValueError) as exc:
        sys.exit(f"perflab: {exc}")
    print(bench.format_breakdown(b))
    if args.jobs_csv:
        import pandas as pd

        pd.DataFrame(bench.jobs_table(b)).to_csv(args.jobs_csv, index=False)
        print(f"per job: {args.jobs_csv}")
    return 0


def _workload_args(s, name: str) -> None:
    """check, diagnose and whatif: a workload and the contract it is measured under."""
    s.add_argument("target", help="a name under `workloads` in the config, a registered "
                   "builder, or package.module:function (the current directory is importable)")
    s.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    s.add_argument("--timeout", type=_positive(float), default=preflight.TIMEOUT_S,
                   help="seconds the pre-flight (build, check, a few steps) may take before it "
                   f"is stopped, naming the target (default {preflight.TIMEOUT_S})")
    s.add_argument("--scale", help="a name under `scales` (default: auto)")
    s.add_argument("--configfile", action="append", default=[],
                   help="YAML merged over config/config.yaml (repeatable)")
    s.add_argument("--only", help="interventions of W01, comma-separated (default: all "
                   "that apply); each must apply to the workload")
    if name == "diagnose":
        s.add_argument("--run", help="experiments to run (default: "
                       f"{DIAGNOSE_RUN['cuda']} on CUDA, {DIAGNOSE_RUN['cpu']} on a CPU, "
                       f"then {WHATIF}; 'all' for every one)")
        s.add_argument("--report", action="store_true",
                       help="also build the ledger, claims, figures and HTML report")
        s.add_argument("--no-whatif", action="store_true",
                       help=f"skip the what-if step ({WHATIF}: each intervention measured)")
    if name != "check":
        s.add_argument("--budget", type=sampling.budget_arg, default=None,
                       help="wall time from the command to the verdict (90, 90s, 1.5m), split "
                       "across the jobs from the pre-flight's step time; each job samples "
                       "until its numbers are decided or its share is spent (default: none)")
        _snakemake_args(s)


def _snakemake_args(s) -> None:
    """The options of a subcommand that runs Snakemake."""
    s.add_argument("--cores", type=_positive(int), default=1,
                   help="cores Snakemake may use (default: 1)")
    s.add_argument("--directory", default=".", type=_directory,
                   help="where results/, figures/ and logs/ go (default: here)")
    s.add_argument("-n", "--dry-run", action="store_true",
                   help="show the jobs Snakemake would run, run none")
    s.add_argument("-v", "--verbose", action="store_true",
                   help="show Snakemake's own output (default: one line per finished job; "
                   "the rest is in .snakemake/log/)")


def _bench_args(s) -> None:
    s.add_argument("--directory", default=".",
                   help="the run's working directory, holding .snakemake/ (default: here)")
    s.add_argument("--log", help="one .snakemake/log/*.snakemake.log (default: the newest "
                   "in which a job finished)")
    s.add_argument("--run", action="store_true", help="run `snakemake --cores 1` there first "
                   "(arguments after -- are passed on)")
    s.add_argument("--jobs-csv", help="also write one row per job to this CSV")
    s.add_argument("-v", "--verbose", action="store_true",
                   help="with --run: show Snakemake's own output")


#: the subcommands, in the order help lists them: name -> (handler, one-line help, description,
#: its arguments). A new subcommand is one more entry (its handler takes (args, extra), extra
#: being the arguments after `--`, which go to Snakemake).
SUBCOMMANDS = {
    "check": (lambda args, extra: check(args),
              "build a workload and run one training step",
              "Build the workload and run one training step on the device: a clear error naming "
              "the field or the phase that failed, or one line saying OK with its size.",
              lambda s: _workload_args(s, "check")),
    "diagnose": (diagnose,
                 "what is the machine waiting for: run the evidence, print the verdict",
                 "Check the workload, run the experiments the verdict reads (C00, E05, R01, R02; "
                 "E06 on CUDA), print the verdict with its evidence, then measure each "
                 f"intervention that applies ({WHATIF}) and print the verdict again beside them. "
                 "Arguments after -- go to Snakemake.",
                 lambda s: _workload_args(s, "diagnose")),
    "whatif": (whatif,
               "measure each intervention that applies (W01)",
               "Of your own script, unchanged: perflab whatif [--budget 3m] -- python "
               "train.py ARGS (its options: python -m perflab.attach.whatif --help; "
               "docs/whatif-script.md). Of a workload TARGET (the form below): measure every "
               "intervention that applies (fused optimizer, autocast, torch.compile, loader "
               "workers, pinned memory, ...), each in a fresh process against the baseline, "
               "ranked by measured gain with their 95% intervals; with a TARGET, arguments "
               "after -- go to Snakemake.",
               lambda s: _workload_args(s, "whatif")),
    "run": (lambda args, extra: run(args, extra),
            "run an unmodified training script, observed: what the machine is waiting for",
            "Run your training script as it is (perflab run -- python train.py ARGS, or "
            "perflab run train.py ARGS, or -m package.module) in a fresh process whose start "
            "installs perflab's observers; steps are found by themselves (optimizer steps), "
            "and after the budget the script is stopped cleanly and the verdict printed, with "
            "the lines of your code it names (docs/run.md).",
            lambda s: _run_args(s)),
    "bench-pipeline": (bench_pipeline,
                       "split a pipeline run's wall time into measurement and overhead",
                       "Split one pipeline invocation's wall time into measurement (the jobs' "
                       "own wall) and overhead: process floor, figures, report, other jobs, "
                       "scheduling.",
                       _bench_args),
}


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as _v

    try:
        return _v("perflab")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


class _Parser(argparse.ArgumentParser):
    """argparse, with "did you mean" on a mistyped subcommand or option."""

    def error(self, message: str):
        import difflib
        import re

        m = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if m:
            choices = re.findall(r"'([^']*)'", m.group(2))
            near = difflib.get_close_matches(m.group(1), choices, n=1)
            if near:
                message += f"; did you mean {near[0]!r}?"
        m = re.search(r"unrecognized arguments: (.*)", message)
        if m:
            options = {o for a in _all_actions(self) for o in a.option_strings}
            for word in m.group(1).split():
                near = difflib.get_close_matches(word, options, n=1)
                if word.startswith("-") and near:
                    message += f"; did you mean {near[0]!r} (for {word!r})?"
        super().error(message)


def _all_actions(p: argparse.ArgumentParser):
    for a in p._actions:
        yield a
        if isinstance(a, argparse._SubParsersAction):
            for sp in a.choices.values():
                yield from _all_actions(sp)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="perflab", description="\n\n".join(__doc__.split("\n\n")[:2])
                .replace("``", ""),
                epilog="Each COMMAND has its own --help. The documentation: docs/ "
                "(getting-started.md, own-training.md, diagnosis.md).",
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--version", action="version", version=f"perflab {version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (_, helptext, description, add_args) in SUBCOMMANDS.items():
        add_args(sub.add_parser(name, help=helptext, description=description))
    return p


def _positive(kind):
    """An argparse type: a finite number of ``kind`` above zero (``--cores 0`` would make
    Snakemake wait forever for a core; a NaN time-out would never fire)."""
    what = "an integer" if kind is int else "a number"

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not (value > 0 and value != float("inf")):  # also refuses nan
            raise argparse.ArgumentTypeError(f"{text!r} must be a finite number above 0")
        return value

    parse.__name__ = f"positive {kind.__name__}"
    return parse


def _directory(text: str) -> str:
    """A directory, or a path one can be made at (not a file, no NUL)."""
    if not text or "\0" in text:
        raise argparse.ArgumentTypeError("an empty path, or one with a NUL byte")
    p = Path(text)
    if p.exists() and not p.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a file, not a directory")
    return text


def _run_args(s) -> None:
    from perflab.attach import run as attach
    from perflab.attach import whatif as attach_whatif

    attach.add_arguments(s)
    attach_whatif.add_after_run(s)


def run(args, extra: list[str]) -> int:
    from perflab.attach import run as attach
    from perflab.attach import whatif as attach_whatif

    attach.COMMAND_UNIX[0] = _STARTED_UNIX
    return attach_whatif.after_run(args, extra, attach.run_args(args, extra))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # the console script's sys.path starts at its own bin directory, not here (as
    # `python -m perflab`'s does): a workload in the current directory must import
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    extra: list[str] = []
    if argv[:1] == ["whatif"]:
        from perflab.attach import whatif as attach_whatif

        if attach_whatif.is_script_form(argv[1:]):  # a script, not a Workload TARGET
            return attach_whatif.main(argv[1:])
    if argv[:1] == ["run"] and "--" not in argv:
        from perflab.attach import run as attach

        head, extra = attach.split_argv(argv[1:])
        argv = ["run", *head]
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = parser()
    args = p.parse_args(argv)
    if args.command is None:  # `perflab` alone: what it can do, not an error
        p.print_help()
        return 0
    return SUBCOMMANDS[args.command][0](args, extra)


if __name__ == "__main__":
    sys.exit(main())
