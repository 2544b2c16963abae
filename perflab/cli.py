"""``perflab``: a thin command line over the Snakemake pipeline.

    perflab check mypkg.models:make_step           # build it and run one step: a clear error or OK
    perflab diagnose mypkg.models:make_step        # the verdict, with its evidence rows (and W01)
    perflab diagnose mypkg.models:make_step --report   # and the ledger, figures and report
    perflab whatif mypkg.models:make_step          # each intervention that applies, measured
    perflab bench-pipeline [--run] [--directory D] # a run's wall: measurement vs overhead

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
import os
import subprocess
import sys
import time
from pathlib import Path

from perflab import config as cfgmod
from perflab import partial, preflight, workloads

ROOT = Path(__file__).resolve().parents[1]
#: the experiments whose rows the verdict reads (perflab/diagnose.py), by device: C00 first
#: (the A/A floor a near-threshold verdict is judged by), E05's phases, R01's roofline and
#: R02's trace (the step's syncs and the device's idle time); on CUDA also E06 (device time
#: with the device kept ahead: host-exposed time beside R02's launch wait). E01, E07 and E13
#: are read when a run has them; the verdict does not need them.
DIAGNOSE_RUN = {"cuda": "C00,E05,E06,R01,R02", "cpu": "C00,E05,R01,R02"}
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
    own = [DIAGNOSE_CONFIG] if args.command == "diagnose" else []
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


def _check(cfg: dict) -> workloads.Workload:
    target, params = cfgmod.workload_spec(cfg)
    try:
        return workloads.check(target, cfg["resolved_device"], **params)
    except workloads.WorkloadError as exc:
        sys.exit(f"perflab: {exc}")


def check(args) -> int:
    cfg = _config(args)
    w = _check(cfg)
    print(f"{args.target}: OK on {cfg['resolved_device']} — {w.description}, batch "
          f"{w.batch_size}, input {w.input_shape()}, {w.parameter_count()} parameters, "
          f"optimizer {w.optimizer_name}")
    if _only(args):
        _check_interventions(cfg, w, _only(args))
    return 0


def _check_interventions(cfg: dict, w: workloads.Workload, names: list[str]) -> None:
    """Each named intervention applies to the built workload, or one error naming it."""
    import torch

    from perflab import transforms, whatif

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


def _preflight(args, cfg: dict, env: dict) -> int:
    """Build the workload and step it once in a child process: 0, or the error printed.

    The answer goes to the workflow's onstart (``env``), which would otherwise run the same
    child again. With ``--only``, the `perflab check` child also checks that each named
    intervention applies (the onstart then pre-flights again)."""
    if _only(args):
        pre = [sys.executable, "-m", "perflab", "check", args.target, "--device", args.device,
               "--only", ",".join(_only(args))]
        pre += ["--scale", args.scale] if args.scale else []
        pre += [x for f in args.configfile for x in ("--configfile", str(Path(f).resolve()))]
        return subprocess.call(pre, env=env)
    spec = preflight.workload_spec(cfg)
    answer = preflight.run_child(spec, env=env)
    if not answer["ok"]:
        print(f"perflab: {answer['error']}", file=sys.stderr)
        return 1
    print(f"{args.target}: OK on {answer['device']} — {answer['description']}, batch "
          f"{answer['batch']}" + (f", a step {answer['step_ms']:.3g} ms" if answer["step_ms"]
                                  else ""))
    env.update(preflight.done_env(spec, answer))
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
    if env is None:
        env = _env()
        rc = _preflight(args, cfg, env)
        if rc != 0:
            return rc, workdir
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"),
           "--directory", str(workdir), "--cores", str(args.cores), "--keep-going",
           *targets]  # before --config, whose values would otherwise swallow them
    if _configfiles(args):
        cmd += ["--configfile", *map(str, _configfiles(args))]
    cmd += ["--config", f"workload={args.target}", f"run={run}", f"device={args.device}"]
    if args.scale:
        cmd.append(f"scale={args.scale}")
    if _only(args):
        cmd.append("experiments={%s: {interventions: [%s]}}" % (WHATIF, ", ".join(_only(args))))
    cmd += snakemake_args
    print("perflab: " + " ".join(cmd), file=sys.stderr)
    return subprocess.call(cmd, env=env), workdir


def diagnose(args, snakemake_args: list[str]) -> int:
    """The verdict, printed as soon as its evidence is in; then, unless --no-whatif, W01's
    interventions measured and the diagnosis printed again with them (one pre-flight)."""
    cfg = _config(args)
    run = args.run
    # `all` leaves W01 out (it runs only when asked), so all,W01 is how it joins
    whatif_after = not args.no_whatif and WHATIF not in run.upper().replace(" ", "").split(",")
    dry = "-n" in snakemake_args or "--dry-run" in snakemake_args
    if not whatif_after or dry:
        return _diagnose_run(args, cfg, f"{run},{WHATIF}" if whatif_after else run,
                             snakemake_args)
    _read_passed_configfiles(snakemake_args)
    env = _env()
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
    rc, workdir = _snakemake(args, cfg, run, [] if args.report else [str(md_rel)],
                             snakemake_args, env)
    md = workdir / md_rel
    if rc != 0 and "-n" not in snakemake_args and "--dry-run" not in snakemake_args \
            and not (md.is_file() and md.stat().st_mtime >= started):
        # a job failed, so the diagnosis rule never ran: draw the verdict from what did
        _partial_diagnosis(cfg, workdir, started)
    if md.is_file() and (rc == 0 or md.stat().st_mtime >= started):
        print(md.read_text())
        print(f"evidence rows: {md.with_suffix('.csv')}"
              + (f"; ledger and report: {md.parent}" if args.report else
                 " (--report for the ledger, figures and report)"))
    return rc


def whatif(args, snakemake_args: list[str]) -> int:
    """W01 with C00 (its A/A floor: no intervention is called resolved without one): its
    table, with the bounds of any localization this directory holds."""
    args.run = WHATIF_RUN
    cfg = _config(args)
    md = Path(cfgmod.experiment_outputs(cfg, WHATIF)["md"])
    rc, workdir = _snakemake(args, cfg, WHATIF_RUN, [str(md)], snakemake_args)
    if rc == 0 and (workdir / md).is_file():
        print((workdir / md).read_text())
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
    """Print where one invocation's time went (``perflab.bench_pipeline``); with
    ``--run``, run the pipeline first (``--cores 1`` and the arguments after ``--``)."""
    from perflab import bench_pipeline as bench

    workdir = Path(args.directory).resolve()
    if args.run:
        _read_passed_configfiles(snakemake_args)
        cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"),
               "--directory", str(workdir), "--cores", "1", *snakemake_args]
        print("perflab: " + " ".join(cmd), file=sys.stderr)
        rc = subprocess.call(cmd, env=_env())
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


def _bench_parser(sub) -> None:
    s = sub.add_parser("bench-pipeline", help="split a pipeline run's wall time into "
                       "measurement and overhead (process floor, figures, report, scheduling)")
    s.add_argument("--directory", default=".",
                   help="the run's working directory, holding .snakemake/ (default: here)")
    s.add_argument("--log", help="one .snakemake/log/*.snakemake.log (default: the newest "
                   "in which a job finished)")
    s.add_argument("--run", action="store_true", help="run `snakemake --cores 1` there first "
                   "(arguments after -- are passed on)")
    s.add_argument("--jobs-csv", help="also write one row per job to this CSV")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(prog="perflab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name, helptext in (("check", "build a workload and run one training step"),
                           ("diagnose", "run the evidence experiments and print the verdict"),
                           ("whatif", "measure each intervention that applies (W01)")):
        s = sub.add_parser(name, help=helptext)
        s.add_argument("target", help="a name under `workloads` in the config, a registered "
                       "builder, or package.module:function")
        s.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
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
            s.add_argument("--cores", type=int, default=1)
            s.add_argument("--directory", default=".",
                           help="where results/, figures/ and logs/ go (default: here)")
    _bench_parser(sub)
    args = p.parse_args(argv)
    if args.command == "bench-pipeline":
        return bench_pipeline(args, extra)
    if args.command == "check":
        return check(args)
    if args.command == "whatif":
        return whatif(args, extra)
    return diagnose(args, extra)


if __name__ == "__main__":
    sys.exit(main())
