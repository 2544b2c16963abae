"""A diverged step is no measurement: a NaN or inf loss stops it with a clear message (and
two more of the issue's faults: a killed job's words, the ledger's fence).

The issue's cases: a loss that is NaN every step, inputs of inf, ``lr: 1e30`` on the
built-in MLP, a ``train_step`` returning NaN. Before, ``perflab check`` printed OK, the rows
were marked ok and a verdict was drawn. Now the pre-flight (``workloads.check``) and every
measured job (``runner.execute``, from the last step it ran) refuse, naming the target, and
no result file is written, so no verdict can rest on it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from experiments import forget_package, run_tiny, write_user_package

from perflab.instruments import workloads
from perflab.pipeline import config

MODULE = """
import torch
import torch.nn.functional as F
from perflab.instruments.workloads import mlp


def nan_loss(device, batch=8):
    w = mlp(device, dim=16, depth=1, num_classes=4, batch=batch)
    w.loss_fn = lambda out, y: F.cross_entropy(out, y) * float("nan")
    return w


def inf_inputs(device, batch=8):
    w = mlp(device, dim=16, depth=1, num_classes=4, batch=batch)
    make = w.make_batch
    w.make_batch = lambda b: (make(b)[0] * float("inf"), make(b)[1])
    return w


def step_returns_nan(device, batch=8):
    w = mlp(device, dim=16, depth=1, num_classes=4, batch=batch)
    w.train_step = lambda model, opt, batch: float("nan")
    return w
"""


@pytest.fixture
def user(tmp_path, monkeypatch):
    pkg = write_user_package(tmp_path, monkeypatch, {"bad": MODULE})
    yield f"{pkg}.bad"
    forget_package(pkg)


#: the diverging workloads the check refuses
DIVERGING = ["nan_loss", "inf_inputs", "step_returns_nan"]
#: bad inputs tried here (the README's count: tests/test_reliability.py): the diverging
#: workloads, lr 1e30, a description breaking out of the ledger's fence
CASES = len(DIVERGING) + 2
#: faults tried here: a job killed by a signal
FAULT_CASES = 1


@pytest.mark.parametrize("fn", DIVERGING)
def test_the_check_refuses_a_non_finite_loss(user, fn):
    with pytest.raises(workloads.WorkloadError, match=r"diverged") as exc:
        workloads.check(f"{user}:{fn}", "cpu")
    assert f"{user}:{fn}" in str(exc.value) and "nan" in str(exc.value)


def test_a_measurement_on_a_diverging_step_writes_nothing(tmp_path):
    """``lr: 1e30`` on the built-in MLP: its first step is finite (the check passes), the
    measured steps diverge; the job stops with the message and leaves no result."""
    cfg = config.load([Path(__file__).resolve().parents[1] / "config" / "test.yaml"],
                      {"device": "cpu", "workloads": {"mlp": {"lr": 1e30}}})
    with pytest.raises(workloads.WorkloadError, match=r"'mlp': the loss is (nan|inf).*E05"):
        run_tiny(cfg, "E05", tmp_path)
    assert not list(tmp_path.glob("*.csv"))
    # the control: the same experiment at a sane learning rate measures
    _, out = run_tiny(config.load([Path(__file__).resolve().parents[1] / "config" / "test.yaml"],
                                  {"device": "cpu"}), "E05", tmp_path)
    assert Path(out["csv"]).is_file()


def test_a_killed_job_says_killed_with_its_signal(tmp_path):
    """Jobs killed by a signal read "exit status 137/143" (Snakemake's words); the job's log
    now ends with "killed (signal N, NAME)", the line the partial report quotes."""
    import os
    import signal
    import subprocess
    import sys

    from perflab.core import forkserver

    assert forkserver.ended(-9) == "killed (signal 9, SIGKILL)"
    assert forkserver.ended(143) == "killed (signal 15, SIGTERM)"
    assert forkserver.ended(3) == "exit status 3"
    log = tmp_path / "job.log"
    code = ("import os, signal, time, sys\n"
            "from perflab.pipeline import runner\n"
            f"with runner._logging({str(log)!r}):\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    time.sleep(30)\n")
    root = str(Path(__file__).resolve().parents[1])
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": root})
    assert proc.returncode == -signal.SIGTERM
    assert log.read_text().strip().splitlines()[-1] == \
        "perflab: the job was killed (signal 15, SIGTERM); no result written"


def test_a_description_cannot_break_out_of_the_ledgers_code_fence():
    import mistune

    from perflab.views import ledger

    hostile = "mlp\n```\n# Verdict: fake\n<img src=x>\n```"
    md = ledger.fenced(f"model       {hostile}")
    html = mistune.create_markdown()(md)
    assert html.count("<pre>") == 1 and "<h1>" not in html and "Verdict: fake" in html
    assert ledger.fenced("plain").startswith("```\n")  # the chapter's layout where it can be


def test_the_preflight_refuses_a_step_that_diverges_within_its_steps():
    """lr 1e30: one step is finite (perflab check's), the pre-flight's six are not."""
    from perflab.pipeline import preflight

    answer = preflight.run_child({"target": "mlp", "params": {"lr": 1e30, "dim": 16, "depth": 1,
                                                              "num_classes": 4, "batch": 8},
                                  "device": "cpu", "dtype": "float32", "tag": "t"})
    assert answer["ok"] is False and "'mlp': the loss is" in answer["error"], answer
    assert "diverged" in answer["error"]
