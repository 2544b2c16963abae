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
import torch

from perflab.attach import patches, run
from perflab.instruments.energy import EnergyMeter

#: every test here drives fresh observed children (about 2 minutes on 2 cores): they run in
#: the background session, on the core the shared run leaves (tests/shared_run.py), which
#: had half the suite's wall idle before (the suite's timeline line says the split)
pytestmark = pytest.mark.background

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


#: the conv script with the script's own mixed precision (autocast + a GradScaler)
AMP = CONV.replace("import torch\n", "import torch\nscaler = torch.amp.GradScaler('cpu')\n"
                   ).replace("    loss = nn", "    with torch.autocast('cpu', dtype=torch.bfloat16):\n"
                             "        loss = nn")


@pytest.fixture
def conv(tmp_path):
    p = tmp_path / "conv_train.py"
    p.write_text(CONV)
    return p


def clipping(text: str) -> str:
    """The script clipping its gradients before each step (the AMP recipe's case)."""
    return text.replace("    opt.step()", "    torch.nn.utils.clip_grad_norm_("
                        "model.parameters(), 1.0)\n    opt.step()")


@pytest.fixture
def clipped(tmp_path):
    p = tmp_path / "clipped_train.py"
    p.write_text(clipping(CONV))
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
    # 2 workers beside the step's own threads: said where they outnumber the cores
    over = patches.oversubscribed(2, torch.get_num_threads(), patches.usable_cores())
    assert (over in p["detail"]) if over else "oversubscribed" not in p["detail"]
    loader_line = line_of(script, "loader = DataLoader(")
    assert p["where"] == [f"input_bound.py:{loader_line}: " + script.read_text().splitlines()[
        loader_line - 1].strip()]


def test_workers_and_threads_beyond_the_cores_are_said_oversubscribed():
    assert patches.oversubscribed(4, 2, 2).startswith(
        "oversubscribed: 4 workers + 2 intra-op threads on 2 cores")
    assert patches.oversubscribed(3, 1, 4) == ""


def test_loader_workers_not_applied_without_a_loader(tmp_path):
    ev = observe(tmp_path, [str(SCRIPTS / "tiny_kernels.py"), "--depth", "4"],
                 patch={"name": "loader_workers"})
    assert ev["patch"]["applied"] is False
    assert ev["patch"]["error"] == "no DataLoader was constructed"
    # and the plan, from a baseline's evidence, says so before any run
    assert patches.REGISTRY["loader_workers"].applies(ev) == "no DataLoader was constructed"
    # pinning needs CUDA first, then a loader: on a GPU (the example runs there) the loader
    assert patches.REGISTRY["loader_pinned"].applies(ev) == (
        "no DataLoader was constructed" if ev.get("cuda") else "the script does not run on CUDA")


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


#: a script whose loader and optimizer already have what the patches set
ALREADY = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

ds = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
loader = DataLoader(ds, batch_size=8, pin_memory=True)
model = nn.Linear(8, 2)
opt = torch.optim.Adam(model.parameters(), fused=True)
for x, y in loader:
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad()
"""


@pytest.mark.parametrize("name,said", [
    ("fused_optimizer", "the optimizer at already.py:{opt} is already fused"),
    ("loader_pinned", "the DataLoader at already.py:{loader} already has pin_memory=True"),
])
def test_a_patch_whose_change_is_already_there_says_so(tmp_path, name, said):
    script = tmp_path / "already.py"
    script.write_text(ALREADY)
    ev = observe(tmp_path, [str(script)], patch={"name": name})
    assert not ev["patch"]["applied"], ev["patch"]
    assert ev["patch"]["error"].startswith(said.format(opt=line_of(script, "opt = "),
                                                       loader=line_of(script, "loader = ")))


# ------------------------------------------------------------------ the model


def test_compile_default_runs_the_model_compiled(tmp_path):
    script = SCRIPTS / "tiny_kernels.py"
    ev = observe(tmp_path, [str(script), "--depth", "4"],
                 patch={"name": "compile_default", "backend": "eager"})
    assert ev["patch"]["applied"], ev["patch"]
    assert ev["dynamo_final"].get("stats.unique_graphs", 0) >= 1
    assert ev["sites"]["model"] and ev["patch"]["where"] == ev["sites"]["model"]


def test_compile_default_captures_a_model_of_torchs_own_classes(tmp_path, conv):
    """nn.Sequential: Module.compile() would capture nothing (torch's files are skipped as
    top frames); the patch's own frame must give Dynamo a graph, and the edit is the
    torch.compile that works for it."""
    ev = observe(tmp_path, [str(conv), "40"], patch={"name": "compile_default",
                                                     "backend": "eager"})
    assert ev["patch"]["applied"], ev["patch"]
    assert ev["dynamo_final"].get("stats.unique_graphs", 0) >= 1
    assert ev["patch"]["edit"].startswith("wrap the model constructed at conv_train.py:")
    one_line = patches.REGISTRY["compile_reduce_overhead"].edit(
        "train.py:3: model = Net(4).to(dev)", {})
    assert one_line == ("- model = Net(4).to(dev)\n"
                        "+ model = torch.compile(Net(4).to(dev), mode='reduce-overhead')")


def test_compile_dynamic_patches_the_scripts_own_compile(tmp_path):
    script = SCRIPTS / "recompile.py"
    ev = observe(tmp_path, [str(script), "--backend", "eager", "--depth", "1"],
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
    # autocast goes where the script calls the model: that line, and a diff that parses
    fwd = line_of(conv, "model(x)")
    assert a["sites"]["forward"] == bf16["patch"]["where"] == [
        f"conv_train.py:{fwd}: loss = nn.functional.cross_entropy(model(x), y)"]
    minus, plus = bf16["patch"]["edit"].splitlines()
    assert plus.startswith("+ with torch.autocast('cpu', dtype=torch.bfloat16): loss = ")
    ast.parse(plus[2:])
    assert patches.edit_for("autocast_bf16", a, {"device": "cpu"}) == bf16["patch"]["edit"]
    # from the patched run alone: the device it acted on, not the default 'cuda'
    assert patches.edit_for("autocast_bf16", bf16) == bf16["patch"]["edit"]


def test_fp16_autocast_with_a_grad_scaler_keeps_the_unscaled_loss(tmp_path, clipped):
    """planned on CUDA only, but the mechanism runs on a CPU too (torch's CPU fp16
    autocast and GradScaler): the kept losses are the script's, not the scaled ones; the
    script's clipping sees unscaled gradients; a step the scaler skips is still a step."""
    cmd = [str(clipped), "40"]
    base = observe(tmp_path, cmd, seed=0, loss_steps=4)
    ev = observe(tmp_path, cmd, seed=0, loss_steps=4, patch={"name": "autocast_fp16"})
    p = ev["patch"]
    assert p["applied"] and "GradScaler around SGD.step" in p["detail"], p
    assert "gradients unscaled before clip_grad_norm_" in p["detail"]
    assert all(0 < v < 20 for v in ev["losses"]), ev["losses"]  # 65536x scaled would not
    assert len(ev["steps"]) == len(base["steps"])
    assert ev["amp"] == {"autocast": {}, "grad_scaler": []}  # the patch's scaler is not the script's
    assert patches.REGISTRY["autocast_fp16"].applies(ev) == "the script does not run on CUDA"


def test_fp16_without_a_loss_backward_says_no_scaler_was_wired(tmp_path):
    script = tmp_path / "autograd_train.py"
    script.write_text(CONV.replace("loss.backward()", "torch.autograd.backward(loss)"))
    ev = observe(tmp_path, [str(script), "20"], patch={"name": "autocast_fp16"})
    assert not ev["patch"]["applied"]
    assert ev["patch"]["error"].startswith("no loss.backward() on a scalar loss was seen")
    assert "stepped unscaled" in ev["patch"]["detail"]


def test_the_scripts_own_mixed_precision_is_seen_and_not_doubled(tmp_path):
    script = tmp_path / "amp_train.py"
    script.write_text(AMP)
    base = observe(tmp_path, [str(script), "40"])
    assert base["amp"]["autocast"] == {"cpu": "bfloat16"}
    assert base["amp"]["grad_scaler"] == [f"amp_train.py:{line_of(script, 'GradScaler')}: "
                                          "scaler = torch.amp.GradScaler('cpu')"]
    assert patches.REGISTRY["autocast_bf16"].applies(base) == (
        "the script's forward already runs under autocast (cpu: bfloat16)")
    assert patches.REGISTRY["autocast_fp16"].applies({**base, "cuda": True}).startswith(
        "the script's forward already runs under autocast")
    assert patches._script_scales(base).startswith("the script already has a GradScaler")
    # forced anyway: the child sees the script's scaler and says the loss was scaled twice
    ev = observe(tmp_path, [str(script), "40"], patch={"name": "autocast_fp16"})
    assert not ev["patch"]["applied"]
    assert ev["patch"]["error"].startswith("the script has its own GradScaler (amp_train.py:")


def test_channels_last_on_a_conv_model_only(tmp_path, conv):
    ev = observe(tmp_path, [str(conv), "40"], patch={"name": "channels_last"})
    assert ev["patch"]["applied"] and "channels_last" in ev["patch"]["detail"]
    assert patches.REGISTRY["channels_last"].applies(ev) == ""
    assert patches.REGISTRY["channels_last"].applies(
        {"models": ["MLP"], "model_info": [{"conv2d": 0}]}) == "not a conv model (no Conv2d)"
    assert patches.REGISTRY["channels_last"].edit("t.py:3: model = Net().cuda()", {}) == (
        "- model = Net().cuda()\n+ model = Net().cuda().to(memory_format=torch.channels_last)"
        "  # and each 4-D input x.contiguous(memory_format=torch.channels_last)")
    mlp = observe(tmp_path, [str(SCRIPTS / "tiny_kernels.py"), "--depth", "2"],
                  patch={"name": "channels_last"})
    assert not mlp["patch"]["applied"]
    assert mlp["patch"]["error"] == "not a conv model (no Conv2d)"


@pytest.mark.parametrize("name,why", [
    ("tf32", "the run did not use CUDA: TF32 is a CUDA tensor-core mode"),
    ("expandable_segments", "the run did not use CUDA: the CUDA caching allocator"),
    ("compile_reduce_overhead", "the run did not use CUDA: reduce-overhead's CUDA graphs"),
    ("loader_pinned", "the run did not use CUDA: pinned host memory"),
])
def test_a_cuda_only_patch_on_a_cpu_run_says_why(tmp_path, conv, name, why, monkeypatch):
    monkeypatch.setenv(patches.ALLOC_ENV, "max_split_size_mb:64")
    cmd = [str(SCRIPTS / "input_bound.py"), "--epochs", "1", "--delay-ms", "0", "--device",
           "cpu"] if name == "loader_pinned" else [str(conv), "20"]
    ev = observe(tmp_path, cmd, patch={"name": name, "backend": "eager"})
    assert not ev["patch"]["applied"] and ev["patch"]["error"].startswith(why), ev["patch"]
    assert patches.REGISTRY[name].applies(ev) == "the script does not run on CUDA"
    if name == "expandable_segments":  # reached the child, merged with the user's setting
        assert ev["allocator_conf"] == "max_split_size_mb:64,expandable_segments:True"
        assert "in the process's environment from its start" in ev["patch"]["detail"]


def test_child_env_merges_the_users_allocator_settings():
    spec = {"name": "expandable_segments"}
    assert patches.child_env(spec, {}) == {patches.ALLOC_ENV: "expandable_segments:True"}
    assert patches.child_env(spec, {patches.ALLOC_ENV: "expandable_segments:False,"
                                    "max_split_size_mb:64"}) == {
        patches.ALLOC_ENV: "max_split_size_mb:64,expandable_segments:True"}
    # torch >= 2.9 reads PYTORCH_ALLOC_CONF first: the user's own variable is the one merged
    assert patches.child_env(spec, {patches.ALLOC_ENV_NEW: "backend:native"}) == {
        patches.ALLOC_ENV_NEW: "backend:native,expandable_segments:True"}
    assert patches.child_env({"name": "tf32"}, {}) == {}


# ------------------------------------------------------------------ a patch that fails


def test_a_patch_that_cannot_be_applied_stops_the_child_with_its_traceback(tmp_path, conv):
    ev = observe(tmp_path, [str(conv), "20"], patch={"name": "nope"})
    assert ev["steps"] == [] and ev["status"]["exit"] == "raised"
    assert ev["patch"]["error"].startswith("the patch raised before the script ran: "
                                           "ValueError: unknown patch 'nope'")
    assert "Traceback" in ev["patch"]["traceback"] and "Traceback" in ev["status"]["traceback"]


def test_a_patch_that_makes_the_script_raise_is_in_the_evidence(tmp_path):
    ev = observe(tmp_path, [str(SCRIPTS / "input_bound.py"), "--epochs", "1"],
                 patch={"name": "loader_workers", "num_workers": -1})
    assert ev["status"]["exit"] == "raised"
    assert ev["patch"]["raised"] == ev["status"]["exception"]
    assert "num_workers" in ev["patch"]["raised"]
    assert "input_bound.py" in ev["status"]["traceback"]  # the script's frames, for the user


# ------------------------------------------------------------------ the edits, the option


@pytest.mark.parametrize("name,site,expect", [
    ("loader_workers", "train.py:42: loader = DataLoader(ds, batch_size=16)",
     "num_workers=2"),
    ("loader_pinned", "train.py:42: loader = DataLoader(ds, batch_size=16)", "pin_memory=True"),
    ("fused_optimizer", "train.py:7: opt = torch.optim.AdamW(model.parameters(), lr=1e-3)",
     "fused=True"),
    ("foreach_optimizer", "train.py:7: opt = torch.optim.Adam(m.parameters(), foreach=False)",
     "foreach=True"),
    ("fused_optimizer", "train.py:7: opt = torch.optim.Adam(m.parameters(), foreach=True)",
     "fused=True"),
    ("compile_dynamic", "train.py:9: step = torch.compile(model, dynamic=False)",
     "dynamic=True"),
])
def test_edit_is_a_diff_that_parses(name, site, expect):
    diff = patches.REGISTRY[name].edit(site, {"num_workers": 2})
    minus, plus = diff.splitlines()
    assert minus == "- " + site.partition(": ")[2]
    ast.parse(plus[2:])
    assert expect in plus and plus.count(expect.split("=")[0] + "=") == 1
    assert "foreach=True, fused=True" not in plus  # torch refuses the two together


def test_edit_for_picks_the_site_of_the_patchs_kind():
    ev = {"sites": {"loader": ["t.py:4: dl = DataLoader(ds)"], "model": [], "forward": [
        "t.py:9: out = model(x)"]}}
    assert patches.edit_for("loader_pinned", ev) == (
        "- dl = DataLoader(ds)\n+ dl = DataLoader(ds, pin_memory=True)")
    assert patches.edit_for("autocast_fp16", ev).startswith(
        "- out = model(x)\n+ with torch.autocast('cuda', dtype=torch.float16): out = model(x)")
    assert patches.edit_for("compile_default", ev) == ""  # no model site: no line to edit
    assert patches.edit_for("tf32", ev).startswith('+ torch.set_float32_matmul_precision("high")')


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
    md = (tmp_path / "o" / "diagnosis.md").read_text()
    assert "- **Patch**: patch fused_optimizer: applied" in md
    line = line_of(SCRIPTS / "optimizer_bound.py", "opt = torch.optim.Adam(")
    code = (SCRIPTS / "optimizer_bound.py").read_text().splitlines()[line - 1].strip()
    assert f"```diff\n- {code}\n+ " in md and "fused=True" in md.split("```diff")[1]
    assert f"perflab run: the edit:\n    - {code}" in r.stderr


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


# ------------------------------------------------------------------ on CUDA (the H200)

CUDA_CONV = CONV.replace("nn.Linear(8 * 8 * 8, 10))", "nn.Linear(8 * 8 * 8, 10)).cuda()").replace(
    "torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,))",
    "torch.randn(4, 3, 8, 8, device='cuda'), torch.randint(0, 10, (4,), device='cuda')")
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.fixture
def cuda_conv(tmp_path):
    p = tmp_path / "cuda_train.py"
    p.write_text(clipping(CUDA_CONV))
    return p


@cuda
@pytest.mark.parametrize("name,params,shows", [
    ("autocast_fp16", {}, "GradScaler around SGD.step"),
    ("autocast_bf16", {}, "torch.autocast('cuda', dtype=torch.bfloat16)"),
    ("tf32", {}, "precision highest -> high"),
    ("expandable_segments", {}, "expandable_segments:True (in the process's environment"),
    ("compile_reduce_overhead", {}, "mode='reduce-overhead'"),
    ("channels_last", {}, "channels_last"),
])
def test_cuda_patches_apply_on_a_cuda_run(tmp_path, cuda_conv, name, params, shows):
    cmd = [str(cuda_conv), "60"]
    base = observe(tmp_path, cmd, seed=0, loss_steps=4)
    assert base["cuda"] and patches.REGISTRY[name].applies(base) == "", base.get("amp")
    ev = observe(tmp_path, cmd, seed=0, loss_steps=4, patch={"name": name, **params})
    assert ev["patch"]["applied"], ev["patch"]
    assert shows in ev["patch"]["detail"], ev["patch"]["detail"]
    assert len(ev["steps"]) == len(base["steps"])
    assert all(0 < v < 20 for v in ev["losses"]), ev["losses"]  # finite, unscaled
    if name == "compile_reduce_overhead":
        assert ev["dynamo_final"].get("stats.unique_graphs", 0) >= 1
    if name == "expandable_segments":
        assert "expandable_segments:True" in ev["allocator_conf"]
    if name == "tf32":
        assert ev["float32_matmul_precision"] == "high" and ev["cuda_matmul_allow_tf32"]


@cuda
def test_loader_pinned_applies_on_a_cuda_run(tmp_path):
    script = SCRIPTS / "input_bound.py"
    ev = observe(tmp_path, [str(script), "--epochs", "1", "--delay-ms", "0", "--device", "cuda"],
                 patch={"name": "loader_pinned"})
    assert ev["cuda"] and ev["patch"]["applied"] and ev["loaders"][0]["pin_memory"], ev["patch"]


#: the user's own subclasses: each constructor's super().__init__() is inside the user's
#: files, and the site must still be the line that built the object
SUBCLASSES = """
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.body = nn.Linear(dim, 1)

    def forward(self, x):
        return self.body(x)


class Loader(DataLoader):
    def __init__(self, ds):
        super().__init__(ds, batch_size=4)


class MyAdam(torch.optim.Adam):
    def __init__(self, params):
        super().__init__(params, lr=1e-3)


def build():
    return Net(8)


model = build()
loader = Loader(TensorDataset(torch.randn(400, 8), torch.randn(400, 1)))
opt = MyAdam(model.parameters())
for x, y in loader:
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_construction_sites_are_the_outermost_user_line(tmp_path):
    """A model, loader and optimizer of the user's own classes: the site is the line that
    built each one (a helper's ``return Net(8)`` included), never the ``super().__init__()``
    inside its class; the patches act and their diffs go on those lines."""
    script = tmp_path / "subclassed.py"
    script.write_text(SUBCLASSES)
    base = observe(tmp_path, [str(script)])

    def at(text):
        n = line_of(script, text)
        return f"subclassed.py:{n}: {script.read_text().splitlines()[n - 1].strip()}"
    assert base["sites"]["model"] == [at("return Net(8)")]
    assert base["sites"]["loader"] == [at("loader = Loader(")]
    assert base["sites"]["optimizer"] == [at("opt = MyAdam(")]
    assert patches.edit_for("compile_default", base) == (  # not an assignment: in words
        f"wrap the model constructed at subclassed.py:{line_of(script, 'return Net(8)')} in "
        "torch.compile(model)")
    workers = observe(tmp_path, [str(script)], patch={"name": "loader_workers",
                                                      "num_workers": 1})
    assert workers["patch"]["where"] == [at("loader = Loader(")], workers["patch"]
    assert workers["patch"]["edit"].startswith("- loader = Loader(")
    assert workers["patch"]["edit"].endswith("# Loader must pass num_workers, persistent_workers "
                                            "on to DataLoader")
    fused = observe(tmp_path, [str(script)], patch={"name": "foreach_optimizer"})
    assert fused["patch"]["where"] == [at("opt = MyAdam(")], fused["patch"]
    assert fused["patch"]["edit"] == ("- opt = MyAdam(model.parameters())\n"
                                      "+ opt = MyAdam(model.parameters(), foreach=True)  "
                                      "# MyAdam must pass foreach on to torch.optim")


def test_optimizer_bound_model_site_is_its_construction_line(tmp_path):
    script = SCRIPTS / "optimizer_bound.py"
    ev = observe(tmp_path, [str(script), "--params", "20"])
    n = line_of(script, "model = Adapters(")
    assert ev["sites"]["model"] == [f"optimizer_bound.py:{n}: model = Adapters(args.params, "
                                    "8).to(args.device)"]
    assert patches.edit_for("compile_default", ev) == (
        "- model = Adapters(args.params, 8).to(args.device)\n"
        "+ model = torch.compile(Adapters(args.params, 8).to(args.device))")


def test_compile_default_on_the_input_bound_script_compiles_once(tmp_path):
    """input_bound.py's nn.Sequential, fed by a DataLoader: a graph is captured (the row is
    no 'does not apply'), and the observers' hooks move off the global ones before the
    first compiled call, so Dynamo (which guards on them) does not recompile at the first
    timed step."""
    script = SCRIPTS / "input_bound.py"
    ev = observe(tmp_path, [str(script), "--epochs", "1", "--delay-ms", "0.1"], steps=8,
                 patch={"name": "compile_default", "backend": "eager"})
    assert ev["patch"]["applied"], ev["patch"]
    assert ev["dynamo_final"].get("stats.unique_graphs") == 1, ev["dynamo_final"]
    assert ev["recompiles"] == []
    # the phases are still read, from the model's own hooks
    timed = [r for r in ev["steps"] if r["kind"] == "observed"]
    assert timed and all(r["phases_ms"].get("forward", 0) > 0 for r in timed)
