"""Interventions applied from outside an unmodified script (perflab/attach/patches.py, issue 42).

Each patch that can run on a CPU is run on a shipped example (or a small script written
here) in a fresh observed child, and the evidence must show the change took (the loader's
workers, the optimizer's resolved impl, Dynamo's graphs, the losses moving); a script
without the patch's target must say why it was not applied. The construction sites must
name the example's own line (found in its text), two seeded runs must give the same
losses and a change must move them, and every edit must parse.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from perflab.attach import patches, run
from perflab.instruments.energy import EnergyMeter

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "examples" / "scripts"

#: a small conv net on seeded-by-perflab data (it does not seed itself), K steps
CONV = """
import torch
from torch import nn

model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(),
                      nn.Linear(8 * 8 * 8, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(int(__import__("sys").argv[1])):
    x, y = torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def observe(tmp_path: Path, command: list[str], *, patch: dict | None = None,
            seed: int | None = None, loss_steps: int = 0, steps: int = 4) -> dict:
    """One observed child run (no verdict, no ceilings): its evidence."""
    script = Path(command[0]).resolve()
    settings = {"steps": steps, "seconds": None, "follow": False, "warmup": 2,
                "roots": [str(script.parent)], "no_step_s": 30, "no_work": True,
                "loss_steps": loss_steps}
    if patch:
        settings["patch"] = patch
    if seed is not None:
        settings["seed"] = seed
    out = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
    rc, ev, _ = run.run_child(command, settings, out)
    assert ev is not None, f"no evidence (rc {rc})"
    return ev


def line_of(path: Path, text: str) -> int:
    """The 1-based line of ``path`` holding ``text`` (the test finds it, never hard-codes)."""
    return next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if text in ln)


@pytest.fixture
def conv(tmp_path):
    p = tmp_path / "conv_train.py"
    p.write_text(CONV)
    return p


# ------------------------------------------------------------------ the loader


def test_loader_workers_applied_at_the_loader_line(tmp_path):
    script = SCRIPTS / "input_bound.py"
    ev = observe(tmp_path, [str(script), "--epochs", "1", "--delay-ms", "0.1"],
                 patch={"name": "loader_workers", "num_workers": 2})
    assert ev["status"]["exit"] == "stopped", ev["status"]
    p = ev["patch"]
    assert p["applied"] and p["error"] is None, p
    assert ev["loaders"][0]["num_workers"] == 2 and ev["loaders"][0]["persistent_workers"]
    assert "num_workers=0 -> 2" in p["detail"]
    loader_line = line_of(script, "loader = DataLoader(")
    assert p["where"] == [f"input_bound.py:{loader_line}: " + script.read_text().splitlines()[
        loader_line - 1].strip()]


def test_loader_workers_not_applied_without_a_loader(tmp_path):
    ev = observe(tmp_path, [str(SCRIPTS / "tiny_kernels.py"), "--depth", "4"],
                 patch={"name": "loader_workers"})
    assert ev["patch"]["applied"] is False
    assert ev["patch"]["error"] == "no DataLoader was constructed"
    # and the plan, from a baseline's evidence, says so before any run
    assert patches.REGISTRY["loader_workers"].applies(ev) == "no DataLoader was constructed"
    assert patches.REGISTRY["loader_pinned"].applies(ev) == "the script does not run on CUDA"


# ------------------------------------------------------------------ the optimizer


def test_fused_optimizer_rebuilds_at_construction(tmp_path):
    script = SCRIPTS / "optimizer_bound.py"
    cmd = [str(script), "--params", "20"]
    base = observe(tmp_path, cmd)
    assert [o["impl"] for o in base["optimizers_built"]] == ["forloop"]
    assert patches.REGISTRY["fused_optimizer"].applies(base) == ""
    ev = observe(tmp_path, cmd, patch={"name": "fused_optimizer"})
    assert ev["patch"]["applied"], ev["patch"]
    assert [o["impl"] for o in ev["optimizers_built"]] == ["fused"]
    assert ev["patch"]["detail"] == "Adam(fused=None -> True)"
    # planned again from the patched run: already fused
    assert patches.REGISTRY["fused_optimizer"].applies(ev) == "the optimizer is already fused"
    opt_line = line_of(script, "opt = torch.optim.Adam(")
    assert ev["sites"]["optimizer"][0].startswith(f"optimizer_bound.py:{opt_line}: ")


def test_foreach_optimizer_and_a_class_that_refuses(tmp_path):
    ev = observe(tmp_path, [str(SCRIPTS / "input_bound.py"), "--epochs", "1",
                            "--delay-ms", "0"], patch={"name": "foreach_optimizer"})
    assert ev["patch"]["applied"] and ev["optimizers_built"][0]["impl"] == "foreach"
    refused = {"optimizers_built": [{"class": "LBFGS", "impl": "forloop"}]}
    assert "does not take fused=" in patches.REGISTRY["fused_optimizer"].applies(refused)


# ------------------------------------------------------------------ the model


def test_compile_default_runs_the_model_compiled(tmp_path):
    script = SCRIPTS / "tiny_kernels.py"
    ev = observe(tmp_path, [str(script), "--depth", "4"],
                 patch={"name": "compile_default", "backend": "eager"})
    assert ev["patch"]["applied"], ev["patch"]
    assert ev["dynamo_final"].get("stats.unique_graphs", 0) >= 1
    assert ev["sites"]["model"] and ev["patch"]["where"] == ev["sites"]["model"]


def test_compile_dynamic_patches_the_scripts_own_compile(tmp_path):
    script = SCRIPTS / "recompile.py"
    ev = observe(tmp_path, [str(script), "--backend", "eager"],
                 patch={"name": "compile_dynamic"})
    assert ev["patch"]["applied"], ev["patch"]
    where = line_of(script, "torch.compile(")
    assert ev["patch"]["where"][0].startswith(f"recompile.py:{where}: ")


def test_compile_dynamic_without_a_compile_call(tmp_path):
    none = observe(tmp_path, [str(SCRIPTS / "tiny_kernels.py"), "--depth", "2"],
                   patch={"name": "compile_dynamic"})
    assert not none["patch"]["applied"]
    assert none["patch"]["error"] == "no torch.compile call was seen"
    assert patches.REGISTRY["compile_dynamic"].applies(none) == "no torch.compile call was seen"


def test_seeded_losses_agree_and_another_seed_moves_them(tmp_path, conv):
    cmd = [str(conv), "40"]
    a = observe(tmp_path, cmd, seed=0, loss_steps=6)
    b = observe(tmp_path, cmd, seed=0, loss_steps=6)
    assert len(a["losses"]) == 6 and a["losses"] == b["losses"]
    other = observe(tmp_path, cmd, seed=1, loss_steps=6)
    assert other["losses"] != a["losses"]


def test_sites_and_bf16_autocast_moves_the_losses(tmp_path, conv):
    cmd = [str(conv), "40"]
    a = observe(tmp_path, cmd, seed=0, loss_steps=6)
    bf16 = observe(tmp_path, cmd, seed=0, loss_steps=6,
                   patch={"name": "autocast_bf16"})
    assert bf16["patch"]["applied"], bf16["patch"]
    # the first forward ran before the patch took (eager fp32): the same loss; after, not
    assert bf16["losses"][0] == a["losses"][0] and bf16["losses"][1:] != a["losses"][1:]
    assert a["sites"]["model"] == [f"conv_train.py:{line_of(conv, 'model = nn.Sequential(')}"
                                   ": model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), "
                                   "nn.ReLU(), nn.Flatten(),"]
    assert a["sites"]["optimizer"][0].startswith(f"conv_train.py:{line_of(conv, 'opt = ')}:")
    assert a["model_info"][0]["conv2d"] == 1


def test_fp16_autocast_with_a_grad_scaler_keeps_the_unscaled_loss(tmp_path, conv):
    """planned on CUDA only, but the mechanism runs on a CPU too (torch's CPU fp16
    autocast and GradScaler): the kept losses are the script's, not the scaled ones."""
    ev = observe(tmp_path, [str(conv), "40"], seed=0, loss_steps=4,
                 patch={"name": "autocast_fp16"})
    assert ev["patch"]["applied"] and "GradScaler" in ev["patch"]["detail"], ev["patch"]
    assert all(0 < v < 20 for v in ev["losses"]), ev["losses"]  # 65536x scaled would not
    assert patches.REGISTRY["autocast_fp16"].applies(ev) == "the script does not run on CUDA"


def test_channels_last_on_a_conv_model_only(tmp_path, conv):
    ev = observe(tmp_path, [str(conv), "40"], patch={"name": "channels_last"})
    assert ev["patch"]["applied"] and "channels_last" in ev["patch"]["detail"]
    assert patches.REGISTRY["channels_last"].applies(ev) == ""
    assert patches.REGISTRY["channels_last"].applies(
        {"models": ["MLP"], "model_info": [{"conv2d": 0}]}) == "not a conv model (no Conv2d)"


# ------------------------------------------------------------------ the edits, the option


@pytest.mark.parametrize("name,site,expect", [
    ("loader_workers", "train.py:42: loader = DataLoader(ds, batch_size=16)",
     "num_workers=2"),
    ("loader_pinned", "train.py:42: loader = DataLoader(ds, batch_size=16)", "pin_memory=True"),
    ("fused_optimizer", "train.py:7: opt = torch.optim.AdamW(model.parameters(), lr=1e-3)",
     "fused=True"),
    ("foreach_optimizer", "train.py:7: opt = torch.optim.Adam(m.parameters(), foreach=False)",
     "foreach=True"),
    ("compile_dynamic", "train.py:9: step = torch.compile(model, dynamic=False)",
     "dynamic=True"),
])
def test_edit_is_a_diff_that_parses(name, site, expect):
    diff = patches.REGISTRY[name].edit(site, {"num_workers": 2})
    minus, plus = diff.splitlines()
    assert minus == "- " + site.partition(": ")[2]
    ast.parse(plus[2:])
    assert expect in plus and plus.count(expect.split("=")[0] + "=") == 1


def test_edit_of_a_call_spanning_lines_is_said_in_words():
    site = "input_bound.py:36: loader = DataLoader(SlowDataset(4096, 64, 1), batch_size=16,"
    assert patches.REGISTRY["loader_pinned"].edit(site, {}) == (
        "add pin_memory=True to the DataLoader(...) call at input_bound.py:36")


def test_patch_spec_and_its_errors():
    assert patches.parse_spec("loader_workers:num_workers=3,persistent=False") == {
        "name": "loader_workers", "num_workers": 3, "persistent": False}
    assert patches.parse_spec("compile_default:backend=eager")["backend"] == "eager"
    with pytest.raises(ValueError, match="unknown patch 'nope'"):
        patches.parse_spec("nope")
    with pytest.raises(ValueError, match="is not k=v"):
        patches.parse_spec("tf32:oops")


def test_perflab_run_patch_option_says_the_patch(tmp_path):
    r = subprocess.run([sys.executable, "-m", "perflab", "run", "--steps", "4", "--warmup", "2",
                        "--seed", "0", "--patch", "fused_optimizer", "--out", str(tmp_path / "o"),
                        "--", sys.executable, str(SCRIPTS / "optimizer_bound.py"),
                        "--params", "20"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "patch fused_optimizer: applied (Adam(fused=None -> True)) at optimizer_bound.py:" \
        in r.stderr
    assert "- **Patch**: patch fused_optimizer: applied" in (tmp_path / "o" / "diagnosis.md"
                                                            ).read_text()


def test_perflab_run_refuses_an_unknown_patch():
    bad = subprocess.run([sys.executable, "-m", "perflab", "run", "--patch", "nope", "--",
                          sys.executable, str(SCRIPTS / "optimizer_bound.py")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "unknown patch 'nope'" in bad.stderr


# ------------------------------------------------------------------ energy


def test_rapl_counter_wraps_and_a_missing_one_says_why(tmp_path):
    (tmp_path / "max_energy_range_uj").write_text("1000000\n")
    (tmp_path / "energy_uj").write_text("900000\n")
    m = EnergyMeter.rapl(tmp_path)
    assert m.describe() == {"instrument": "RAPL package 0", "unit": "J", "reason": ""}
    first = m.read_j()
    (tmp_path / "energy_uj").write_text("100000\n")  # wrapped past the range
    assert m.read_j() - first == pytest.approx(0.2)
    gone = EnergyMeter.rapl(tmp_path / "absent")
    assert gone.read_j() is None and gone.describe()["instrument"] is None
    assert "not readable" in gone.describe()["reason"]
