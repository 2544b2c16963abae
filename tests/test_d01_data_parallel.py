"""D01 (data parallel): a real 2-rank run through Snakemake and torchrun, and simulated ranks.

The real run (gloo on this CPU; NCCL where two GPUs are visible, when this file runs there)
is one Snakemake job of the tiny contract: its rows obey the contract, each rank was its own
process, the accounting identities hold step by step, forcing the all-reduce to wait exposes
all of it, and the planted straggler is named with its phase. Everything else — each claim
and each verdict candidate both ways and inside the noise — runs on simulated rank records
(tests/d01_timeline.py) through the job's own row writer.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from claims_rows import case, rows
from d01_timeline import Shape, default_shapes, records
from experiments import load_script

from perflab import experiments
from perflab.core import io
from perflab.experiments import d01_data_parallel as d01
from perflab.experiments.d01_data_parallel import distributed, overlap
from perflab.kit import claims, tables
from perflab.pipeline import config, runner
from perflab.views import diagnose

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = load_script("d01_data_parallel")


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.device_count() >= 2 else "cpu"


# ------------------------------------------------------------------ one real run


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """The D01 job of the tiny contract, as `snakemake d01_data_parallel` runs it."""
    work = tmp_path_factory.mktemp("d01")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
           str(work), "--configfile", str(ROOT / "config" / "test.yaml"), "--config",
           f"device={_device()}", "run=D01", "tag=d01", "--cores", "2", "d01_data_parallel"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    log = work / "logs" / "d01" / "d01_data_parallel.log"
    assert proc.returncode == 0, (proc.stderr[-4000:], log.read_text()[-4000:]
                                  if log.exists() else "")
    out = {k: work / "results" / "d01" / f"d01_data_parallel{s}" for k, s in
           (("csv", ".csv"), ("samples", "_samples.csv"), ("provenance", ".json"),
            ("ranks", "_ranks.json"))}
    rows = io.read_results([out["csv"]])
    return rows, io.read_samples(out["samples"]), json.loads(out["ranks"].read_text()), out


@pytest.mark.background
def test_rows_carry_ranks_backend_and_bucket_in_their_contract(real):
    rows, samples, ranks, out = real
    assert (rows.experiment == "D01").all() and (rows.status == "ok").all()
    backend, n = ranks["launch"]["backend"], ranks["launch"]["ranks"]
    assert rows.execution.str.match(rf"ddp {backend} x{n}, bucket_cap_mb [0-9.]+").all()
    assert set(rows.execution) >= {f"ddp {backend} x{n}, bucket_cap_mb 0.01",
                                   f"ddp {backend} x{n}, bucket_cap_mb 100"}
    assert list(samples.columns) == io.SAMPLE_COLUMNS
    prov = json.loads(out["provenance"].read_text())
    assert prov["contract"]["launch"] == ranks["launch"]  # the launch is part of the contract
    # each rank's rows name its own device (cuda:<rank> over NCCL)
    for k in range(n):
        dev = set(rows[rows.variant.str.endswith(f"/rank{k}")].device)
        assert dev == {"cpu" if backend == "gloo" else f"cuda:{k}"}


@pytest.mark.background
def test_each_rank_was_its_own_process(real):
    _, _, ranks, _ = real
    recs, n = ranks["ranks"], ranks["launch"]["ranks"]
    assert [r["rank"] for r in recs] == list(range(n)) and {r["world"] for r in recs} == {n}
    assert len({r["pid"] for r in recs}) == n
    cfgs = [c.name for c in distributed.configurations(
        config.contract(config.load([ROOT / "config" / "test.yaml"], {"device": "cpu"}),
                        "D01")["params"])]
    for r in recs:  # every configuration stepped blocks x inner times on every rank
        counts = pd.Series([s["config"] for s in r["steps"]]).value_counts()
        assert set(counts.index) == set(cfgs) and set(counts) == {12}


def _steps(samples, variant: str, metric: str) -> np.ndarray:
    s = samples[(samples.variant == variant) & (samples.metric == metric)]
    return s.sort_values("index").value.to_numpy()


@pytest.mark.background
def test_accounting_identities_hold_step_by_step(real):
    rows, samples, _, _ = real
    for cfg in d01.configs_of(rows):
        if cfg == d01.BUILTIN:
            continue
        for k in d01.ranks_of(rows, cfg):
            v = d01.rank_variant(cfg, k)
            get = {q: _steps(samples, v, q) for q in overlap.RANK_QUANTITIES}
            phases = sum(get[overlap.PHASE_TIME[p]] for p in distributed.PHASES)
            assert np.allclose(phases, get[overlap.STEP], atol=1e-6)
            assert np.allclose(get[overlap.COMPUTE] + get[overlap.EXPOSED]
                               + get[overlap.PHASE_TIME["input"]], get[overlap.STEP], atol=1e-6)
            assert (get[overlap.EXPOSED] <= get[overlap.PHASE_TIME["backward"]] + 1e-9).all()
            assert np.allclose(get[overlap.TRANSFER] + get[overlap.WAIT], get[overlap.ALLREDUCE])
            assert (get[overlap.WAIT] >= -1e-9).all() and (get[overlap.HIDDEN] >= 0).all()
        # the transfer is one number per step, whichever rank reports it
        t = [_steps(samples, d01.rank_variant(cfg, k), overlap.EXPOSED_TRANSFER)
             for k in d01.ranks_of(rows, cfg)]
        assert all(np.allclose(t[0], x) for x in t[1:])


@pytest.mark.background
def test_forcing_the_all_reduce_to_wait_exposes_all_of_it(real):
    rows, samples, _, _ = real
    for k in d01.ranks_of(rows, d01.OVERLAP_OFF):
        v = d01.rank_variant(d01.OVERLAP_OFF, k)
        # every step: all communication happened while the backward waited in its hooks
        assert (_steps(samples, v, overlap.EXPOSED) >= _steps(samples, v, overlap.COMM)).all()
        assert (_steps(samples, v, overlap.HIDDEN) == 0).all()


@pytest.mark.background
def test_the_planted_straggler_is_named_with_its_phase(real):
    rows, _, _, _ = real
    c = experiments.claim_registry()["C50"].evaluate(experiments.evidence(rows))
    assert c.verdict == claims.REPRODUCED, c.measured
    for cid in ("C48", "C49", "C51", "C52"):  # every claim reads this run's rows
        assert experiments.claim_registry()[cid].evaluate(experiments.evidence(rows)).verdict != claims.NOT_RUN


@pytest.mark.background
def test_table_figure_and_verdict_of_the_run(real, tmp_path):
    rows, _, _, out = real
    t = experiments.table("D01", rows)
    n = len(d01.ranks_of(rows, d01.BASELINE))
    assert len(t) == len(d01.configs_of(rows)) * (n + 1)  # each rank and "all" per configuration
    straggler = t[(t.config == d01.STRAGGLER) & (t["rank"] == "all")].iloc[0]
    assert straggler.late_rank == 1 and straggler.late_phase == "forward"
    png = experiments.make_figure("D01", out["csv"], out["samples"], tmp_path / "d01.png")
    assert png.stat().st_size > 0
    d = diagnose.diagnose(rows)
    found = {f.bottleneck: f for f in d.findings}
    assert found["straggler"].outcome != diagnose.NOT_MEASURED
    assert found["communication"].outcome != diagnose.NOT_MEASURED


# ------------------------------------------------------------------ simulated ranks


@pytest.fixture(scope="module")
def contract():
    cfg = config.load([ROOT / "config" / "test.yaml"], {"device": "cpu"})
    return copy.deepcopy(config.contract(cfg, "D01"))


def simulated(contract, shapes: dict | None = None, seed: int = 0) -> pd.DataFrame:
    """D01's rows, written by the job's own writer, from a simulated timeline."""
    shapes = dict(shapes or {})
    if "baseline" in shapes:  # the baseline's copy (its A/A) runs as the baseline does
        shapes.setdefault(distributed.AA, shapes["baseline"])
    recs = records(contract["params"], shapes=shapes, seed=seed)
    ctx = runner.Context("D01", contract, lambda msg: None)
    ctx.set_defaults(**recs[0]["row_defaults"])
    p = distributed.Plan(2, "gloo", 1, "cpu")
    SCRIPT.write_rows(ctx, p, recs)
    frame = io.rows_to_frame(ctx.rows)
    io.validate_rows(frame)
    return frame


@pytest.fixture(scope="module")
def timeline(contract) -> pd.DataFrame:
    """The rows of a timeline that behaves as DDP does (each mechanism shows)."""
    return simulated(contract)


def verdict(cid: str, rows: pd.DataFrame) -> claims.Verdict:
    return experiments.claim_registry()[cid].evaluate(experiments.evidence(rows))


def shapes_of(contract) -> dict[str, Shape]:
    return default_shapes(distributed.configurations(contract["params"]))


def test_the_split_recovers_a_known_timeline(contract, timeline):
    rows = timeline
    sleep = contract["params"]["straggler"]["sleep_ms"]
    late = pick_value(rows, d01.job_variant(d01.STRAGGLER), overlap.LATENESS)
    assert late == pytest.approx(sleep, rel=0.05)
    # rank 0 waited for the sleep; rank 1 did not; the transfer is the simulated 2 ms
    assert pick_value(rows, d01.rank_variant(d01.STRAGGLER, 0), overlap.EXPOSED_WAIT) \
        == pytest.approx(sleep, rel=0.05)
    assert pick_value(rows, d01.rank_variant(d01.STRAGGLER, 1), overlap.EXPOSED_WAIT) == 0
    assert pick_value(rows, d01.job_variant(d01.BASELINE), overlap.TRANSFER) \
        == pytest.approx(2.0, abs=0.2)
    # overlap off: no communication hidden; on: the first buckets' all-reduces were
    assert pick_value(rows, d01.rank_variant(d01.OVERLAP_OFF, 0), overlap.HIDDEN) == 0
    assert pick_value(rows, d01.rank_variant(d01.BASELINE, 0), overlap.HIDDEN) > 0.5


def pick_value(rows, variant, metric, statistic="median") -> float:
    return float(tables.pick(rows, variant, metric, statistic))


def test_claims_hold_on_a_timeline_that_shows_each_mechanism(timeline):
    rows = timeline
    for cid in ("C48", "C49", "C50", "C51", "C52"):
        v = verdict(cid, rows)
        assert v.verdict == claims.REPRODUCED, (cid, v)


@pytest.mark.parametrize("cid, config, change", [
    # overlap off, yet its all-reduces move a tenth of the bytes: it exposes less
    ("C48", "overlap_off", {"transfer": 0.1}),
    # the single bucket all-reduces a tenth as long as the default's buckets
    ("C49", "bucket_100mb", {"transfer": 0.1}),
    # the measurement names rank 0, not the planted rank 1
    ("C50", "straggler", {"plant": (0, "forward", 30.0)}),
    # ... or the right rank, but late in its optimizer, not its forward
    ("C50", "straggler", {"plant": (1, "optimizer", 30.0)}),
    # the straggler's all-reduces themselves take longer (not waiting, transfer)
    ("C51", "straggler", {"transfer": 20.0}),
    # accumulation's one all-reduce is 8x longer: more exposed per batch, not less
    ("C52", "accum_k4", {"transfer": 40.0}),
])
def test_each_claim_can_differ(contract, cid, config, change):
    shapes = shapes_of(contract)
    shapes[config] = replace(shapes[config], **change)
    v = verdict(cid, simulated(contract, shapes))
    assert v.verdict == claims.DIFFERS, (cid, v)


@pytest.mark.parametrize("cid, configs, change", [
    ("C48", ("baseline", "overlap_off"), {"buckets": 1, "jitter": 1.0}),
    ("C49", ("bucket_100mb",), {"transfer": 2.0, "buckets": 1, "jitter": 1.0}),
    ("C50", ("straggler", "baseline"), {"plant": (1, "forward", 0.01), "jitter": 0.5}),
    # jitter of a tenth of the sleep: the transfer's change straddles C51's +-10% of it
    ("C51", ("straggler", "baseline"), {"jitter": 0.1}),
    ("C52", ("accum_k4", "baseline"), {"jitter": 1.0}),
])
def test_each_claim_is_inconclusive_inside_the_noise(contract, cid, configs, change):
    shapes = shapes_of(contract)
    if cid == "C51":
        change = {"jitter": change["jitter"] * contract["params"]["straggler"]["sleep_ms"]}
    for c in configs:
        shapes[c] = replace(shapes[c], **change)
    if cid == "C49":  # the baseline's buckets hide as little as the single one
        shapes["baseline"] = replace(shapes["baseline"], blocking=True, jitter=1.0)
    if cid == "C52":  # accumulation's one all-reduce exposes about what K=1's does per batch
        shapes["accum_k4"] = replace(shapes["accum_k4"], transfer=8.0)
    v = verdict(cid, simulated(contract, shapes, seed=3))
    assert v.verdict == claims.INCONCLUSIVE, (cid, v)


def test_a_model_inside_ddps_first_bucket_cannot_show_the_bucket_effect(contract):
    shapes = shapes_of(contract)
    shapes["baseline"] = replace(shapes["baseline"], buckets=1)
    v = verdict("C49", simulated(contract, shapes))
    assert v.verdict == claims.INCONCLUSIVE and "first bucket" in v.measured


def test_claims_without_d01_rows_are_not_run():
    empty = pd.DataFrame(columns=io.COLUMNS)
    for cid in ("C48", "C49", "C50", "C51", "C52"):
        assert verdict(cid, empty).verdict == claims.NOT_RUN


# ------------------------------------------------------------------ the verdict


def findings(rows) -> dict[str, diagnose.Finding]:
    return {f.bottleneck: f for f in diagnose.diagnose(rows).findings}


def test_a_slow_rank_in_the_baseline_is_the_verdict_with_its_phase(contract):
    shapes = shapes_of(contract)
    shapes["baseline"] = replace(shapes["baseline"], plant=(1, "input", 8.0))
    rows = simulated(contract, shapes)
    d = diagnose.diagnose(rows)
    assert d.verdict == "straggler", d.because
    assert "rank 1" in d.because and "input" in d.because and "rank 1's input" in d.intervention
    table = diagnose.to_frame(d)
    assert (table[table.candidate == "straggler"].source.str.startswith("D01 ")).all()


def test_exposed_transfer_is_the_verdict_when_the_bytes_take_the_step(contract):
    shapes = shapes_of(contract)
    shapes["baseline"] = replace(shapes["baseline"], transfer=30.0, buckets=1)
    f = findings(simulated(contract, shapes))
    assert f["straggler"].outcome == diagnose.RULED_OUT
    assert f["communication"].outcome == diagnose.FITS
    # the intervention is one D01 measured beyond the noise
    assert "D01's" in f["communication"].intervention


def test_a_step_that_hides_its_communication_rules_both_out(contract):
    shapes = shapes_of(contract)
    shapes["baseline"] = replace(shapes["baseline"], transfer=0.2, bwd=20.0, buckets=8)
    f = findings(simulated(contract, shapes))
    assert f["straggler"].outcome == diagnose.RULED_OUT
    assert f["communication"].outcome == diagnose.RULED_OUT


def test_a_single_process_run_does_not_measure_either():
    f = findings(pd.DataFrame(columns=io.COLUMNS))
    for name in ("straggler", "communication"):
        assert f[name].outcome == diagnose.NOT_MEASURED and "D01" in f[name].because


def test_what_if_candidates_name_the_measured_configuration(timeline):
    cands = {c["name"]: c for c in d01.whatif_candidates(timeline)}
    assert set(cands) == {"bucket_size", "no_sync_accumulation", "fp16_compression"}
    assert cands["no_sync_accumulation"]["config"] == "accum_k4"
    assert cands["no_sync_accumulation"]["step_resolved"] is True
    assert all(c["applies"] == "" for c in cands.values())
    assert "D01" in d01.whatif_candidates(pd.DataFrame(columns=io.COLUMNS))[0]["applies"]


# ------------------------------------------------------------------ real models


def _awkward(contract, case: str) -> dict:
    c = copy.deepcopy(contract)
    c["workload"] = case
    c["workloads"] = {case: {"target": f"awkward_workloads:{case}", "params": {}}}
    return c


def test_a_workload_without_the_steps_parts_is_one_unsupported_row(contract, tmp_path):
    from perflab.experiments.d01_data_parallel import ranks

    c = _awkward(contract, "own_step")
    p = distributed.Plan(2, "gloo", 1, "cpu")
    record = ranks.measure_rank(c, p, "cpu", 0, 2, lambda msg: None, runner.Context)
    assert record["steps"] == [] and "loss_fn" in record["unsupported"]
    ctx = runner.Context("D01", c, lambda msg: None)
    ctx.outputs = {"ranks": str(tmp_path / "ranks.json")}
    SCRIPT.merge(ctx, p, [record, {**record, "rank": 1}])
    frame = io.rows_to_frame(ctx.rows)
    io.validate_rows(frame)
    assert list(frame.status) == ["unsupported"] and "train_step" in frame.reason.iloc[0]


def test_parameters_without_a_gradient_are_found_before_ddp_wraps_the_model(contract):
    from perflab.experiments.d01_data_parallel import ranks

    ctx = runner.Context("D01", _awkward(contract, "unused_head"), lambda msg: None)
    w = ctx.workload()
    assert ranks.unused_parameters(w, ctx.device)  # DDP then finds them every step
    assert all(q.grad is None for q in w.model.parameters())
    ctx = runner.Context("D01", contract, lambda msg: None)
    assert ranks.unused_parameters(ctx.workload(), ctx.device) == []


# ------------------------------------------------------------------ the launch


def test_the_plan_of_a_contract(contract):
    p = distributed.plan(contract, visible_cuda=0, cores=4)
    assert (p.ranks, p.backend, p.rank_threads, p.devices()) == (2, "gloo", 2, ["cpu"])
    gpu = {**contract, "device": "cuda:0"}
    p = distributed.plan(gpu, visible_cuda=4, cores=8)
    assert (p.ranks, p.backend, p.devices()) == (4, "nccl", [f"cuda:{i}" for i in range(4)])
    # a SLURM submit host cannot count the GPUs: the ranks are named, a task's cores its own
    named = {**gpu, "params": {**gpu["params"], "ranks": 2}}
    p = distributed.plan(named, visible_cuda=None, cores=3, cores_per_rank=True)
    assert (p.ranks, p.rank_threads) == (2, 3)
    with pytest.raises(distributed.PlanError, match="submit host"):
        distributed.plan(gpu, visible_cuda=None, cores=1)
    with pytest.raises(distributed.PlanError, match="need 3 CUDA devices"):
        distributed.plan({**gpu, "device": "cuda:1"}, visible_cuda=2, cores=1)


def test_the_launcher_passes_the_environment_through(monkeypatch):
    for var in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        monkeypatch.setenv(var, "machine-set")
    p = distributed.Plan(2, "nccl", 3, "cuda")
    env = distributed.rank_environment(p)
    assert env["NCCL_NVLS_ENABLE"] == env["NVSHMEM_DISABLE_NVLS"] == "machine-set"
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "machine-set"
    assert env["OMP_NUM_THREADS"] == "3"
    assert env["PYTHONPATH"].split(":")[0] == str(ROOT)
    cmd = distributed.torchrun_command(p, Path("job.json"))
    assert cmd[1:3] == ["-m", "torch.distributed.run"] and "--nproc-per-node" in cmd
    assert cmd[-2:] == [str(ROOT / "scripts" / "data_parallel_rank.py"), "job.json"]


def test_one_slurm_job_of_n_tasks():
    from perflab.experiments.d01_data_parallel.distributed import job_resources

    gpu = job_resources(distributed.Plan(4, "nccl", 2, "cuda"), gpus=True)
    assert gpu == {"tasks": 4, "nodes": 1, "mpi": "torchrun", "gpu": 4, "tasks_per_gpu": 1}
    cpu = job_resources(distributed.Plan(2, "gloo", 1, "cpu"), gpus=False)
    assert cpu == {"tasks": 2, "nodes": 1, "mpi": "torchrun", "gpu": 0}
    assert job_resources(None, gpus=True) == {"gpu": 0}


# ------------------------------------------------------------------ the claims' cases
# C48, C49, C50, C51, C52: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def d01_judged(config, metric, rel, *, base=10.0, aa_pct=5.0, p=0.001, ci=0.05):
    """D01's judgement of ``config`` against the baseline on ``metric`` (rel % of ``base``),
    held to D01's own A/A floor ``aa_pct`` of that metric, and that floor's row."""
    effect, half = rel * base / 100, ci * base
    resolved = p < 0.05 and not (effect - half <= 0 <= effect + half) and abs(rel) > aa_pct
    v = d01.diff_variant(config, d01.BASELINE, metric)
    return [("D01", v, "ab_effect", "value", effect), ("D01", v, "ab_effect_rel", "value", rel),
            ("D01", v, "ab_ci_low", "value", effect - half),
            ("D01", v, "ab_ci_high", "value", effect + half), ("D01", v, "ab_p", "value", p),
            ("D01", v, "ab_resolved", "value", float(resolved)),
            ("D01", d01.diff_variant(d01.AA, d01.BASELINE, metric), d01.AA_FLOOR, "value",
             aa_pct)]


def d01_exposed(config, per_batch, rel, p=0.001, **extra):
    """The baseline's exposed communication, ``config``'s, and their judgement."""
    job = d01.job_variant
    return [("D01", job(d01.BASELINE), d01.EXPOSED_PER_BATCH, "median", 10.0),
            ("D01", job(config), d01.EXPOSED_PER_BATCH, "median", per_batch),
            ("D01", d01.rank_variant(d01.BASELINE, 0), "comm_time", "median", 14.0),
            ("D01", d01.rank_variant(d01.BASELINE, 0), "hidden_comm", "median", 4.0),
            *[("D01", job(c), d01.BUCKETS, "value", n) for c, n in extra.items()],
            *d01_judged(config, d01.EXPOSED_PER_BATCH, rel, p=p)]


case("C48", lambda: rows(*d01_exposed(d01.OVERLAP_OFF, 14.0, 40.0)),
     lambda: rows(*d01_exposed(d01.OVERLAP_OFF, 6.0, -40.0)),
     lambda: rows(*d01_exposed(d01.OVERLAP_OFF, 10.3, 3.0)))
case("C49", lambda: rows(*d01_exposed("bucket_1000mb", 14.0, 40.0, baseline=4, bucket_1000mb=1)),
     lambda: rows(*d01_exposed("bucket_1000mb", 6.0, -40.0, baseline=4, bucket_1000mb=1)),
     lambda: rows(*d01_exposed("bucket_1000mb", 10.3, 3.0, p=0.3, baseline=4,
                               bucket_1000mb=1)))
case("C52", lambda: rows(*d01_exposed("accum_k4", 2.5, -75.0)),
     lambda: rows(*d01_exposed("accum_k4", 14.0, 40.0)),
     lambda: rows(*d01_exposed("accum_k4", 9.7, -3.0, p=0.3)))


def d01_straggler(late=1, late_p=0.001, excess="forward", lateness=30.0, rel=2000.0,
                  transfer=(-0.5, 0.7), wait=29.0):
    """A planted straggler (rank 1, 30 ms in forward) and what D01 measured of it."""
    job = d01.job_variant(d01.STRAGGLER)
    t = d01.diff_variant(d01.STRAGGLER, d01.BASELINE, "allreduce_transfer")
    return rows(("D01", d01.planted_variant("forward"), d01.PLANTED_RANK, "value", 1),
                ("D01", d01.planted_variant("forward"), d01.PLANTED_SLEEP, "value", 30.0),
                ("D01", job, d01.LATE_RANK, "value", late),
                ("D01", job, d01.LATE_P, "value", late_p),
                ("D01", job, "arrival_lateness", "median", lateness),
                *[("D01", d01.phase_variant(d01.STRAGGLER, ph), d01.EXCESS, "value",
                   lateness if ph == excess else 0.1) for ph in d01.PHASES],
                *d01_judged(d01.STRAGGLER, "arrival_lateness", rel, base=1.5),
                ("D01", t, "ab_effect", "value", sum(transfer) / 2),
                ("D01", t, "ab_ci_low", "value", transfer[0]),
                ("D01", t, "ab_ci_high", "value", transfer[1]),
                ("D01", d01.rank_variant(d01.STRAGGLER, 0), "allreduce_wait", "median", wait),
                ("D01", d01.rank_variant(d01.STRAGGLER, 1), "allreduce_wait", "median", 0.0))


case("C50", d01_straggler, lambda: d01_straggler(late=0),
     lambda: d01_straggler(late_p=0.4, lateness=1.6, rel=3.0))
case("C51", d01_straggler, lambda: d01_straggler(transfer=(10.0, 14.0)),
     lambda: d01_straggler(transfer=(-5.0, 6.0)))
