"""``perflab run``: the parent. Starts the observed child, lets its output through, judges.

The script runs in a fresh process (``python -m perflab.attach.bootstrap``) with this
process's environment and working directory; the child writes its evidence to the file
named by ``PERFLAB_ATTACH_EVIDENCE`` (the script's stdout is never parsed). This process
then prints the verdict, and writes beside the evidence the CSV-contract rows, the diagnosis
(Markdown and CSV) and the profiled window's trace.
"""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from perflab.attach import EVIDENCE_ENV, SETTINGS_ENV
from perflab.core.names import PHASE_NOTES

ROOT = Path(__file__).resolve().parents[2]
_PYTHONS = {"python", "python3", Path(sys.executable).name}


#: when this command started (the wall clock; set by perflab.cli before its imports)
COMMAND_UNIX = [time.time()]


class RunError(Exception):
    """Bad input, said in one line."""


def command_of(argv: list[str]) -> list[str]:
    """The script's command without a leading ``python``: ``[script, args]`` or
    ``["-m", module, args]``."""
    argv = list(argv)
    if argv and (Path(argv[0]).name in _PYTHONS or argv[0] == sys.executable):
        argv = argv[1:]
    if not argv:
        raise RunError("no script given: perflab run [options] -- python train.py [args]")
    if argv[0] == "-m":
        if len(argv) < 2:
            raise RunError("-m needs a module: perflab run -- python -m package.module")
        return argv
    if argv[0].startswith("-"):
        raise RunError(f"python option {argv[0]!r} is not supported: give the script "
                       "(or -m module) first")
    return argv


def check_script(command: list[str]) -> None:
    """The script exists and parses (the module form is left to Python to find)."""
    if command[0] == "-m":
        return
    path = Path(command[0])
    if not path.is_file():
        raise RunError(f"no such script: {command[0]} (from {os.getcwd()})")
    try:
        ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as exc:
        raise RunError(f"{command[0]} does not parse: line {exc.lineno}: {exc.msg}") from None


#: a quiet child's output (stdout and stderr), in its run directory
CHILD_LOG = "output.log"


def run_child(command: list[str], settings: dict, out_dir: Path,
              log: bool = False) -> tuple[int, dict | None, float]:
    """Run the script observed; (its exit status, the evidence or None, wall s). ``log``:
    its output goes to ``out_dir/output.log``, not the terminal (whatif's many runs)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    evidence = out_dir / "evidence.json"
    evidence.unlink(missing_ok=True)
    env = dict(os.environ)
    env[EVIDENCE_ENV] = str(evidence)
    env[SETTINGS_ENV] = json.dumps(settings)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    if settings.get("seed") is not None:  # set/dict iteration orders alike run to run
        env["PYTHONHASHSEED"] = str(settings["seed"])
    from perflab.attach import patches  # what must be in place before python starts
    env.update(patches.child_env(settings.get("patch"), env))
    started = time.perf_counter()
    settings["popen_unix"] = time.time()
    sink = open(out_dir / CHILD_LOG, "w") if log else None  # noqa: SIM115 (closed below)
    child = subprocess.Popen([sys.executable, "-m", "perflab.attach.bootstrap", *command],
                             env=env, stdout=sink, stderr=subprocess.STDOUT if log else None)
    try:
        rc = child.wait(timeout=settings.get("hard_limit_s"))
    except KeyboardInterrupt:  # the user stops it: the child got the signal too
        rc = child.wait()
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGKILL)
        rc = child.wait()
    wall = time.perf_counter() - started
    if sink:
        sink.close()
    ev = json.loads(evidence.read_text()) if evidence.is_file() else None
    return rc, ev, wall


def _unresolved_why(p: float) -> str:
    """Why a cost whose interval may exclude 0 is still not resolved (a newcomer read
    "-5.9..-0.3 %" beside "p=0.062, not resolved" as a contradiction)."""
    if p >= 0.05:
        return f"Wilcoxon p={p:.2g} >= 0.05, and resolved needs the test and the interval both"
    return f"p={p:.2g}, but its interval or the A/A floor does not clear it"


def log_tail(out_dir: Path, lines: int = 12) -> str:
    """The last lines of a quiet child's output (where a script that died before perflab
    could record its traceback, e.g. on a bad argument, says why)."""
    path = out_dir / CHILD_LOG
    text = path.read_text(errors="replace") if path.is_file() else ""
    return "\n".join(text.rstrip().splitlines()[-lines:])


def outcome_line(rc: int, ev: dict | None, command: list[str]) -> str:
    """How the script ended, in one line (what was observed of it)."""
    if ev is None:
        return (f"the observed process ended with status {rc} before writing any evidence "
                "(killed, or os._exit): nothing was observed")
    st = ev["status"]
    how = {"stopped": f"stopped cleanly by perflab ({st.get('stopped_by')})",
           "returned": "ran to its end", "exited": f"exited with status {st.get('code')}",
           "raised": f"raised {st.get('exception')} (its traceback is above)",
           None: f"ended with status {rc}"}.get(st.get("exit"), st.get("exit"))
    line = f"the script {how}"
    if not ev["steps"]:
        line += ("; no training step was observed: the script never called "
                 "optimizer.step() (nor ran a model forward)")
    return line


def run(argv: list[str], *, steps: int | None, seconds: float, follow: bool, warmup: int,
        out: str | None, report: bool = False, patch: str | None = None,
        seed: int | None = None, contract: str = "adaptive") -> int:
    """``seconds``: the budget. Under the ``adaptive`` contract the total wall from this
    command to the verdict, the script stopped as soon as the verdict's tests are decided
    (perflab.attach.stopping); under ``fixed``, seconds of steady state (the contract before
    issue 40). ``steps`` fixes the count under either. ``patch``: one intervention applied
    from outside the script (perflab.attach.patches); ``seed``: every RNG of the script's."""
    from perflab.attach import ledger as lmod
    from perflab.attach import patches
    from perflab.attach import report as rmod
    from perflab.core import io
    from perflab.views import diagnose as dg
    try:
        command = command_of(argv)
        check_script(command)
        spec = patches.parse_spec(patch) if patch else None
    except (RunError, ValueError) as exc:
        print(f"perflab run: {exc}", file=sys.stderr)
        return 2
    name = Path(command[1] if command[0] == "-m" else command[0]).stem
    out_dir = Path(out or Path("perflab-run") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}")
    script_dir = Path(command[0]).resolve().parent if command[0] != "-m" else Path.cwd()
    settings = {"steps": steps, "seconds": None if steps else seconds, "follow": follow,
                "warmup": warmup, "roots": [str(script_dir), os.getcwd()],
                "no_step_s": 0 if follow else max(2 * seconds, 6.0),
                **({"patch": spec} if spec else {}), **({"seed": seed} if seed is not None else {})}
    if contract == "adaptive" and not steps:
        settings.update(budget_s=seconds, seconds=None, command_unix=COMMAND_UNIX[0])
    print(f"perflab run: observing {' '.join(command)} (evidence in {out_dir})",
          file=sys.stderr)
    rc, ev, wall = run_child(command, settings, out_dir)
    t_verdict = time.perf_counter()
    outcome = outcome_line(rc, ev, command)
    print(f"\nperflab run: {outcome}", file=sys.stderr)
    if ev is not None and ev.get("patch"):
        print(f"perflab run: {patches.line(ev)}", file=sys.stderr)
        if ev["patch"].get("edit"):
            print("perflab run: the edit:\n    " + ev["patch"]["edit"].replace("\n", "\n    "),
                  file=sys.stderr)
    if ev is None or not ev["steps"]:
        # nothing to judge; the ledger and the report still say what was run and how it ended
        write_ledger(out_dir, lmod.build(command, ev, outcome))
        if report:
            print(f"report: {rmod.write(out_dir, command, outcome)}")
        return rc or 1
    d, s, extra, md, frame = write_verdict(out_dir, ev, command, wall)
    print(screen(md))
    verdict_s = time.perf_counter() - t_verdict
    first = ev["unix0"] + ev["first_step_s"]
    timings = {
        # the command's time, by the wall clock across the two processes: perflab's own
        # start before the child, the script's start-up (python, imports, model build, first
        # calls) to its first step, the observed steps, the child's end (the ceilings are
        # measured there, then the interpreter exits) and the verdict in this process
        "perflab_start_s": settings["popen_unix"] - COMMAND_UNIX[0],
        "startup_s": first - settings["popen_unix"],
        "observed_s": ev["last_step_s"] - ev["first_step_s"],
        "child_end_s": wall - (ev["unix0"] + ev["last_step_s"] - settings["popen_unix"]),
        "verdict_s": verdict_s, "child_wall_s": wall, "verdict": d.verdict,
        "command_s": time.time() - COMMAND_UNIX[0],
        "estimate_s": (ev["status"].get("stopping") or {}).get("estimate_s"),
        "memory_grows": extra["memory"].outcome == dg.FITS,
        "observers_cost_pct": s.cost["relative_pct"] if s.cost else None,
        "observers_cost_resolved": s.cost["resolved"] if s.cost else None}
    io.atomic_write_json(out_dir / "timings.json", timings)
    write_ledger(out_dir, lmod.build(command, ev, outcome, s, d, extra, timings))
    print(f"verdict in {verdict_s:.1f} s after the script; "
          f"rows: {out_dir / 'results.csv'} ({len(frame)}), diagnosis: {out_dir / 'diagnosis.md'}"
          f", ledger: {out_dir / 'ledger.md'}"
          + (f", trace: {out_dir / ev['profile']['trace']}" if ev["profile"].get("trace")
             else ""))
    if report:
        print(f"report: {rmod.write(out_dir, command, outcome)}")
    return rc


def write_verdict(out_dir: Path, ev: dict, command: list[str], wall: float):
    """Judge the evidence; write the CSV-contract rows and the diagnosis (Markdown, CSV).
    (diagnosis, summary, extra findings, diagnosis.md's text, the rows)."""
    from perflab.attach import evidence as evmod
    from perflab.attach import verdict as vmod
    from perflab.core import io
    from perflab.views import diagnose as dg

    d, s, extra = vmod.judge(ev, out_dir)
    frame = io.write_results(out_dir / "results.csv", evmod.rows(ev, s, command))
    md = render(ev, s, d, extra, command, wall)
    io.atomic_write_text(out_dir / "diagnosis.md", md)
    io.atomic_write_text(out_dir / "diagnosis.csv", dg.to_frame(d).to_csv(index=False))
    return d, s, extra, md, frame


#: the run's bullets the terminal keeps (diagnosis.md has every one): what was timed, where
#: the step's time goes, why it stopped, and a patch the run was under
SCREEN_BULLETS = ("- **Patch**", "- **Steps**", "- **Phases**", "- **Stopped**")
#: the verdict's lines the terminal keeps: the verdict, its rival or runner-up, what it
#: lacked, the next intervention (the evidence rows and the candidates' table stay in the file)
SCREEN_VERDICT = ("**Verdict", "Also fits", "**Cut short", "**Next intervention")


def screen(md: str) -> str:
    """The terminal's one screen of diagnosis.md, the verdict first: a newcomer's run printed
    all 51 lines of it, the verdict a third of the way down under 12 bullets."""
    lines = md.splitlines()
    verdict = [t for t in lines if t.startswith(SCREEN_VERDICT)]
    run = [t for t in lines if t.startswith(SCREEN_BULLETS)]
    return "\n".join([*(verdict or ["**Verdict:** none drawn (diagnosis.md says why)"]), "",
                      *run, "- every candidate, the evidence rows and the run's other details: "
                      "diagnosis.md (below)"])


def write_ledger(out_dir: Path, ledger) -> None:
    from perflab.attach import ledger as lmod
    from perflab.core import io

    io.atomic_write_text(out_dir / "ledger.csv", ledger.to_csv(index=False))
    io.atomic_write_text(out_dir / "ledger.md", lmod.render_markdown(ledger))


def _ms(v) -> str:
    return f"{v:.3g} ms"


def render(ev, s, d, extra, command, wall) -> str:
    import numpy as np

    from perflab.views import diagnose as dg

    lines = [f"# perflab run: {' '.join(command)}", ""]
    if ev.get("patch"):  # a run under one intervention (perflab/attach/patches.py)
        from perflab.attach import patches
        lines.append(f"- **Patch**: {patches.line(ev)}")
        if ev["patch"].get("edit"):
            lines += ["", "```diff", ev["patch"]["edit"], "```", ""]
    first = ev.get("first_step_s")
    lines.append(f"- **Steps**: per {s.unit}" + ("" if s.unit == "optimizer step" else
                 " (no optimizer step was observed: measured per outermost forward)")
                 + f"; {s.steps_total} observed, {len(s.warmup_ms) + 1} warm-up, "
                 f"{len(s.steady_ms)} timed (median {_ms(np.median(s.steady_ms)) if s.steady_ms else 'n/a'}"
                 + (f", p25..p75 {np.percentile(s.steady_ms, 25):.3g}..{np.percentile(s.steady_ms, 75):.3g} ms"
                    if s.steady_ms else "") + ")"
                 + (f", {s.micro_batches:.3g} micro-batches (backward calls) per step"
                    if s.micro_batches and s.micro_batches != 1 else ""))
    lines.append(f"- **Time**: {wall:.1f} s in all; start-up to the first step "
                 f"{first:.1f} s (imports, model build, first call)" if first is not None
                 else f"- **Time**: {wall:.1f} s")
    if s.warmup_ms:
        lines.append("- **Warm-up** (left out): " + ", ".join(_ms(w) for w in s.warmup_ms))
    models, opts = ev["models"], ev["optimizers"]
    lines.append(f"- **Observed**: model(s) {', '.join(models) or 'none'}; optimizer(s) "
                 f"{', '.join(opts) or 'none'}" + (f" (a step ends at {opts[0]}'s step)"
                                                   if len(opts) > 1 else "")
                 + (f"; DataLoader at {ev['loaders'][0]['site']}" if ev["loaders"] else
                    "; no DataLoader (the input wait is whatever the loop does first)"))
    if s.phase_share_pct:
        lines.append("- **Phases** (mean ms per step, % of the step): " + ", ".join(
            f"{p} {s.phase_mean_ms[p]:.3g} ({s.phase_share_pct[p]:.0f}%)"
            for p in s.phase_share_pct)
            + "".join(f"; {p}: {note}" for p, note in PHASE_NOTES.items()
                      if p in s.phase_share_pct))
    c = s.cost
    if c:
        lines.append(f"- **Observers' cost**: phase hooks on vs off, {c['pairs']} paired "
                     f"stretches: {c['relative_pct']:+.2g}% of the step (95% "
                     f"{100 * c['ci_low_ms'] / c['bare_median_ms']:+.1f}.."
                     f"{100 * c['ci_high_ms'] / c['bare_median_ms']:+.1f}%) "
                     + ("(resolved)" if c["resolved"] else
                        f"(not resolved: {_unresolved_why(c['p'])}, "
                        "perflab.instruments.stats.judge)")
                     + "; the timed figures include both")
    else:
        lines.append("- **Observers' cost**: not measured (fewer than 2 hooks-on/off stretch "
                     "pairs in the budget: more steps would measure it)")
    reads = vmod_host_reads(ev)
    if reads:
        inst = ("torch's sync debug mode" if ev["cuda"] else
                "Tensor.item/tolist/cpu/numpy/bool wrapped; free on a CPU, a sync on CUDA")
        lines.append(f"- **Host reads located** ({inst}): " + "; ".join(
            f"`{k}` {v:.3g}/step" for k, v in reads[:4]))
    if ev.get("dynamo_final", {}).get("stats.unique_graphs"):
        dyn = ev["dynamo_final"]
        breaks = sum(v for k, v in dyn.items() if k.startswith("graph_break."))
        ct = sum(ev.get("compile_time_s", {}).values())
        lines.append(f"- **Compiler**: {dyn.get('stats.unique_graphs')} graphs, "
                     f"{len(ev.get('recompiles', []))} recompiles, {breaks} graph breaks, "
                     f"{ct:.1f} s in compile functions"
                     + ("; a frame hit the recompile limit (fell back to eager)"
                        if ev.get("limit_hits") else ""))
    own = ev.get("owners") or {}
    if "parameters_mib" in own:
        peak = [r["memory"].get("max_allocated_mib") for r in ev["steps"]
                if r["kind"] in ("observed", "bare") and "max_allocated_mib" in r["memory"]]
        held = own["parameters_mib"] + own["gradients_mib"] + own["optimizer_state_mib"]
        lines.append(f"- **Memory owners** (at the end; perflab.instruments.memory): parameters "
                     f"{own['parameters_mib']:.1f} MiB, gradients {own['gradients_mib']:.1f} "
                     f"MiB, optimizer state {own['optimizer_state_mib']:.1f} MiB"
                     + (f"; step peak allocated {max(peak):.1f} MiB, of which activations "
                        f"and temporaries {max(peak) - held:.1f} MiB (the rest)" if peak
                        else ""))
    from perflab.attach import stopping
    note = stopping.verdict_note(ev)
    lines.append(f"- **Stopped**: {note}" if note else
                 f"- **Stopped**: {ev['status'].get('stopped_by') or ev['status'].get('exit')}"
                 " (fixed contract: no stopping rule)")
    mem = extra["memory"]
    lines.append(f"- **Memory**: {mem.because}" + (" — **memory grows every step**"
                                                     if mem.outcome == dg.FITS else ""))
    lines += ["", dg.render_markdown(d)]
    if mem.outcome == dg.FITS:
        lines.append(f"**Also: memory grows every step.** {mem.because}. {mem.intervention}.\n")
    return "\n".join(lines)


def vmod_host_reads(ev):
    from perflab.attach import verdict as vmod

    return vmod.host_reads(ev)


# ------------------------------------------------------------------ command line
# `perflab run` (perflab.cli) and `python -m perflab.attach.run`, the same options: the
# second needs none of the pipeline's packages (Snakemake, jsonschema, yaml), for a machine
# that has only torch and the scientific stack

_VALUED = ("--steps", "--seconds", "--budget", "--contract", "--warmup", "--out", "--patch",
           "--seed")


def add_arguments(p) -> None:

    p.add_argument("--steps", type=int, help="stop after N timed steady steps")
    from perflab.kit import sampling

    p.add_argument("--budget", "--seconds", dest="seconds", type=sampling.budget_arg, default=60.0,
                   help="the most wall time from the command to the verdict: 60, 60s, 2m "
                   "(default 60s); the script stops sooner once the verdict is decided "
                   "(--seconds: the same, kept for compatibility)")
    p.add_argument("--contract", choices=("adaptive", "fixed"), default="adaptive",
                   help="adaptive (default): stop when the verdict's tests are decided, the "
                   "budget the maximum; fixed: the budget in seconds of steady state, as "
                   "before (for before/after comparisons)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up steps left out (default 3)")
    p.add_argument("--follow", action="store_true",
                   help="let the script run on to its end, observing all of it")
    p.add_argument("--out", help="where the evidence, rows, trace and diagnosis go "
                   "(default perflab-run/<script>-<time>)")
    p.add_argument("--report", action="store_true",
                   help="also write report.html: this run's verdict on its first screen, "
                   "the phases, the ledger, the evidence (self-contained, offline)")
    p.add_argument("--patch", metavar="NAME[:k=v,...]",
                   help="apply one intervention from outside the script (perflab whatif's: "
                        "loader_workers, fused_optimizer, compile_default, autocast_bf16, ...)")
    p.add_argument("--seed", type=int, help="seed python's, numpy's and torch's RNG first")
    p.add_argument("script", nargs="*", help="the script and its arguments (or after --)")


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """(perflab's options, the script's command): after ``--``, or from the first word that
    is not an option or an option's value (``perflab run train.py --epochs 1``)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    i = next((k for k, a in enumerate(argv) if not a.startswith("-")
              and (k == 0 or argv[k - 1] not in _VALUED)), len(argv))
    return argv[:i], argv[i:]


def run_args(args, extra: list[str]) -> int:
    return run([*args.script, *extra], steps=args.steps, seconds=args.seconds,
               follow=args.follow, warmup=args.warmup, out=args.out, report=args.report,
               patch=getattr(args, "patch", None), seed=getattr(args, "seed", None),
               contract=getattr(args, "contract", "adaptive"))


def main(argv: list[str] | None = None) -> int:
    import argparse

    head, command = split_argv(list(sys.argv[1:] if argv is None else argv))
    p = argparse.ArgumentParser(prog="python -m perflab.attach.run",
                                description="perflab run: docs/run.md")
    add_arguments(p)
    return run_args(p.parse_args(head), command)


if __name__ == "__main__":
    sys.exit(main())
