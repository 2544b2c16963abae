"""perflab.instruments.workloads: registered builders, user targets and the workload contract."""

from __future__ import annotations

import pytest
import torch
from experiments import forget_package, write_user_package

from perflab.instruments import workloads
from perflab.instruments.workloads import Workload, WorkloadError
from perflab.pipeline import config

TINY = {
    "mlp": dict(dim=8, depth=2, num_classes=3, batch=4),
    "pointwise": dict(dim=8, depth=2, batch=4),
    "attention": dict(batch=2, heads=2, head_dim=4, seq=8),
    "convnet": dict(channels=4, image=8, num_classes=3, batch=4),
    "transformer": dict(vocab=32, dim=16, heads=2, depth=1, seq=8, batch=2),
}


@pytest.mark.parametrize("name", sorted(TINY))
def test_registry_builds_and_steps_on_cpu(name):
    w = workloads.build(name, "cpu", seed=0, **TINY[name])
    assert isinstance(w, Workload)
    assert w.name == name
    assert w.dtype == torch.float32
    x, y = w.batch_on("cpu")
    assert x.device.type == "cpu"
    out = w.model(x)
    loss = w.loss_fn(out, y)
    assert loss.dim() == 0 and torch.isfinite(loss)
    if w.make_optimizer is not None:
        opt = w.make_optimizer(w.model.parameters())
        loss.backward()
        opt.step()


def test_registered_names():
    assert set(workloads.REGISTRY) == {"mlp", "pointwise", "attention", "convnet", "transformer"}
    for name, fn in workloads.REGISTRY.items():
        assert workloads.resolve_target(name) is fn


def test_registered_parameters_read_from_the_source_are_the_builders():
    """What the workflow checks a config against without torch (perflab/core/targets.py) is what
    inspecting each registered builder gives."""
    from perflab.core import targets

    assert set(targets.registered()) == set(workloads.REGISTRY)
    for name, fn in workloads.REGISTRY.items():
        assert targets.registered()[name] == workloads._accepted(fn), name


def test_input_shape_and_parameter_count():
    w = workloads.build("mlp", "cpu", **TINY["mlp"])
    assert w.input_shape() == "[4, 8]"
    assert w.input_shape(2) == "[2, 8]"
    # 2 x Linear(8, 8) + Linear(8, 3)
    assert w.parameter_count() == 2 * (8 * 8 + 8) + (8 * 3 + 3)
    a = workloads.build("attention", "cpu", **TINY["attention"])
    assert a.input_shape() == "[3, 2, 2, 8, 4]"
    assert a.make_optimizer is None and a.parameter_count() == 0


@pytest.mark.parametrize("name", sorted(TINY))
def test_fixed_seed_is_reproducible(name):
    a = workloads.build(name, "cpu", seed=7, **TINY[name])
    torch.rand(100)  # disturb the global generator between the builds
    b = workloads.build(name, "cpu", seed=7, **TINY[name])
    for pa, pb in zip(a.model.parameters(), b.model.parameters(), strict=True):
        assert torch.equal(pa, pb)
    (xa, ya), (xb, yb) = a.make_batch(4), b.make_batch(4)
    assert torch.equal(xa, xb)
    assert (ya is None and yb is None) or torch.equal(ya, yb)
    # make_batch is itself deterministic (a fresh generator each call)
    assert torch.equal(a.make_batch(4)[0], xa)


def test_different_seed_differs():
    a = workloads.build("mlp", "cpu", seed=1, **TINY["mlp"])
    b = workloads.build("mlp", "cpu", seed=2, **TINY["mlp"])
    assert not torch.equal(next(a.model.parameters()), next(b.model.parameters()))
    assert not torch.equal(a.make_batch(4)[0], b.make_batch(4)[0])


# ---------------------------------------------------------------- user targets

USER_MODULE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from perflab.instruments.workloads import Workload

NOT_CALLABLE = 42


def make_workload(device, *, width=4, batch=2, seed=0):
    torch.manual_seed(seed)
    model = nn.Linear(width, 2).to(device)

    def make_batch(b):
        g = torch.Generator().manual_seed(seed + 1)
        return torch.randn(b, width, generator=g), torch.randint(0, 2, (b,), generator=g)

    return Workload(
        name="user", model=model, make_batch=make_batch, loss_fn=F.cross_entropy,
        batch_size=batch, description=f"user linear {width}",
        make_optimizer=lambda p: torch.optim.SGD(p, lr=0.1), optimizer_name="SGD",
    )


def wrong_type(device, **params):
    return {"model": None}


def batch_not_tuple(device, **params):
    w = make_workload(device, **params)
    w.make_batch = lambda b: torch.zeros(b, 4)
    return w


def batch_first_not_tensor(device, **params):
    w = make_workload(device, **params)
    w.make_batch = lambda b: ([0.0] * b, None)
    return w
"""


@pytest.fixture
def user_pkg(tmp_path, monkeypatch):
    """A package `<unique>.models` written into tmp_path and importable; yields its name."""
    pkg = write_user_package(tmp_path, monkeypatch, {
        "models": USER_MODULE,
        "broken": "def make_workload(device:\n",
        "raises": "raise RuntimeError('import-time failure')\n",
    })
    yield f"{pkg}.models"
    forget_package(pkg)


def test_user_target_builds(user_pkg):
    w = workloads.build(f"{user_pkg}:make_workload", "cpu", width=5, batch=3, seed=1)
    assert w.name == "user"
    assert w.description == "user linear 5"
    assert w.input_shape() == "[3, 5]"
    loss = w.loss_fn(w.model(w.make_batch(3)[0]), w.make_batch(3)[1])
    assert loss.dim() == 0


def test_user_target_through_config(user_pkg):
    from perflab.pipeline import config

    cfg = config.load(
        overrides={"device": "cpu", "workload": "mine",
                   "workloads": {"mine": {"target": f"{user_pkg}:make_workload", "width": 6}}}
    )
    target, params = config.workload_spec(cfg)
    w = workloads.build(target, "cpu", **params)
    assert w.description == "user linear 6"


@pytest.mark.parametrize(
    "attr, exc_match",
    [
        ("no_such_function", "has no 'no_such_function'"),
        ("NOT_CALLABLE", "'NOT_CALLABLE' is not callable"),
        ("wrong_type", "returned dict, expected perflab.instruments.workloads.Workload"),
        ("batch_not_tuple", "make_batch must return \\(x, y\\).*got Tensor"),
        ("batch_first_not_tensor", "make_batch must return \\(x, y\\)"),
    ],
)
def test_bad_user_targets(user_pkg, attr, exc_match):
    target = f"{user_pkg}:{attr}"
    with pytest.raises(WorkloadError, match=exc_match) as exc:
        workloads.build(target, "cpu")
    assert target in str(exc.value)


@pytest.mark.parametrize(
    "target, exc_match",
    [
        ("perflab_no_such_module_xyz:make", "cannot import 'perflab_no_such_module_xyz'"),
        ("perflab.no_such_submodule:make", "cannot import 'perflab.no_such_submodule'"),
        ("resnet50", "unknown workload 'resnet50'"),
        (":make", "must look like 'package.module:function'"),
        ("perflab.instruments.workloads:", "must look like 'package.module:function'"),
    ],
)
def test_bad_targets(target, exc_match):
    with pytest.raises(WorkloadError, match=exc_match):
        workloads.build(target, "cpu")




@pytest.mark.parametrize("mod", ["broken", "raises"])
def test_user_module_that_fails_to_import(user_pkg, mod, base_config):
    target = f"{user_pkg}.{mod}:make_workload"
    with pytest.raises(WorkloadError, match="cannot import"):
        workloads.build(target, "cpu")
    base_config["workloads"]["mine"] = {"target": target}
    with pytest.raises(config.ConfigError, match="workloads.mine.target"):
        config.resolve(base_config)


def test_bad_builder_options():
    with pytest.raises(WorkloadError, match="optimizer impl"):
        workloads.build("mlp", "cpu", optimizer="sgd", **TINY["mlp"])
    with pytest.raises(WorkloadError, match="attention impl"):
        workloads.build("attention", "cpu", impl="flash", **TINY["attention"])


# ---------------------------------------------------------------- cast


def test_cast_to_bfloat16():
    w = workloads.build("mlp", "cpu", **TINY["mlp"])
    out = workloads.cast(w, torch.bfloat16)
    assert out is w and w.dtype == torch.bfloat16
    assert all(p.dtype == torch.bfloat16 for p in w.model.parameters())
    x, y = w.make_batch(4)
    assert x.dtype == torch.bfloat16
    assert y.dtype == torch.int64  # class labels stay integers
    assert w.model(x).dtype == torch.bfloat16


def test_cast_casts_float_targets():
    w = workloads.cast(workloads.build("pointwise", "cpu", **TINY["pointwise"]), torch.bfloat16)
    x, y = w.batch_on("cpu")
    assert x.dtype == y.dtype == torch.bfloat16
    assert all(p.dtype == torch.bfloat16 for p in w.model.parameters())


def test_cast_same_dtype_is_identity():
    w = workloads.build("mlp", "cpu", **TINY["mlp"])
    make = w.make_batch
    assert workloads.cast(w, torch.float32) is w
    assert w.make_batch is make


# ---------------------------------------------------------------- attention


def test_attention_manual_matches_sdpa():
    params = dict(TINY["attention"], seed=3)
    manual = workloads.build("attention", "cpu", impl="manual", **params)
    sdpa = workloads.build("attention", "cpu", impl="sdpa", **params)
    x, _ = manual.make_batch(2)
    assert torch.equal(x, sdpa.make_batch(2)[0])
    a, b = manual.model(x), sdpa.model(x)
    assert a.shape == b.shape == (2, 2, 8, 4)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
