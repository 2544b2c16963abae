"""A user's workload, written outside the package, through the interface end to end on CPU.

The module is written into tmp_path and put on PYTHONPATH; Snakemake runs a
tiny selection of experiments on it and must produce its own result tag,
rows naming it, the ledger, the report and the verdict. Bad targets must
fail before any job runs, naming the target.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from experiments import forget_package, run_tiny, write_user_package

from perflab import cli, config, io, ledger, workloads
from perflab.workloads import WorkloadError

ROOT = Path(__file__).resolve().parents[1]
TEST_CONFIG = ROOT / "config" / "test.yaml"

USER_MODULE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from perflab.workloads import Workload


def make_step(device, *, width=8, batch=4):  # no seed: the pipeline must not pass one
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 1)).to(device)

    def make_batch(b):
        g = torch.Generator().manual_seed(1)
        return torch.randn(b, width, generator=g), torch.randn(b, 1, generator=g)

    return Workload(name="user_reg", model=model, make_batch=make_batch, loss_fn=F.mse_loss,
                    batch_size=batch, description=f"user regression w{width}",
                    make_optimizer=lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9),
                    optimizer_name="SGD(momentum)")


def inference_only(device, *, width=8, batch=4):
    w = make_step(device, width=width, batch=batch)
    w.make_optimizer = None
    return w


def wrong_shape(device, **kw):
    return make_step(device), "extra"


class Boom(nn.Module):
    def forward(self, x):
        raise RuntimeError("boom in forward")


def model_raises(device, **kw):
    w = make_step(device)
    w.model = Boom()
    return w


def builder_raises(device, **kw):
    raise ValueError("no such checkpoint")


def scalar_loss_missing(device, **kw):
    w = make_step(device)
    w.loss_fn = lambda out, y: (out - y) ** 2  # not reduced to a scalar
    return w
"""


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """`<unique>.models` importable from tmp_path (in this process and in child processes)."""
    pkg = write_user_package(tmp_path, monkeypatch, {"models": USER_MODULE})
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(ROOT)]))
    yield f"{pkg}.models"
    forget_package(pkg)


def snakemake(work: Path, *config_args: str, extra: tuple[str, ...] = ()):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"),
           "--directory", str(work), "--configfile", str(TEST_CONFIG), "--cores", "1",
           *extra, "--config", "device=cpu", *config_args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_user_workload_end_to_end_through_snakemake(user_module, tmp_path):
    target = f"{user_module}:make_step"
    work = tmp_path / "run"
    proc = snakemake(work, f"workload={target}", "run=E05,E13,R01")
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-5000:])
    tag = f"cpu-{os.cpu_count()}c-tiny-{config.workload_slug(target)}"
    results = work / "results" / tag
    frame = io.read_results([results / f"{e}.csv" for e in
                             ("e05_phases", "e13_sync_tax", "r01_roofline")])
    controlled = frame[frame.workload == target]
    assert set(controlled.experiment) == {"E05", "E13", "R01"}
    assert set(controlled.model) - {""} == {"user regression w8"}
    md = (results / "ledger.md").read_text()
    assert "user regression w8" in md and "SGD(momentum)" in md
    assert "roofline    forward" in md and "verdict     waiting for" in md
    diagnosis = pd.read_csv(results / "diagnosis.csv", keep_default_na=False)
    assert diagnosis.verdict.astype(str).eq("True").sum() >= 1
    html = (results / "report.html").read_text()
    assert "What is the machine waiting for?" in html
    # the chapter's results live under another tag: never mixed with this workload's
    assert not (work / "results" / f"cpu-{os.cpu_count()}c-tiny").exists()


def test_missing_module_stops_snakemake_naming_the_target(tmp_path):
    proc = snakemake(tmp_path, "workload=perflab_nowhere_xyz.models:make_step", extra=("-n",))
    assert proc.returncode != 0
    assert "perflab_nowhere_xyz.models:make_step" in proc.stdout + proc.stderr


@pytest.mark.parametrize("attr, message", [
    ("wrong_shape", "returned tuple, expected perflab.workloads.Workload"),
    ("model_raises", "the model's forward raised \\(RuntimeError: boom in forward\\)"),
    ("builder_raises", "raised while building \\(ValueError: no such checkpoint\\)"),
    ("scalar_loss_missing", "loss_fn must return a scalar tensor, got \\[2, 1\\]"),
])
def test_bad_targets_name_the_target(user_module, attr, message):
    target = f"{user_module}:{attr}"
    with pytest.raises(WorkloadError, match=message) as exc:
        workloads.check(target, "cpu")
    assert target in str(exc.value)
    # the command line says the same before any job starts
    with pytest.raises(SystemExit) as stop:
        cli.main(["check", target, "--device", "cpu", "--configfile", str(TEST_CONFIG)])
    assert target in str(stop.value.code)


def test_check_accepts_a_good_target(user_module, capsys):
    assert cli.main(["check", f"{user_module}:make_step", "--device", "cpu"]) == 0
    assert "OK on cpu" in capsys.readouterr().out


def test_experiments_that_do_not_apply_say_why(user_module, tmp_path):
    cfg = config.load([TEST_CONFIG], {"device": "cpu",
                                      "workload": f"{user_module}:inference_only"})
    for eid in ("E05", "R01"):
        _, out = run_tiny(cfg, eid, tmp_path)
        rows = io.read_results([out["csv"]])
        skipped = rows[(rows.workload == cfg["workload"]) & (rows.status == "unsupported")
                       & ~rows.variant.str.startswith("copy/")]  # a CPU has no host-device copy
        assert not skipped.empty
        assert skipped.reason.str.contains("has no optimizer").all()
    # R01 still calibrates the device
    assert (rows[rows.variant.str.startswith("ceiling/")].status == "ok").any()


@pytest.mark.parametrize("name", ["convnet", "transformer"])
def test_builtin_workload_has_a_ledger_on_cpu(name, tmp_path):
    cfg = config.load([TEST_CONFIG], {"device": "cpu", "workload": name})
    assert cfg["resolved_tag"].endswith(f"-tiny-{name}")
    csvs = [run_tiny(cfg, eid, tmp_path)[1]["csv"] for eid in ("E05", "R01")]
    rows, md = ledger.build(csvs)
    built = workloads.build(name, "cpu", **config.workload_spec(cfg)[1])
    measured = io.read_results(csvs)
    assert set(measured[measured.variant.str.startswith(("sync/", "phase/"))].model) == {
        built.description}
    fwd = rows[(rows.section == "roofline") & (rows.field == "forward_flops_fraction")]
    assert float(fwd.value.iloc[0]) > 0  # a conv / attention forward does counted FLOPs
    assert "verdict     waiting for" in md


def test_diagnose_command_runs_snakemake_on_the_evidence(user_module, tmp_path):
    # a dry run: the command resolves, pre-flights the model and hands Snakemake the selection
    rc = cli.main(["diagnose", f"{user_module}:make_step", "--device", "cpu",
                   "--configfile", str(TEST_CONFIG), "--directory", str(tmp_path), "--", "-n"])
    assert rc == 0


def test_diagnose_preflights_in_a_child_process(user_module, tmp_path, monkeypatch, capfd):
    """The pre-flight builds and steps the model in a child: in this process it would hold a
    CUDA context (and the model) through every measured job. A failing pre-flight stops the
    command, naming the target, before Snakemake starts."""
    def in_process(*a, **k):
        raise AssertionError("diagnose built the workload in its own process")

    monkeypatch.setattr(workloads, "check", in_process)
    args = ["--device", "cpu", "--configfile", str(TEST_CONFIG), "--directory", str(tmp_path)]
    assert cli.main(["diagnose", f"{user_module}:make_step", *args, "--", "-n"]) == 0
    out = capfd.readouterr()
    assert "OK on cpu" in out.out  # the child's pre-flight ran

    assert cli.main(["diagnose", f"{user_module}:model_raises", *args, "--", "-n"]) != 0
    err = capfd.readouterr().err
    assert f"{user_module}:model_raises" in err and "boom in forward" in err
    assert "-m snakemake" not in err  # stopped before Snakemake
