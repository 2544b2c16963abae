"""W01 (what if): every verdict can come out either way, on changes whose effect is known.

A planted optimizer that sleeps unless fused makes the real ``fused_optimizer`` faster; no
change is not resolved (held to an A/A floor, as a run with C00 is); a sleep added is
slower; a tripled learning rate fails the one-step check; a failing change is a row that
says why; an intervention that does not apply is a row (or, when named, an error) that
says why. No test asserts a time.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pandas as pd
import planted
import pytest
import torch
from conftest import TEST_CONFIG
from experiments import load_script

from perflab.core import io
from perflab.core.names import SAMPLING_DECISION, SAMPLING_FIXED_PAIRS
from perflab.experiments import floors as calibration
from perflab.experiments import w01_whatif as w01
from perflab.experiments.c00_calibration import AA_FLOOR
from perflab.experiments.w01_whatif import transforms, whatif
from perflab.instruments import workloads
from perflab.pipeline import config, runner

SCRIPT = load_script("w01_whatif")
PLANTED = {"target": "planted:slow_optimizer_mlp", "params": {"seed": 0}}
#: an A/A floor as C00 writes it: a no-op must exceed it to be called a change
FLOOR_PCT = 5.0


def _contract(tiny_cfg, name="plan", workload=None, **params):
    c = copy.deepcopy(config.contract(tiny_cfg, "W01"))
    c["threads"] = 1
    if workload is not None:
        c["workload"], c["workloads"] = "planted", {"planted": workload}
    c["params"].update({"blocks": 6, "inner": 10, "peak_calls": 0, **params})
    return c if name == "plan" else whatif.intervention_contract(c, name)


def _run(contract, out_dir: Path, job: str, measure) -> pd.DataFrame:
    out = whatif.job_outputs(out_dir, job)
    saved = torch.get_num_threads()
    try:
        runner.execute("W01", measure, contract, out)
    finally:
        torch.set_num_threads(saved)
    return io.read_results([out["csv"]])


def _floor_row() -> dict:
    variant, metric = AA_FLOOR
    return {"experiment": "C00", "variant": variant, "workload": "mlp", "model": "m",
            "input_shape": "[1]", "dtype": "float32", "device": "cpu", "device_name": "cpu",
            "mode": "train", "execution": "eager", "metric": metric,
            "window": "w", "sync_boundary": "s", "statistic": "value", "value": FLOOR_PCT,
            "unit": "%", "n": 12, "status": "ok", "reason": ""}


@pytest.fixture(scope="module")
def planted_runs(tiny_cfg, tmp_path_factory):
    """The five planted changes, each measured as its own job would, in one frame."""
    d = tmp_path_factory.mktemp("w01")
    frames = [_run(_contract(tiny_cfg, "fused_optimizer", PLANTED), d, "fused_optimizer",
                   SCRIPT.measure_one)]
    for iv in (planted.NOOP, planted.SLOWER, planted.WRONG, planted.BROKEN):
        frames.append(_run(_contract(tiny_cfg, iv.name, PLANTED), d, iv.name,
                           lambda ctx, iv=iv: SCRIPT.measure_intervention(ctx, iv)))
    return pd.concat([*frames, pd.DataFrame([_floor_row()])], ignore_index=True)


@pytest.fixture(scope="module")
def known_answers(tiny_cfg, tmp_path_factory):
    """A no-op and a tripled learning rate on a model with dropout 0.5 (examples/known), and
    a no-op on a step that differs from itself (planted.unrepeatable_mlp)."""
    from conftest import REPO_ROOT

    d = tmp_path_factory.mktemp("w01_known")
    frames = []
    import sys
    sys.path.insert(0, str(REPO_ROOT / "examples"))
    try:
        for target, ivs in (("known.dropout:make_step", (planted.NOOP, planted.WRONG)),
                            ("planted:unrepeatable_mlp", (planted.NOOP, planted.WRONG))):
            spec = {"target": target, "params": {"seed": 0}}
            for iv in ivs:
                rows = _run(_contract(tiny_cfg, iv.name, spec, blocks=2, inner=2), d, iv.name,
                            lambda ctx, iv=iv: SCRIPT.measure_intervention(ctx, iv))
                frames.append((target.split(":")[0], iv.name, rows))
    finally:
        sys.path.remove(str(REPO_ROOT / "examples"))
    return {(t, n): rows for t, n, rows in frames}


def test_dropout_a_tripled_lr_is_mismatch_and_a_noop_is_ok(known_answers):
    """The compared first steps draw the same dropout masks: the no-op lands exactly on the
    baseline, the tripled learning rate's update three times as far."""
    noop = w01.outcome(known_answers["known.dropout", "noop"], "noop")
    wrong = w01.outcome(known_answers["known.dropout", "wrong_lr"], "wrong_lr")
    assert noop.check_verdict == whatif.OK and noop.correct
    assert wrong.check_verdict == whatif.MISMATCH and wrong.correct is False
    r = known_answers["known.dropout", "noop"].set_index("metric")
    assert r.value["grad_rel_diff"] == 0 and r.value[w01.SELF_PREFIX + "grad_rel_diff"] == 0


def test_a_step_that_differs_from_itself_is_not_decidable(known_answers):
    """Neither the no-op nor the tripled learning rate is decided where the baseline's own
    step, from the same state, batch and RNG state, moves past a tenth of the limits."""
    for name in ("noop", "wrong_lr"):
        rows = known_answers["planted", name]
        o = w01.outcome(rows, name)
        assert o.check_verdict == whatif.NOT_DECIDABLE and o.correct is None, o
        assert "differs from itself" in o.check
        assert w01.table(rows).correct.iloc[0] == whatif.NOT_DECIDABLE
        tol = rows[rows.metric == "grad_rel_diff_tol"].value.iloc[0]
        assert tol == whatif.TOLERANCES["same arithmetic"].grad_rel  # not widened


def _verdicts(frame) -> dict[str, w01.Outcome]:
    return {n: w01.outcome(frame, n) for n in w01.names_in(frame)}


def test_a_planted_slow_optimizer_is_faster_fused(planted_runs):
    o = _verdicts(planted_runs)["fused_optimizer"]
    assert o.verdict == w01.FASTER and o.correct
    assert o.ci_pct[1] < 0 and o.throughput_pct > 0
    assert w01.best(planted_runs).name == "fused_optimizer"


def test_no_change_is_not_resolved_and_a_sleep_is_slower(planted_runs):
    # the floor row is read as C00's: a name the calibration does not read would leave the
    # no-op held to no floor at all (p and the interval alone: a 3% false change per run)
    assert calibration.noise_floor_pct(planted_runs) == FLOOR_PCT
    v = _verdicts(planted_runs)
    assert v["noop"].verdict == w01.UNRESOLVED and v["noop"].correct
    assert v["sleep_added"].verdict == w01.SLOWER


def test_without_an_aa_floor_nothing_is_resolved(planted_runs):
    """A run without C00: the planted gain (significant on its own) is not called faster."""
    bare = planted_runs[planted_runs.experiment != "C00"]
    o = _verdicts(bare)["fused_optimizer"]
    assert o.verdict == w01.UNRESOLVED and o.reason == w01.NO_FLOOR
    assert w01.best(bare) is None and "no A/A floor" in w01.markdown(bare)


def test_the_adaptive_ab_writes_its_decision_and_the_table_shows_it(planted_runs):
    """The planted runs sample under the default (adaptive) rule: each measured A/B says
    whether it was decided and after how many blocks, and the table carries that line."""
    dec = planted_runs[planted_runs.metric == SAMPLING_DECISION]
    assert set(dec.variant) >= {"fused_optimizer/change", "noop/change", "sleep_added/change"}
    assert dec.window.str.match(r"(decided|undecided within budget)").all()
    o = _verdicts(planted_runs)["fused_optimizer"]
    assert o.sampling.startswith("decided")
    assert "sampling" in w01.markdown(planted_runs)
    # and how many of the fixed contract's pairs its blocks fill (its floor's pair count)
    filled = planted_runs[planted_runs.metric == SAMPLING_FIXED_PAIRS]
    assert set(filled.variant) == set(dec.variant)


def test_the_adaptive_abs_short_blocks_are_counted_in_the_fixed_contracts_pairs(tiny_cfg):
    """One-stretch blocks where the fixed contract's blocks hold three: a third of a fixed
    pair each, so C00's floor is looked up (to stop, and in the table) at that count."""
    import time
    from types import SimpleNamespace

    from perflab.experiments import floors

    ctx = runner.Context("W01", _contract(tiny_cfg), log=lambda m: None)
    seen = []
    ctx.stop_floor = lambda pairs: seen.append(pairs) or FLOOR_PCT
    res = SCRIPT._sequential_pair(ctx, SimpleNamespace(name="x"), lambda: time.sleep(1e-3),
                                  lambda: time.sleep(4e-3), 4, 3)
    rows = pd.DataFrame(ctx.rows)
    (filled,) = rows[rows.metric == SAMPLING_FIXED_PAIRS].value
    assert filled == pytest.approx(len(res.a_blocks) / 3)
    assert floors.ab_pairs(rows[rows.variant == "x/change"]) == pytest.approx(filled)
    # stopped against the floor for the pairs run, and within it only for the budget's 8
    assert pytest.approx(filled) in seen and pytest.approx(2 * 4 * 3 / 3) in seen


def test_an_undecided_ab_is_never_called_faster(planted_runs):
    """The same significant gain, but its A/B stopped undecided (its budget spent): not
    resolved, and not the best."""
    cut = planted_runs.copy()
    at = (cut.variant == "fused_optimizer/change") & (cut.metric == SAMPLING_DECISION)
    cut.loc[at, "window"] = "undecided within budget (8 blocks, 95% anytime interval -30..2 %)"
    o = _verdicts(cut)["fused_optimizer"]
    assert o.verdict == w01.UNRESOLVED and w01.best(cut) is None


def test_the_fixed_rule_runs_the_configured_blocks_and_writes_no_decision(tiny_cfg, tmp_path):
    c = _contract(tiny_cfg, planted.SLOWER.name, PLANTED, blocks=3, inner=2)
    c["sampling"] = {"rule": "fixed"}
    rows = _run(c, tmp_path, planted.SLOWER.name,
                lambda ctx: SCRIPT.measure_intervention(ctx, planted.SLOWER))
    assert rows[rows.metric == SAMPLING_DECISION].empty
    rel = rows[rows.metric == w01.THROUGHPUT_REL]
    assert list(rel.n) == [3] and rel.window.iloc[0].startswith("3 blocks per side")


def test_a_real_gain_inside_a_wider_floor_is_not_resolved(planted_runs):
    """The same measured gain, held to a floor wider than it: inside the noise, so neither
    faster nor the best."""
    gain = -_verdicts(planted_runs)["fused_optimizer"].change_pct
    wide = planted_runs.copy()
    wide.loc[(wide.experiment == "C00") & (wide.metric == AA_FLOOR[1]), "value"] = 1.5 * gain
    o = _verdicts(wide)["fused_optimizer"]
    assert o.verdict == w01.UNRESOLVED and w01.best(wide) is None


def test_a_wrong_result_fails_the_check_and_is_never_the_best(planted_runs):
    o = _verdicts(planted_runs)["wrong_lr"]
    assert o.correct is False
    r = planted_runs[planted_runs.variant == "wrong_lr/check"]
    upd = r[r.metric == "update_rel_diff"].value.iloc[0]
    assert upd > r[r.metric == "update_rel_diff_tol"].value.iloc[0]
    assert w01.best(planted_runs).name != "wrong_lr"
    assert "MISMATCH" in set(w01.table(planted_runs).correct)


def test_a_failing_intervention_is_a_row_that_says_why(planted_runs):
    o = _verdicts(planted_runs)["broken"]
    assert o.verdict == w01.FAILED and "the compiler failed" in o.reason
    rows = planted_runs[planted_runs.variant.str.startswith("broken/")]
    assert set(rows.status) == {"error"}  # nothing half-measured left behind
    t = w01.table(planted_runs)
    assert "the compiler failed" in t[t.intervention == "broken"].why.iloc[0]


def test_ranked_by_gain_with_first_call_break_even_and_check(planted_runs):
    t = w01.table(planted_runs)
    assert list(t.intervention[:1]) == ["fused_optimizer"]
    assert t.verdict.iloc[-1] == w01.FAILED
    fused = t[t.intervention == "fused_optimizer"].iloc[0]
    assert fused.correct == "yes"
    # the break-even is the first-call cost over the saving per step, rounded up: it repays
    # the cost, and one step fewer does not
    r = planted_runs.set_index(["variant", "metric", "statistic"]).value
    cost = r["fused_optimizer/intervened", w01.FIRST_CALL_COST, "value"]
    saving = -r["fused_optimizer/change", "step_latency", "value"]
    steps = fused.break_even_steps
    assert saving > 0 and steps * saving >= cost and (steps == 0 or (steps - 1) * saving < cost)
    md = w01.markdown(planted_runs)
    assert "**Best measured:** fused_optimizer" in md and f"{FLOOR_PCT:.2g}%" in md


def test_the_plan_says_why_each_does_not_apply(tiny_cfg, tmp_path):
    rows = _run(_contract(tiny_cfg, interventions="all"), tmp_path, whatif.PLAN,
                SCRIPT.measure_plan)
    plan = rows[rows.metric == w01.APPLIES]
    assert set(plan.variant) == {w01.variant(n, w01.PLAN) for n in whatif.NAMES}
    why = dict(zip(plan.variant.str.split("/").str[0], plan.reason))
    assert "CUDA" in why["autocast_fp16"] and "CUDA" in why["compile_reduce_overhead"]
    assert "no loader" in why["loader_workers"] and "already" in why["foreach_optimizer"]
    assert "do not set the peak" in why["activation_checkpointing"]
    applies = json.loads(Path(whatif.job_outputs(tmp_path, "plan")["applies"]).read_text())
    assert applies == [n for n in whatif.NAMES if not why[n]] and "fused_optimizer" in applies


def test_naming_one_that_does_not_apply_is_one_clear_error(tiny_cfg, tmp_path):
    c = _contract(tiny_cfg, interventions=["fused_optimizer", "activation_checkpointing"])
    with pytest.raises(Exception, match="activation_checkpointing.*do not set the peak"
                       ".*these apply here: fused_optimizer"):
        _run(c, tmp_path, whatif.PLAN, SCRIPT.measure_plan)


@pytest.mark.parametrize("name, bad, message", [
    ("nonsense", ["nonsense"], "unknown intervention 'nonsense'; valid: fused_optimizer"),
    ("fp16 on a CPU", ["autocast_fp16"], "autocast_fp16 does not apply on cpu"),
])
def test_bad_names_stop_the_config(name, bad, message):
    with pytest.raises(config.ConfigError, match=message):
        config.load([], {"device": "cpu", "experiments": {"W01": {"interventions": bad}}})


def test_runs_only_when_asked_and_its_plan_counts_the_whole_set(tiny_cfg):
    """Out of the default chapter run (``all``), in when named; the pre-flight's estimate
    counts the plan job (its intervention jobs are not known yet) once per intervention."""
    from perflab.pipeline import preflight

    assert "W01" not in config.by_default(8)
    asked = config.load([TEST_CONFIG], {"device": "cpu", "run": "all,W01"})
    assert asked["resolved_experiments"][-1] == "W01"
    plan = _contract(tiny_cfg)
    one = preflight.step_calls(whatif.intervention_contract(plan, "fused_optimizer"))[0]
    n = len(plan["params"]["interventions"])
    assert preflight.step_calls(plan)[0] == n * one
    every = {**plan, "params": {**plan["params"], "interventions": "all"}}
    assert preflight.step_calls(every)[0] == len(whatif.NAMES) * one


def test_the_one_step_check_catches_a_changed_update():
    tol = whatif.TOLERANCES["same arithmetic"]
    a = whatif.StepState(1.0, [torch.ones(3)], [torch.full((3,), 1e-3)])
    same = whatif.StepState(1.0 + 1e-7, [torch.ones(3)], [torch.full((3,), 1e-3)])
    off = whatif.StepState(1.0, [torch.ones(3)], [torch.full((3,), 2e-3)])
    gone = whatif.StepState(1.0, [None], [torch.full((3,), 1e-3)])
    assert whatif.agreement(a, same, tol, a)["passes"]
    assert not whatif.agreement(a, off, tol, a)["passes"]
    assert not whatif.agreement(a, gone, tol, a)["passes"]
    assert whatif.agreement(a, off, tol, a)["verdict"] == whatif.MISMATCH
    # without the baseline run twice its own spread is unknown: neither ok nor MISMATCH
    assert whatif.agreement(a, same, tol)["verdict"] == whatif.NOT_DECIDABLE


def test_a_baseline_that_differs_from_itself_is_not_decidable_and_widens_nothing():
    tol = whatif.TOLERANCES["same arithmetic"]
    a = whatif.StepState(1.0, [torch.ones(3)], [torch.full((3,), 1e-3)])
    jittered = whatif.StepState(1.0, [torch.ones(3) * 1.5], [torch.full((3,), 1e-3)])
    for b in (a, jittered, whatif.StepState(1.0, [torch.ones(3)], [torch.full((3,), 3e-3)])):
        got = whatif.agreement(a, b, tol, jittered)
        assert got["verdict"] == whatif.NOT_DECIDABLE and not got["passes"]
        assert "differs from itself by grad 0.5" in got["why"]
        assert got["limits"]["grad_rel_diff"] == tol.grad_rel  # never widened from it
    # a spread well inside the limits (10%) leaves the check deciding
    close = whatif.StepState(1.0, [torch.ones(3) * (1 + 1e-6)], [torch.full((3,), 1e-3)])
    assert whatif.agreement(a, a, tol, close)["verdict"] == whatif.OK


def test_a_random_step_under_another_generator_is_not_decidable():
    """A compiled step draws its dropout masks from Inductor's generator: the same seed gives
    it other masks. Where another seed moves the baseline's step, the check cannot decide;
    where it does not (no random numbers), it decides as usual."""
    tol = whatif.TOLERANCES["reordered"]
    a = whatif.StepState(1.0, [torch.ones(3)], [torch.full((3,), 1e-3)])
    other = whatif.StepState(1.1, [torch.ones(3) * 1.9], [torch.full((3,), 1e-3)])
    got = whatif.agreement(a, other, tol, a, other_generator=True, reseeded=other)
    assert got["verdict"] == whatif.NOT_DECIDABLE and "another generator" in got["why"]
    assert whatif.agreement(a, other, tol, a, other_generator=True,
                            reseeded=a)["verdict"] == whatif.MISMATCH
    assert whatif.agreement(a, other, tol, a, reseeded=other)["verdict"] == whatif.MISMATCH


def test_an_unchecked_update_is_reported_unchecked():
    tol = whatif.TOLERANCES["reduced precision"]
    a = whatif.StepState(1.0, [torch.ones(3)], [torch.full((3,), 1e-3)])
    got = whatif.agreement(a, a, tol, a)
    assert got["unchecked"] == ["update_rel_diff"] and got["limits"]["update_rel_diff"] is None


# ------------------------------------------------------------------ TF32 on CUDA

#: the baseline's own TF32 rounding as a convnet on CUDA might measure it
CONV_SCALE = whatif.Tf32Scale(("convolutions",), loss_rel=1e-6, grad_rel=3e-3)


def _step(loss: float, grad_off: float, update: torch.Tensor | None = None) -> whatif.StepState:
    """A step whose gradient is relatively ``grad_off`` from ones(4) (its norm is 2)."""
    g = torch.ones(4)
    g[0] += 2 * grad_off
    return whatif.StepState(loss, [g], [torch.full((4,), 1e-3) if update is None else update])


BASE = _step(2.0, 0.0)
#: Adam's first step where TF32 flipped the signs of near-zero gradients: an update far off
FLIPPED = torch.tensor([1e-3, -1e-3, 1e-3, -1e-3])


def test_tf32_aware_limits_are_k_times_the_measured_scale():
    fp32 = whatif.TOLERANCES["reordered"]
    tol = whatif.tf32_aware(fp32, CONV_SCALE)
    k = whatif.TF32_FACTOR
    assert (tol.loss_rel, tol.grad_rel) == (fp32.loss_rel, k * 3e-3)  # max(fp32, K x scale)
    text = tol.describe()
    assert "TF32-aware" in text and f"{k:g} x" in text and "gradient 0.003" in text
    inside, outside = _step(2.0, 0.9 * k * 3e-3, FLIPPED), _step(2.0, 1.1 * k * 3e-3, FLIPPED)
    got = whatif.agreement(BASE, inside, tol, BASE)
    # past its fp32 limit the gradient is TF32-rounded: the update is not compared
    assert got["passes"] and got["limits"]["update_rel_diff"] is None
    assert got["unchecked"] == ["update_rel_diff"]
    assert not whatif.agreement(BASE, inside, fp32, BASE)["passes"]  # what W01 said before
    assert not whatif.agreement(BASE, outside, tol, BASE)["passes"]
    assert not whatif.agreement(BASE, _step(2.0 * (1 + 2e-4), 0.0), tol, BASE)["passes"]


def test_tf32_widens_only_where_observed_and_at_most_what_tf32_can_do():
    fp32 = whatif.TOLERANCES["reordered"]
    own = whatif.differences(BASE, _step(2.0 * (1 + 2e-6), 3.1e-3))  # as far as strict fp32
    assert whatif.tf32_aware(fp32, CONV_SCALE, own).grad_rel == fp32.grad_rel
    assert "not observed" in whatif.tf32_aware(fp32, CONV_SCALE, own).why
    # a "TF32 scale" of 0.9 (other dropout masks, not rounding) widens to the cap, no further
    masks = whatif.Tf32Scale(("matmuls",), loss_rel=0.3, grad_rel=0.9)
    tol = whatif.tf32_aware(fp32, masks, whatif.differences(BASE, BASE))
    assert (tol.loss_rel, tol.grad_rel) == (whatif.TF32_CAP["loss_rel"],
                                           whatif.TF32_CAP["grad_rel"])
    assert "capped" in tol.why
    assert not whatif.agreement(BASE, _step(2.0, 0.5), tol, BASE)["passes"]


def test_tf32_aware_still_checks_the_update_of_an_unchanged_gradient():
    """A fused optimizer leaves forward and backward alone: while the gradient agrees within
    its fp32 limit the update is held to its fp32 limit, so a wrong update still fails."""
    tol = whatif.tf32_aware(whatif.TOLERANCES["same arithmetic"], CONV_SCALE)
    got = whatif.agreement(BASE, _step(2.0, 0.0, FLIPPED), tol, BASE)
    assert not got["passes"] and got["limits"]["update_rel_diff"] == 1e-3
    assert whatif.agreement(BASE, _step(2.0, 1e-5), tol, BASE)["passes"]


def test_without_tf32_or_its_scale_the_fp32_limits_hold():
    fp32 = whatif.TOLERANCES["reordered"]
    tf32_rounded = _step(2.0, 1e-2, FLIPPED)
    for scale in (None, whatif.Tf32Scale((), 1e-6, 3e-3)):  # a CPU, or TF32 off: unchanged
        assert whatif.tf32_aware(fp32, scale) is fp32
    # reduced precision is coarser than TF32: as it is
    low = whatif.TOLERANCES["reduced precision"]
    assert whatif.tf32_aware(low, whatif.Tf32Scale(("convolutions",), 1.0, 1.0)) is low
    for missing in (whatif.Tf32Scale(("convolutions",), why="the strict step raised"),
                    whatif.Tf32Scale(("matmuls",), 1e-6, float("nan"))):
        tol = whatif.tf32_aware(fp32, missing)  # never silently looser
        assert (tol.loss_rel, tol.grad_rel, tol.update_rel) == (1e-4, 1e-3, 1e-2)
        assert "not measured" in tol.describe()
        assert not whatif.agreement(BASE, tf32_rounded, tol, BASE)["passes"]


def test_the_scale_is_the_baselines_step_against_strict_fp32():
    strict = _step(2.0, 0.0)
    scale = whatif.tf32_scale(strict, _step(2.0 * (1 + 1e-6), 2e-3), ("convolutions",))
    assert scale.measured and scale.loss_rel == pytest.approx(1e-6, rel=1e-3)
    assert scale.grad_rel == pytest.approx(2e-3, rel=1e-3)
    gone = whatif.tf32_scale(strict, whatif.StepState(2.0, [None], strict.update), ("matmuls",))
    assert not gone.measured and "one of the two steps" in gone.why


def _flags() -> tuple:
    """Every TF32 setting torch has: the legacy flags and the per-operation precisions."""
    return (torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision(),
            [o.fp32_precision for o in whatif._per_op(torch.backends)])


@pytest.fixture
def tf32_flags():
    """torch's TF32 flags put back as they were; yields whether it has the per-op API."""
    saved = _flags()
    ops = whatif._per_op(torch.backends)
    yield bool(ops)
    for o in ops:  # first: they are what makes the legacy getters refuse when mixed
        o.fp32_precision = "none"
    torch.set_float32_matmul_precision(saved[1])
    torch.backends.cudnn.allow_tf32 = saved[0]
    for o, v in zip(ops, saved[2]):
        o.fp32_precision = v
    assert _flags() == saved


def test_the_tf32_flags_are_read_on_cuda_only(tf32_flags, monkeypatch):
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("highest")
    assert whatif.tf32_modes("cpu") == ()
    assert whatif.tf32_modes("cuda") == ("convolutions",)  # torch's defaults
    torch.set_float32_matmul_precision("high")
    assert whatif.tf32_modes("cuda") == ("convolutions", "matmuls")
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    assert whatif.tf32_modes("cuda") == ()

    def mixed():
        raise RuntimeError("you have used mix of the legacy and new APIs")

    monkeypatch.setattr(torch, "get_float32_matmul_precision", mixed)
    assert whatif.tf32_modes("cuda") == ("matmuls",)  # unreadable: it may, so measure it


@pytest.mark.parametrize("conv, matmul", [(True, "highest"), (True, "high"),
                                           (False, "medium"), (False, "highest")])
def test_strict_fp32_turns_tf32_off_and_puts_the_flags_back(tf32_flags, conv, matmul):
    torch.backends.cudnn.allow_tf32 = conv
    torch.set_float32_matmul_precision(matmul)
    before = _flags()
    with whatif.strict_fp32():
        assert whatif.tf32_modes("cuda") == ()
    assert _flags() == before  # the per-operation settings too, not only their effect
    with pytest.raises(ValueError, match="inside"), whatif.strict_fp32():
        raise ValueError("inside")
    assert _flags() == before
    if tf32_flags:  # torch's per-backend API set: its legacy getters refuse, so it is used
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        torch.backends.cudnn.conv.fp32_precision = "ieee"
        with whatif.strict_fp32():
            assert torch.backends.cuda.matmul.fp32_precision == "ieee"
        assert (torch.backends.cuda.matmul.fp32_precision,
                torch.backends.cudnn.conv.fp32_precision) == ("tf32", "ieee")


def test_a_job_where_tf32_may_run_measures_its_scale(tiny_cfg, tmp_path, monkeypatch):
    """The job as it runs on CUDA with TF32 on, here on the CPU (which never rounds to TF32):
    the strict-fp32 step is measured and written, the check held to the TF32-aware tolerance."""
    monkeypatch.setattr(whatif, "tf32_modes", lambda device_type: ("convolutions",))
    c = _contract(tiny_cfg, "larger_batch", interventions="all", blocks=2, inner=2)
    rows = _run(c, tmp_path, "larger_batch", SCRIPT.measure_one)
    check = rows[rows.variant == "larger_batch/check"].set_index("metric")
    for metric in w01.TF32_SCALE_METRICS:  # the same step on a CPU: no TF32 rounding
        assert check.unit[metric] == "relative" and check.value[metric] <= 1e-6
        assert "strict fp32" in check.window[metric]
    # a CPU never rounds to TF32: allowed by the (patched) flags, but not observed
    assert "not observed" in check.sync_boundary[w01.CORRECT]
    assert check.value[w01.CORRECT] == 1
    assert "TF32 scale loss" in w01.outcome(rows, "larger_batch").check
    assert "TF32 may run" in w01.markdown(rows)


def test_a_strict_step_that_fails_leaves_the_fp32_limits(tiny_cfg, tmp_path, monkeypatch):
    from contextlib import contextmanager

    @contextmanager
    def refused():
        raise RuntimeError("CUDA out of memory")
        yield

    monkeypatch.setattr(whatif, "tf32_modes", lambda device_type: ("convolutions",))
    monkeypatch.setattr(whatif, "strict_fp32", refused)
    c = _contract(tiny_cfg, "larger_batch", interventions="all", blocks=2, inner=2)
    rows = _run(c, tmp_path, "larger_batch", SCRIPT.measure_one)
    check = rows[rows.variant == "larger_batch/check"].set_index("metric")
    for metric in w01.TF32_SCALE_METRICS:
        assert check.status[metric] == "unsupported" and "out of memory" in check.reason[metric]
    assert "not measured" in check.sync_boundary[w01.CORRECT]
    assert check.value["grad_rel_diff_tol"] == whatif.TOLERANCES["reordered"].grad_rel
    assert w01.outcome(rows, "larger_batch").correct  # the CPU's step agrees in fp32 anyway


def test_bounds_come_from_the_localization():
    def row(eid, variant, metric, value):
        return {**_floor_row(), "experiment": eid, "variant": variant, "metric": metric,
                "value": value}

    frame = pd.DataFrame([row("E05", f"sync/{ph}", "phase_share", v) for ph, v in
                          (("forward", 20.0), ("loss", 5.0), ("backward", 40.0),
                           ("optimizer", 24.0), ("logging", 1.0))]
                         + [row("E13", "controlled/tax", "tax_rel", 25.0),
                            row("R01", "phase/forward_backward", "flops_fraction", 50.0)])
    frame.loc[frame.experiment == "R01", "statistic"] = "median"
    assert w01.predicted_bound(frame, "fused_optimizer") == (24.0, pytest.approx(
        "E05: optimizer 24.0% of the step"))
    assert w01.predicted_bound(frame, "compile_default")[0] == pytest.approx(65.0)
    assert w01.predicted_bound(frame, "device_accumulator")[0] == pytest.approx(20.0)
    assert w01.predicted_bound(frame, "larger_batch")[0] == pytest.approx(40.0 + 30.0)
    assert w01.predicted_bound(frame.iloc[0:0], "fused_optimizer")[0] is None
    # a fraction above 100% of the ceiling is R01's error: no bound, never clipped to one
    over = frame.copy()
    over.loc[over.experiment == "R01", "value"] = 544.0
    bound, why = w01.predicted_bound(over, "larger_batch")
    assert bound is None and "instrument error" in why
    inside = w01.Outcome("x", w01.FASTER, change_pct=-20.0, ci_pct=(-22.0, -18.0), bound_pct=24)
    beyond = w01.Outcome("x", w01.FASTER, change_pct=-40.0, ci_pct=(-42.0, -38.0), bound_pct=24)
    assert w01.explained(inside) == "within the bound"
    assert w01.explained(beyond).startswith("beyond the bound")


def test_checkpointing_wraps_blocks_and_refuses_batchnorm():
    lm = workloads.transformer(torch.device("cpu"), vocab=32, dim=16, heads=2, depth=2, seq=8,
                               batch=2)
    model, what = transforms.checkpoint_blocks(lm.model)
    assert "2 children of blocks" in what
    assert all(isinstance(b, transforms.Recompute) for b in model.blocks)
    conv = workloads.convnet(torch.device("cpu"), channels=4, image=8, batch=2)
    with pytest.raises(Exception, match="BatchNorm"):
        transforms.checkpoint_blocks(conv.model)


class _MaskedBlock(torch.nn.Module):
    """A library's block: its forward takes an attention mask by keyword."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, *, attention_mask=None):
        return self.lin(x) * (1 if attention_mask is None else attention_mask)


def test_checkpointed_blocks_pass_keywords_through_with_the_same_gradients():
    """HF GPT-2's blocks got ``encoder_attention_mask=`` and the wrapper took none (TypeError
    in W01's activation_checkpointing on a real model)."""
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList([_MaskedBlock(), _MaskedBlock()])
    x, mask = torch.randn(3, 4), torch.tensor([1.0, 0.0, 1.0, 1.0])

    def loss_of(bs):
        h = x
        for b in bs:
            h = b(h, attention_mask=mask)
        return h.square().sum()

    import copy

    wrapped = torch.nn.ModuleList([transforms.Recompute(copy.deepcopy(b)) for b in blocks])
    loss_of(blocks).backward()
    loss_of(wrapped).backward()
    for b, w in zip(blocks, wrapped):
        assert torch.allclose(b.lin.weight.grad, w.inner.lin.weight.grad)


def test_a_model_with_its_own_checkpointing_switch_gets_it_turned_on_not_wrapped():
    """A Hugging Face model (gradient_checkpointing_enable) or a timm model
    (set_grad_checkpointing) checkpoints as its library does: its blocks' key-value cache is
    the library's to turn off."""
    class HF(torch.nn.Module):
        supports_gradient_checkpointing = True

        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)])
            self.asked = None

        def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
            self.asked = gradient_checkpointing_kwargs

    class Timm(torch.nn.Sequential):
        def set_grad_checkpointing(self, enable=True):
            self.on = enable

    model, what = transforms.checkpoint_blocks(HF())
    assert model.asked == {"use_reentrant": False} and "gradient_checkpointing_enable" in what

    class HF5(HF):  # transformers 5's name, preferred (the old one warns)
        def activation_checkpointing_enable(self, activation_checkpointing_kwargs=None):
            self.asked = ("new", activation_checkpointing_kwargs)

    model, what = transforms.checkpoint_blocks(HF5())
    assert model.asked == ("new", {"use_reentrant": False})
    assert "activation_checkpointing_enable" in what
    assert not any(isinstance(m, transforms.Recompute) for m in model.modules())
    model, what = transforms.checkpoint_blocks(Timm(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)))
    assert model.on is True and "set_grad_checkpointing" in what


def test_a_loader_is_rebuilt_with_its_batches_kept():
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.arange(12.0).view(6, 2), torch.arange(6))
    given = DataLoader(data, batch_size=2)
    rebuilt = transforms.rebuilt_loader(given, workers=1, pin_memory=False)
    assert rebuilt.num_workers == 1
    assert [b[1].tolist() for b in rebuilt] == [b[1].tolist() for b in given]
    with pytest.raises(Exception, match="not a torch DataLoader"):
        transforms.rebuilt_loader([1, 2], workers=1, pin_memory=False)


def test_fused_and_foreach_rebuild_the_users_optimizer():
    p = [torch.nn.Parameter(torch.ones(2))]
    opt = torch.optim.AdamW(p, lr=0.5, weight_decay=0.1)
    fused = transforms.optimizer_with(opt, "fused")
    assert transforms.resolved_impl(opt) == "forloop"  # torch's CPU default
    assert transforms.resolved_impl(fused) == "fused"
    assert fused.param_groups[0]["lr"] == 0.5 and fused.param_groups[0]["weight_decay"] == 0.1


@pytest.mark.parametrize("workload", ["convnet", "transformer"])
def test_the_built_in_workloads_plan_and_measure(tiny_cfg, tmp_path, workload):
    spec = {"target": workload, "params": {**tiny_cfg["workloads"][workload], "seed": 0}}
    c = _contract(tiny_cfg, interventions="all", blocks=4, inner=4)
    c["workload"], c["workloads"] = workload, {workload: spec}
    plan = _run(c, tmp_path, whatif.PLAN, SCRIPT.measure_plan)
    applies = json.loads(Path(whatif.job_outputs(tmp_path, "plan")["applies"]).read_text())
    assert "fused_optimizer" in applies
    if workload == "convnet":  # BatchNorm in its blocks: recomputing them would update it twice
        r = plan[plan.variant == "activation_checkpointing/plan"]
        assert "BatchNorm" in r.reason.iloc[0]
    # the transformer's larger batch also has each side's peak from a process of its own
    c1 = whatif.intervention_contract(c, "larger_batch")
    c1["params"]["peak_calls"] = int(workload == "transformer")
    rows = _run(c1, tmp_path, "larger_batch", SCRIPT.measure_one)
    frame = pd.concat([plan, rows])
    o = w01.outcome(frame, "larger_batch")
    # a measured change, and a check that decided and passed (a larger batch of the same
    # examples: the mean loss and its gradient agree within the reordered limits)
    assert o.change_pct is not None and o.check_verdict == whatif.OK, o
    assert (rows.metric == w01.FIRST_CALL_COST).any()
    shape = rows[rows.variant == "larger_batch/intervened"].input_shape.iloc[0]
    assert shape.startswith(f"[{2 * spec['params']['batch']},")
    if workload == "transformer":
        peaks = rows[rows.metric.isin(["peak_rss", w01.PEAK_CHANGE]) & (rows.status == "ok")]
        assert set(peaks.variant) == {f"larger_batch/{s}" for s in ("baseline", "intervened",
                                                                    "change")}


def test_compile_on_the_tiny_mlp(tiny_cfg, tmp_path):
    """The compiled step: its first call (the compile) apart, graph breaks counted, its rows
    marked compiled, the check within the reordered tolerance."""
    c = _contract(tiny_cfg, "compile_default", interventions="all", blocks=4, inner=4)
    rows = _run(c, tmp_path, "compile_default", SCRIPT.measure_one)
    first = rows[(rows.metric == w01.FIRST_CALL)].set_index("variant").value
    assert first["compile_default/intervened"] > first["compile_default/baseline"]
    assert (rows[rows.metric == w01.GRAPH_BREAKS].value == 0).all()
    timed = rows[(rows.variant == "compile_default/intervened") & (rows.status == "ok")]
    assert set(timed.execution) == {"compiled"}
    assert rows[(rows.variant == "compile_default/check") & (rows.metric == w01.CORRECT)
                ].value.iloc[0] == 1


def test_the_diagnosis_names_the_best_measured_beside_the_hypothesis(planted_runs):
    from perflab.views import diagnose

    def share(ph, v):
        return {**_floor_row(), "experiment": "E05", "variant": f"sync/{ph}",
                "metric": "phase_share", "value": v}

    e05 = pd.DataFrame([share(ph, v) for ph, v in (("input_wait", 1.0), ("forward", 14.0),
                                                    ("backward", 25.0), ("optimizer", 60.0))])
    d = diagnose.diagnose(pd.concat([planted_runs, e05], ignore_index=True))
    assert d.verdict == "optimizer"
    md = diagnose.render_markdown(d)
    assert "**Best measured intervention (W01):** fused_optimizer" in md
    assert "the verdict's intervention is the best measured" in md
    assert "bound 60%" in md  # the optimizer's share bounds what fusing it can save
    assert diagnose.diagnose(e05).measured == []  # without W01 the diagnosis reads as before


def test_the_cli_preflight_names_an_intervention_that_does_not_apply():
    import subprocess
    import sys

    from conftest import REPO_ROOT

    proc = subprocess.run([sys.executable, "-m", "perflab", "check", "mlp", "--device", "cpu",
                           "--configfile", str(TEST_CONFIG), "--only",
                           "fused_optimizer,activation_checkpointing"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "intervention 'activation_checkpointing' does not apply to mlp" in proc.stderr
    assert "these apply here: fused_optimizer" in proc.stderr


def test_perflab_whatif_plans_w01_alone(tmp_path):
    """`perflab whatif` hands Snakemake W01's table as its target (a dry run: the plan)."""
    import subprocess
    import sys

    from conftest import REPO_ROOT

    proc = subprocess.run([sys.executable, "-m", "perflab", "whatif", "mlp", "--device", "cpu",
                           "--configfile", str(TEST_CONFIG), "--directory", str(tmp_path),
                           "--", "-n"], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert "checkpoint w01_plan:" in out and "rule w01_whatif:" in out
    assert "e05_phases" not in out  # no localization: W01 and its A/A floor
    assert "rule c00_calibration:" in out or "c00_calibration" in out


def test_a_users_own_loader_and_step(tiny_cfg, tmp_path, monkeypatch):
    """examples/mypkg/classifier.py (its DataLoader, its AMP step with clipping): the loader
    rebuilt with a worker draws the same batches (the check passes), what needs perflab's
    own step or batch says why it does not apply."""
    from conftest import REPO_ROOT

    monkeypatch.syspath_prepend(str(REPO_ROOT / "examples"))
    spec = {"target": "mypkg.classifier:make_step",
            "params": {"vocab": 50, "seq": 8, "dim": 16, "depth": 1, "batch": 8,
                       "examples": 64, "workers": 0, "seed": 0}}
    c = _contract(tiny_cfg, interventions="all", blocks=4, inner=4, loader_workers=1)
    c["workload"], c["workloads"] = "classifier", {"classifier": spec}
    plan = _run(c, tmp_path, whatif.PLAN, SCRIPT.measure_plan)
    why = dict(zip(plan.variant.str.split("/").str[0], plan.reason))
    assert why["loader_workers"] == "" and why["device_accumulator"] == ""
    assert "loader sets the batch" in why["larger_batch"]
    rows = _run(whatif.intervention_contract(c, "loader_workers"), tmp_path, "loader_workers",
                SCRIPT.measure_one)
    o = w01.outcome(pd.concat([plan, rows]), "loader_workers")
    assert o.change_pct is not None and o.check_verdict == whatif.OK, o


# ------------------------------------------------------------------ the compiler's fix


@pytest.fixture
def recompiling(monkeypatch):
    """examples/bottlenecks/recompiling (torch.compile(dynamic=False), a new sequence length
    each step) as a W01 workload spec, on aot_eager: Dynamo and AOTAutograd as in a real
    compile, without Inductor's C++ builds."""
    from conftest import REPO_ROOT

    monkeypatch.syspath_prepend(str(REPO_ROOT / "examples"))
    torch._dynamo.reset()
    yield lambda **kw: {"target": "bottlenecks.recompiling:make_step",
                        "params": {"backend": "aot_eager", "seed": 0, **kw}}
    torch._dynamo.reset()


def test_compile_dynamic_is_measured_where_the_step_recompiles(tiny_cfg, tmp_path, recompiling):
    """The compiler candidate's fix, measured: the baseline recompiles in its warm-up, the
    step with its own torch.compile made dynamic=True does not; its first-call cost, its
    interval against the baseline and its one-step check are rows like any intervention's."""
    c = _contract(tiny_cfg, "compile_dynamic", interventions="all", blocks=2, inner=2)
    c["workload"], c["workloads"] = "recompiling", {"recompiling": recompiling()}
    rows = _run(c, tmp_path, "compile_dynamic", SCRIPT.measure_one)
    ok = rows[rows.status == "ok"].set_index(["variant", "metric"]).value
    assert ok["compile_dynamic/baseline", w01.RECOMPILES] >= 2  # a new length per step
    assert ok["compile_dynamic/intervened", w01.RECOMPILES] == 0
    cause = rows[(rows.variant == "compile_dynamic/baseline")
                 & (rows.metric == w01.RECOMPILES)].window.iloc[0]
    assert "sequence length" in cause and "dimension 1" in cause
    inter = rows[(rows.variant == "compile_dynamic/intervened") & (rows.status == "ok")]
    assert set(inter.execution) == {"compiled (the step's own torch.compile, dynamic=True)"}
    assert (rows.metric == w01.FIRST_CALL_COST).any()
    assert (rows.variant == "compile_dynamic/change").any()
    o = w01.outcome(rows, "compile_dynamic")
    assert o.change_pct is not None and o.check_verdict == whatif.OK, o


def test_compile_dynamic_does_not_apply_without_recompiles(tiny_cfg, tmp_path, recompiling):
    """One sequence length: the compiled step never recompiles, so the fix has nothing to
    remove; an eager MLP has no compile of its own to make dynamic."""
    for spec, why in ((recompiling(lengths=1), "did not recompile"),
                      ({"target": "mlp", "params": {**tiny_cfg["workloads"]["mlp"], "seed": 0}},
                       "not compiled")):
        c = _contract(tiny_cfg, interventions="all")
        c["workload"], c["workloads"] = "w", {"w": spec}
        plan = _run(c, tmp_path, whatif.PLAN, SCRIPT.measure_plan)
        row = plan[plan.variant == "compile_dynamic/plan"]
        assert row.status.iloc[0] != "ok" and why in row.reason.iloc[0], row.reason.iloc[0]


def test_an_interventions_ab_gets_its_jobs_part_of_the_budget_less_what_surrounds_it(
        monkeypatch):
    """W01's share is split among the interventions that apply (the plan's count), not all
    asked for, and an A/B gets its job's part less what the job spent before it and, where
    peak memory follows in fresh processes, as much again: a CPU GPT-2's seven jobs got 12 s
    A/Bs of a 146 s share, spent 10 s more each, and W01 took 187 s."""
    from types import SimpleNamespace

    from experiments import load_script

    script = load_script("w01_whatif")
    monkeypatch.setattr(script.env, "process_age_s", lambda: 5.0)
    contract = {"sampling": {"rule": "adaptive", "job_budget_s": {"W01": 140.0}}}
    ctx = SimpleNamespace(contract=contract, params={"peak_calls": 3}, applying=7)
    assert script._budget_share_s(ctx) == pytest.approx(140.0 / 7 - 2 * 5.0)
    ctx.params = {"peak_calls": 0}  # no peak processes after the A/B
    assert script._budget_share_s(ctx) == pytest.approx(140.0 / 7 - 5.0)
    ctx.applying = None  # no plan to read: every intervention asked for
    assert script._budget_share_s(ctx) == pytest.approx(
        140.0 / len(w01.whatif.selected("all")) - 5.0)
    ctx.contract = {}
    assert script._budget_share_s(ctx) is None  # no budget: the fixed count
