"""The user's code is an input of every job that measures it (perflab/core/fingerprint.py).

A package of the user's is written into tmp_path: its target module imports a helper of
its own (relatively and absolutely), torch and the stdlib. An edit of the helper must
change the fingerprint and every contract that builds the workload; an edit of a file it
does not import, or of nothing, must not.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from experiments import forget_package, write_user_package

from perflab.core import fingerprint
from perflab.pipeline import config

TARGET = """
import json
import torch
from . import helper
from .sub import deep
{extra}

def make(device, *, width=8, batch=4):
    return helper.build(width, batch)
"""


def _package(tmp_path, monkeypatch, extra=""):
    pkg = write_user_package(tmp_path, monkeypatch, {
        "mod": TARGET.format(extra=extra),
        "helper": "WIDTH = 256\ndef build(w, b):\n    return w\n",
        "unrelated": "X = 1\n",
    })
    (tmp_path / pkg / "sub").mkdir()
    (tmp_path / pkg / "sub" / "__init__.py").write_text("")
    (tmp_path / pkg / "sub" / "deep.py").write_text("Y = 2\n")
    importlib.invalidate_caches()
    return pkg


def test_user_modules_are_the_targets_imports_not_torch_or_stdlib(tmp_path, monkeypatch):
    pkg = _package(tmp_path, monkeypatch)
    try:
        fp = fingerprint.of_target(f"{pkg}.mod:make", {"width": 8})
        names = [f["path"] for f in fp["files"]]
        assert names[0] == f"{pkg}/mod.py"  # the code is named by the target's file
        assert set(names) == {f"{pkg}/mod.py", f"{pkg}/helper.py", f"{pkg}/__init__.py",
                              f"{pkg}/sub/__init__.py", f"{pkg}/sub/deep.py"}
        assert fingerprint.short(fp).startswith(f"{pkg}/mod.py @ ")
        # perflab's own builders are not the user's code
        assert fingerprint.of_target("perflab.instruments.workloads:mlp") is None
    finally:
        forget_package(pkg)


def test_an_edit_of_an_imported_module_or_a_param_changes_it_others_do_not(tmp_path, monkeypatch):
    pkg = _package(tmp_path, monkeypatch)
    try:
        target = f"{pkg}.mod:make"
        before = fingerprint.of_target(target, {"width": 8})["sha256"]
        assert fingerprint.of_target(target, {"width": 8})["sha256"] == before  # stable
        (tmp_path / pkg / "unrelated.py").write_text("X = 2\n")
        assert fingerprint.of_target(target, {"width": 8})["sha256"] == before
        assert fingerprint.of_target(target, {"width": 16})["sha256"] != before
        (tmp_path / pkg / "helper.py").write_text("WIDTH = 512\ndef build(w, b):\n    return w\n")
        assert fingerprint.of_target(target, {"width": 8})["sha256"] != before
    finally:
        forget_package(pkg)


def test_an_attached_script_is_fingerprinted_with_its_args(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('step')\n")
    a = fingerprint.of_files([script], args=["--lr", "0.1"])
    assert a["files"][0]["path"] == "train.py"
    assert fingerprint.of_files([script], args=["--lr", "0.2"])["sha256"] != a["sha256"]
    script.write_text("print('step 2')\n")
    assert fingerprint.of_files([script], args=["--lr", "0.1"])["sha256"] != a["sha256"]


def test_the_contract_of_every_job_building_the_workload_carries_it(tmp_path, monkeypatch):
    """The contract is each job's params: Snakemake re-runs a job whose params changed."""
    pkg = _package(tmp_path, monkeypatch)
    try:
        over = {"workload": f"{pkg}.mod:make", "device": "cpu"}
        cfg = config.load([], over)
        e05 = config.contract(cfg, "E05")
        assert e05["workloads"][over["workload"]]["code"]["files"][0]["path"] == f"{pkg}/mod.py"
        # an experiment on a built-in workload only carries no user code
        assert all("code" not in w for w in config.contract(cfg, "C00")["workloads"].values()
                   if w["target"] != over["workload"])
        (tmp_path / pkg / "sub" / "deep.py").write_text("Y = 3\n")
        again = config.load([], over)
        assert config.contract(again, "E05") != e05
        assert config.contract(config.load([], over), "E05") == config.contract(again, "E05")
    finally:
        forget_package(pkg)


# ---------------------------------------------------------------- the results it measured

def _result(tmp_path, cfg, eid, finished="2026-01-01T00:00:00+00:00", patch=None):
    """A result of ``eid`` as its job leaves it: rows and a provenance with its contract."""
    import json

    out = config.experiment_outputs(cfg, eid)
    for p in out.values():
        (tmp_path / p).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / out["csv"]).write_text("x\n")
    contract = config.contract(cfg, eid)
    if patch:
        patch(contract)
    (tmp_path / out["provenance"]).write_text(json.dumps({"contract": contract,
                                                          "finished": finished}))


def test_a_result_of_other_code_is_refused_and_the_current_one_named(tmp_path, monkeypatch):
    import datetime as dt

    from perflab.views import current

    pkg = _package(tmp_path, monkeypatch)
    try:
        over = {"workload": f"{pkg}.mod:make", "device": "cpu", "run": "E05"}
        cfg = config.load([], over)
        _result(tmp_path, cfg, "E05")
        assert current.other_code(cfg, ["E05"], tmp_path) == {}
        now = dt.datetime(2026, 1, 1, 0, 2, 5, tzinfo=dt.timezone.utc)
        line = current.measured_line(cfg, ["E05"], tmp_path, now=now)
        sha = cfg["resolved_code"][over["workload"]]["sha256"][:8]
        assert line == f"measured: {pkg}/mod.py @ {sha}, 2 minutes ago"
        # its parameters change: that result is no evidence for these
        edited = config.load([], {**over, "workloads": {over["workload"]: {"width": 9}}})
        assert "other parameters" in current.other_code(edited, ["E05"], tmp_path)["E05"]
        # the code changes after the measurement: nor for this code
        (tmp_path / pkg / "helper.py").write_text("WIDTH = 512\n")
        why = current.other_code(config.load([], over), ["E05"], tmp_path)["E05"]
        assert "other code" in why and sha in why
        # a result without provenance is not taken on trust
        (tmp_path / config.experiment_outputs(cfg, "E05")["provenance"]).unlink()
        assert "provenance" in current.other_code(cfg, ["E05"], tmp_path)["E05"]
    finally:
        forget_package(pkg)


WORKLOAD = """
from perflab.instruments.workloads import mlp
from .helper import WIDTH


def make(device, *, batch=4):  # the user's model: its width lives in another module
    return mlp(device, dim=WIDTH, depth=1, num_classes=2, batch=batch)
"""


@pytest.mark.slow
def test_an_edit_re_measures_exactly_its_jobs_under_plain_snakemake(tmp_path, monkeypatch):
    """The issue's case: a workload's width edited in a module it imports, then the same
    command again. Before, "Nothing to be done" and the old verdict; now its jobs re-run,
    and a corrupt or deleted result file is measured again. (One real run, then dry runs.)"""
    import os
    import subprocess
    import sys

    pkg = write_user_package(tmp_path, monkeypatch, {"mod": WORKLOAD, "helper": "WIDTH = 8\n"})
    root = Path(__file__).resolve().parents[1]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(root)]))
    work = tmp_path / "run"

    def snakemake(*extra):
        cmd = [sys.executable, "-m", "snakemake", "-s", str(root / "Snakefile"), "--directory",
               str(work), "--configfile", str(root / "config" / "test.yaml"), "--cores", "1",
               *extra, "--config", "device=cpu", "run=E05", "claim_processes={}",
               f"workload={pkg}.mod:make"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout + proc.stderr

    try:
        snakemake()
        assert "Nothing to be done" in snakemake("-n")
        (tmp_path / pkg / "helper.py").write_text("WIDTH = 16\n")
        out = snakemake("-n")
        assert "rule e05_phases:" in out and "Params have changed" in out, out[-3000:]
        # (each dry run is a Snakemake start: two states are checked per run where they can)
        (tmp_path / pkg / "helper.py").write_text("WIDTH = 8\n")  # back: the params match
        results = next((work / "results").iterdir())
        # a corrupt samples file (its bytes no longer those its job wrote): measured again
        samples = results / "e05_phases_samples.csv"
        good = samples.read_bytes()
        samples.write_bytes(good.replace(b"\n", b"\n\x00", 1))
        out = snakemake("-n")
        assert "changed since its job wrote it" in out and "rule e05_phases:" in out, out[-3000:]
        assert "Params have changed" not in out, out[-3000:]  # the edit reverted: not a reason
        kept = list(results.glob("e05_phases_samples.csv.changed-*"))
        assert [k.read_bytes() for k in kept] == [samples.read_bytes() if samples.exists()
                                                   else good.replace(b"\n", b"\n\x00", 1)]
        kept[0].rename(samples)
        samples.write_bytes(good)
        (results / "e05_phases.json").unlink()
        out = snakemake("-n")
        assert "rule e05_phases:" in out and "Missing output files" in out, out[-3000:]
        assert "changed since" not in out, out[-3000:]  # the restored samples are its own
    finally:
        forget_package(pkg)


def test_perflab_diagnose_refuses_a_verdict_of_other_code(tmp_path, monkeypatch, capsys):
    """The issue's case at the command: the results on disk were measured before an edit
    (and Snakemake, say, ran nothing). The old verdict is not printed; the command says which
    experiment was measured with which code, and fails. With the results current, the verdict
    is printed with "measured: <file> @ <sha>, <age>"."""
    from perflab import cli
    from perflab.pipeline import preflight

    pkg = _package(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    try:
        target = f"{pkg}.mod:make"
        cfg = config.load([], {"workload": target, "device": "cpu", "run": "E05"})
        md = tmp_path / config.result_dir(cfg) / "diagnosis.md"

        def fake_call(cmd, env=None):  # Snakemake found nothing to do: the files stay
            md.parent.mkdir(parents=True, exist_ok=True)
            md.write_text("**Verdict: add DataLoader workers**\n")
            return 0

        answer = {"ok": True, "device": "cpu", "description": "d", "batch": 4, "step_ms": 1.0}
        monkeypatch.setattr(preflight, "run_child", lambda *a, **k: answer)
        monkeypatch.setattr(cli.subprocess, "call", fake_call)
        monkeypatch.setattr(cli.console, "run", lambda cmd, env=None, verbose=False:
                            fake_call(cmd, env))
        argv = ["diagnose", target, "--device", "cpu", "--run", "E05", "--no-whatif"]
        _result(tmp_path, cfg, "E05", finished="2026-01-01T00:00:00+00:00")
        assert cli.main(argv) == 0
        out = capsys.readouterr().out
        assert "add DataLoader workers" in out and f"measured: {pkg}/mod.py @ " in out
        (tmp_path / pkg / "helper.py").write_text("WIDTH = 512\n")  # the user's edit
        assert cli.main(argv) == 1
        got = capsys.readouterr()
        assert "add DataLoader workers" not in got.out
        assert "E05 was measured with other code" in got.err and "no verdict" in got.err
    finally:
        forget_package(pkg)


def test_a_result_changed_since_its_job_wrote_it_is_found(tmp_path):
    import json

    from perflab.core import integrity

    out = {k: str(tmp_path / f"r.{k}") for k in ("csv", "samples", "provenance")}
    for k in ("csv", "samples"):
        Path(out[k]).write_text(f"{k}\n1\n")
    Path(out["provenance"]).write_text(json.dumps({"files_sha256": integrity.record(out)}))
    assert integrity.changed(out) == []
    Path(out["samples"]).write_text("samples\n2\n")
    assert integrity.changed(out) == [out["samples"]]
    Path(out["provenance"]).write_text("{}")  # an older run's record: nothing to compare
    assert integrity.changed(out) == []
