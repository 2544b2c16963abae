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
import torch
from experiments import forget_package, run_tiny, write_user_package

from perflab import cli
from perflab.core import io
from perflab.instruments import steps, workloads
from perflab.instruments.workloads import WorkloadError
from perflab.pipeline import config
from perflab.views import ledger

ROOT = Path(__file__).resolve().parents[1]
TEST_CONFIG = ROOT / "config" / "test.yaml"

USER_MODULE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from perflab.instruments.workloads import Workload


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


# ---- a workload with its own loader and train_step, and the ways each can be wrong


def _step(model, optimizer, batch):
    x, y = batch
    optimizer.zero_grad(set_to_none=True)
    loss = F.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


def own(device, *, loader=None, train_step=_step, width=8, batch=4):
    w = make_step(device, width=width, batch=batch)
    batches = [w.make_batch(batch) for _ in range(3)]
    return Workload(name="own", model=w.model, loader=batches if loader is None else loader,
                    train_step=train_step, batch_size=batch, description="own step",
                    make_optimizer=w.make_optimizer)


class Corrupt(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        raise ValueError(f"corrupt record {i}")


def loader_raises(device, **kw):
    return own(device, loader=torch.utils.data.DataLoader(Corrupt(), batch_size=4))


def loader_of_strings(device, **kw):
    return own(device, loader=[(["a", "b"], ["c", "d"])])


def loader_of_arrays(device, **kw):
    import numpy as np
    return own(device, loader=[(np.zeros((4, 8)), np.zeros((4, 1)))])


def loader_one_shot(device, **kw):
    return own(device, loader=(b for b in [(torch.zeros(4, 8), torch.zeros(4, 1))]))


def loader_empty(device, **kw):
    return own(device, loader=[])


def loader_factory_runs_dry(device, **kw):
    passes = []

    def epoch():  # a first epoch, then nothing
        passes.append(1)
        return [(torch.zeros(4, 8), torch.zeros(4, 1))] if len(passes) == 1 else []

    return own(device, loader=epoch)


def step_raises(device, **kw):
    def train_step(model, optimizer, batch):
        raise RuntimeError("boom in my step")
    return own(device, train_step=train_step)


def step_returns_nothing(device, **kw):
    return own(device, train_step=lambda model, optimizer, batch: None)


def step_returns_a_vector(device, **kw):
    return own(device, train_step=lambda model, optimizer, batch: model(batch[0]).sum(dim=1))
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
@pytest.mark.background
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
    ("wrong_shape", "returned tuple, expected perflab.instruments.workloads.Workload"),
    ("model_raises", "the model's forward raised \\(RuntimeError: boom in forward\\)"),
    ("builder_raises", "raised while building \\(ValueError: no such checkpoint\\)"),
    ("scalar_loss_missing", "loss_fn must return a scalar tensor, got \\[2, 1\\]"),
    # a loader and a train_step of the workload's own, each named before any measurement
    ("loader_raises", "loader raised on the first batch of pass 1 \\(ValueError: corrupt record"),
    ("loader_of_strings", "loader yields a batch with no tensor \\(tuple of str\\)"),
    ("loader_of_arrays", "loader yields numpy.ndarray in its batches: collate them"),
    ("loader_one_shot", "loader is a one-shot iterator \\(generator\\)"),
    ("loader_empty", "loader yielded no batch on pass 1"),
    ("loader_factory_runs_dry", "loader yielded no batch on pass 2"),
    ("step_raises", "the train_step raised \\(RuntimeError: boom in my step\\)"),
    ("step_returns_nothing", "train_step returned None: it must return the loss"),
    ("step_returns_a_vector", "train_step must return a scalar tensor, got \\[4\\]"),
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


@pytest.mark.parametrize("attr", ["make_step", "own"])
def test_check_accepts_a_good_target(user_module, attr, capsys):
    assert cli.main(["check", f"{user_module}:{attr}", "--device", "cpu"]) == 0
    assert "OK on cpu" in capsys.readouterr().out


def test_a_step_is_fed_from_its_loader_pass_after_pass(user_module):
    """perflab starts a new pass whenever the loader runs dry; a loader that fails mid-run
    is named."""
    w = workloads.build(f"{user_module}:own", "cpu")
    seen = []
    step = steps.build(w, "cpu")
    step.train_step = lambda model, optimizer, batch: seen.append(batch) or 0.0
    for _ in range(7):
        step()
    assert step.batches.passes == 3 and step.batches.drawn == 7
    assert seen[3] is w.loader[0] and seen[6] is w.loader[0]  # each pass from the start

    def flaky():
        yield w.loader[0]
        raise OSError("the file system went away")

    stream = steps.BatchStream(flaky)
    stream.next()
    with pytest.raises(WorkloadError, match="loader raised on batch 2 \\(OSError"):
        stream.next()


def test_the_default_step_is_the_chapters(user_module):
    """Without a train_step of its own a workload's step is zero_grad, forward, loss,
    backward, step on its batch: the same parameters as doing it by hand."""
    import copy

    w = workloads.build(f"{user_module}:make_step", "cpu")
    by_hand = copy.deepcopy(w.model)
    opt = w.make_optimizer(by_hand.parameters())
    step = steps.build(w, "cpu", resident=False)
    x, y = w.make_batch(w.batch_size)
    for _ in range(3):
        step()
        opt.zero_grad(set_to_none=True)
        w.loss_fn(by_hand(x), y).backward()
        opt.step()
    for a, b in zip(step.model.parameters(), by_hand.parameters(), strict=True):
        assert torch.equal(a, b)


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
    # a conv / attention forward does counted FLOPs, and at most its ceiling's worth (above
    # 100% the ceiling, not the step, would be wrong); the ledger shows R01's own row
    frac = float(fwd.value.iloc[0])
    assert 0 < frac <= 100
    r01 = measured[(measured.experiment == "R01") & (measured.variant == "phase/forward")
                   & (measured.metric == "flops_fraction") & (measured.status == "ok")]
    assert frac == pytest.approx(float(r01.value.iloc[0]), rel=1e-3)
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


def test_the_example_loader_and_step_are_what_e05_times(tmp_path, monkeypatch):
    """examples/mypkg/classifier.py (a DataLoader with a worker, autocast, clipping) passes the
    pre-flight, and E05 localizes its own step: the loader's wait, its copies, its forward,
    backward and optimizer step, each entered once a step."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    small = dict(vocab=50, seq=8, dim=16, depth=1, batch=8, examples=64, workers=1)
    w = workloads.check("mypkg.classifier:make_step", "cpu", **small)
    assert w.loader.num_workers == 1 and w.train_step is not None
    cfg = config.load([TEST_CONFIG], {"device": "cpu", "workload": "ex", "workloads": {
        "ex": {"target": "mypkg.classifier:make_step", **small}}})
    _, out = run_tiny(cfg, "E05", tmp_path)
    rows = io.read_results([out["csv"]])
    entries = rows[rows.metric == "entries_per_step"].set_index("variant").value
    for phase in ("input_wait", "host_to_device", "forward", "loss", "backward", "optimizer"):
        assert entries[f"sync/{phase}"] == 1, phase
    wait = rows[(rows.variant == "sync/input_wait") & (rows.metric == "phase_time")
                & (rows.statistic == "median")].value.iloc[0]
    assert wait > 0
    assert (rows.model == w.description).all()
