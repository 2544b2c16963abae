"""The command line's conventions (issue 41): help without arguments, --version, a
description per subcommand, "did you mean", the current directory importable from the
console script, Snakemake's output compacted to one line per job, and the summary every
run ends with."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from perflab import cli
from perflab.views import console, summary

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "report" / "reference" / "cpu-2c"


def _perflab(*args: str, cwd: Path | None = None, script_dir: Path | None = None):
    """Run the command line as its console script runs: from a file whose directory, not the
    current one, is sys.path[0]."""
    bin_dir = script_dir or Path(cwd or ROOT)
    script = bin_dir / "perflab-script.py"
    script.write_text("import sys\nfrom perflab.cli import main\nsys.exit(main())\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, str(script), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_alone_prints_help_and_exits_0(tmp_path):
    r = _perflab(cwd=tmp_path, script_dir=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "usage: perflab" in r.stdout
    for name in cli.SUBCOMMANDS:
        assert name in r.stdout


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.startswith("perflab ")


def test_every_subcommand_has_a_description():
    p = cli.parser()
    sub = next(a for a in p._actions if a.dest == "command")
    assert set(sub.choices) == set(cli.SUBCOMMANDS)
    for name, sp in sub.choices.items():
        assert sp.description and len(sp.description) > 40, name


@pytest.mark.parametrize("argv, hint", [
    (["diagnos", "mlp"], "did you mean 'diagnose'"),
    (["diagnose", "mlp", "--reprot"], "did you mean '--report'"),
])
def test_did_you_mean(argv, hint, capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 2
    assert hint in capsys.readouterr().err


def test_no_suggestion_for_nonsense(capsys):
    with pytest.raises(SystemExit):
        cli.main(["zzzzzz"])
    assert "did you mean" not in capsys.readouterr().err


def test_flags_the_help_shows_are_accepted_before_dash_dash():
    args = cli.parser().parse_args(["diagnose", "mlp", "-n", "-v", "--cores", "2"])
    assert args.dry_run and args.verbose and args.cores == 2
    assert cli._dry(args, [])
    assert cli.parser().parse_args(["whatif", "mlp", "--dry-run"]).dry_run


def test_the_current_directory_is_importable_from_the_console_script(tmp_path):
    """The console script's sys.path[0] is its bin directory; a workload module in the
    directory the user runs it from must still import (the check builds and steps it)."""
    work, bin_dir = tmp_path / "work", tmp_path / "bin"
    work.mkdir()
    bin_dir.mkdir()
    shutil.copy(ROOT / "examples" / "mypkg" / "models.py", work / "cwd_models.py")
    r = _perflab("check", "cwd_models:make_step", "--device", "cpu", "--configfile",
                 str(ROOT / "config" / "test.yaml"), cwd=work, script_dir=bin_dir)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "cwd_models:make_step: OK on cpu" in r.stdout


# ---------------------------------------------------------------- the compact console

TRANSCRIPT = """\
Building DAG of jobs...
Job stats:
job              count
e05_phases           1
total                3
Execute 1 jobs...
[Fri Dec  4 16:58:00 2026]
localrule e05_phases:
    output: results/cpu-2c-tiny/e05_phases.csv
    jobid: 2
    resources: tmpdir=/tmp, mem_mb=4000
[Fri Dec  4 16:58:04 2026]
Finished jobid: 2 (Rule: e05_phases)
1 of 3 steps (33%) done
[Fri Dec  4 16:58:04 2026]
rule ledger:
    jobid: 1
perflab: a line of perflab's own
[Fri Dec  4 16:58:05 2026]
Error in rule ledger:
    message: the ledger failed
    jobid: 1
    log: logs/cpu-2c-tiny/ledger.log (check log file(s) for error details)
Select jobs to execute...
[Fri Dec  4 16:58:06 2026]
localrule claims:
    jobid: 5
Finished jobid: 5 (Rule: claims)
2 of 3 steps (67%) done
Exiting because a job execution failed. Look below for error messages
Complete log(s): /w/.snakemake/log/x.snakemake.log
"""


def test_compact_view_keeps_progress_perflab_and_errors():
    ticks = iter(range(0, 1000, 1))
    out = io.StringIO()
    view = console.Compact(out, clock=lambda: float(next(ticks)))
    for line in TRANSCRIPT.splitlines():
        view.feed(line)
    shown = out.getvalue().splitlines()
    assert shown[0].startswith("[1/3] E05 phases") and shown[0].endswith(" s")
    assert "perflab: a line of perflab's own" in shown
    assert "Error in rule ledger:" in shown
    assert "    message: the ledger failed" in shown  # the error block whole
    assert any(s.startswith("[2/3] claims") for s in shown)
    assert shown[-1].startswith("Exiting because a job execution failed")
    for hidden in ("resources:", "Job stats", "Building DAG", "output:"):
        assert not any(hidden in s for s in shown), hidden
    assert view.log == "/w/.snakemake/log/x.snakemake.log"


def test_a_failed_run_shows_what_was_hidden_since_the_last_job(tmp_path):
    """An error worded in no way the filter knows is still shown when the run fails."""
    script = tmp_path / "fails.py"
    script.write_text("import sys\nprint('Building DAG of jobs...')\n"
                      "print('something odd went wrong here')\nsys.exit(1)\n")
    out = io.StringIO()
    assert console.run([sys.executable, str(script)], out=out) == 1
    assert "something odd went wrong here" in out.getvalue()
    out = io.StringIO()  # the same lines, exit 0: hidden
    script.write_text("print('something odd went wrong here')\n")
    assert console.run([sys.executable, str(script)], out=out) == 0
    assert out.getvalue() == ""


def test_compact_progress_names_a_job_by_its_wildcards():
    out = io.StringIO()
    view = console.Compact(out, clock=lambda: 0.0)
    for line in ["rule w01_intervention:", "    jobid: 4", "    reason: Missing output files",
                 "    wildcards: intervention=fused_optimizer",
                 "Finished jobid: 4 (Rule: w01_intervention)", "3 of 9 steps (33%) done"]:
        view.feed(line)
    assert out.getvalue().split()[:4] == ["[3/9]", "W01", "intervention", "fused_optimizer"]


def test_compact_progress_times_each_job_from_its_start():
    clock = iter([0.0, 10.0, 22.0, 22.0])  # rule line, jobid line, finished, steps
    out = io.StringIO()
    view = console.Compact(out, clock=lambda: next(clock))
    for line in ["rule e05_phases:", "    jobid: 7", "Finished jobid: 7 (Rule: e05_phases)",
                 "1 of 1 steps (100%) done"]:
        view.feed(line)
    assert out.getvalue().split() == ["[1/1]", "E05", "phases", "12", "s"]


# ---------------------------------------------------------------- the summary


def test_summary_names_the_verdict_claims_and_report(tmp_path):
    for name in ("diagnosis.csv", "claims.csv", "report.html"):
        shutil.copy(REFERENCE / name, tmp_path / name)
    lines = summary.lines(tmp_path)
    assert lines[0].startswith("perflab: verdict: optimizer — ")
    assert lines[1].startswith("perflab: claims: ") and "REPRODUCED" in lines[1]
    n = sum(1 for _ in (REFERENCE / "claims.csv").open()) - 1
    assert f"{n} claims" in lines[1]
    assert lines[2] == f"perflab: report: {tmp_path / 'report.html'}"
    assert not any("claims" in s for s in summary.lines(tmp_path, claims=False))
    # a file older than the run is said to be so
    assert "(from an earlier run)" in summary.lines(tmp_path, since=2e10)[0]


def test_summary_without_results_guesses_nothing(tmp_path):
    assert summary.lines(tmp_path) == [f"perflab: results in {tmp_path}/"]
    (tmp_path / "diagnosis.csv").write_text("candidate,label,outcome,verdict,because\n"
                                            "x,x,ruled out,False,no\n")
    assert summary.lines(tmp_path)[0].startswith("perflab: verdict: no verdict")


def test_whatif_measures_the_floor_it_reads_as_diagnose_does_not_the_chapters_calibration():
    """W01 reads only C00's A/A floor: its planted 2x, peers and process floors were 46 s of
    a 3-minute what-if on a CPU GPT-2. Both commands get one C00 contract (a what-if after a
    diagnose reuses its C00); the pipeline's own contract keeps every part."""
    from perflab import cli
    from perflab.pipeline import config as cfgmod

    def c00(argv):
        args = cli.parser().parse_args(argv)
        cfg = cfgmod.load(cli._configfiles(args), {"device": "cpu", "workload": "mlp"})
        return cfgmod.contract(cfg, "C00")["params"]

    whatif, diagnose = c00(["whatif", "mlp"]), c00(["diagnose", "mlp"])
    assert whatif == diagnose and whatif["parts"] == ["clock", "aa"]
    assert "planted" in cfgmod.contract(cfgmod.load([], {"device": "cpu"}), "C00")["params"]["parts"]
