"""perflab.pipeline.config: resolution, contracts, and errors that name the offending key."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from perflab.experiments.catalogue import EXPERIMENTS
from perflab.pipeline import config

REPO_ROOT = Path(__file__).resolve().parents[1]
TEST_CONFIG = REPO_ROOT / "config" / "test.yaml"

needs_no_cuda = pytest.mark.skipif(
    __import__("torch").cuda.is_available(), reason="this machine has CUDA"
)


# ---------------------------------------------------------------- good configs


@needs_no_cuda
def test_resolve_default_config_on_cpu(default_config_raw):
    cfg = config.resolve(default_config_raw)
    assert cfg["resolved_device"] == "cpu"
    assert cfg["resolved_scale"] == "cpu"
    assert cfg["resolved_tag"] == f"cpu-{os.cpu_count()}c"
    # every experiment but those that need several devices (D01: data parallel) and the
    # what-if set (W01), which runs only when asked
    assert cfg["resolved_experiments"] == [e for e in EXPERIMENTS if e not in ("D01", "W01")]
    # the cpu scale patch is applied, untouched keys keep the chapter's values
    assert cfg["workloads"]["mlp"]["dim"] == 512
    assert cfg["workloads"]["mlp"]["num_classes"] == 1000
    assert cfg["timing"] == {"warmup": 30, "repeats": 400}


def test_resolve_fills_schema_defaults():
    # (scale given: the schema's default `scales` is empty, so `auto` -> cpu would not resolve)
    cfg = config.resolve({"device": "cpu", "scale": "chapter"})
    assert cfg["resolved_scale"] == "chapter"
    assert cfg["resolved_tag"] == f"cpu-{os.cpu_count()}c-chapter"
    assert cfg["timing"] == {"warmup": 30, "repeats": 400}
    assert cfg["experiments"]["E01"]["loops"] == [20, 100, 400]
    assert cfg["experiments"]["E04"]["min_run_time_s"] == 2.0
    assert cfg["results_dir"] == "results"
    assert cfg["threads"] == "auto"


@pytest.mark.parametrize("value, expected", [("auto", True), (False, False), (True, True)])
def test_flush_denormal_in_contract_on_cpu(default_config_raw, value, expected):
    cfg = config.resolve({**default_config_raw, "device": "cpu", "flush_denormal": value})
    assert config.contract(cfg, "E01")["flush_denormal"] is expected


def test_resolve_does_not_mutate_its_input(default_config_raw):
    before = copy.deepcopy(default_config_raw)
    config.resolve(default_config_raw)
    assert default_config_raw == before


def test_resolve_test_config(tiny_cfg):
    assert tiny_cfg["resolved_scale"] == "tiny"
    assert tiny_cfg["resolved_tag"].endswith("-tiny")
    assert tiny_cfg["resolved_tag"] == f"cpu-{os.cpu_count()}c-tiny"
    assert tiny_cfg["timing"] == {"warmup": 3, "repeats": 30}
    assert tiny_cfg["workloads"]["mlp"] == {"dim": 64, "depth": 2, "num_classes": 10, "batch": 16}
    assert tiny_cfg["experiments"]["E01"]["loops"] == [5, 20, 40]
    assert tiny_cfg["experiments"]["E02"]["compile"] is True  # default kept


def test_load_merges_files_then_overrides():
    cfg = config.load([TEST_CONFIG], {"device": "cpu", "tag": "mine", "run": "e01,E03,E01"})
    assert cfg["resolved_tag"] == "mine"
    assert cfg["resolved_experiments"] == ["E01", "E03"]


def test_load_missing_file():
    with pytest.raises(config.ConfigError, match="does not exist"):
        config.load(["/nonexistent/perflab.yaml"])


def test_load_non_mapping_file(tmp_path):
    p = tmp_path / "list.yaml"
    p.write_text("- a\n- b\n")
    with pytest.raises(config.ConfigError, match="mapping"):
        config.load([p])


@pytest.mark.parametrize(
    "run, expected",
    [("all", config.by_default()), (["all"], config.by_default()), ("E03", ["E03"]),
     (["e04", "E01"], ["E04", "E01"]), ("E06, E02", ["E06", "E02"]),
     ("D01", ["D01"]), ("all,D01", [*config.by_default(), "D01"]),
     (["D01", "all"], ["D01", *config.by_default()]),
     ("W01", ["W01"]), ("all,W01", [*config.by_default(), "W01"])],
)
def test_run_selection(base_config, run, expected):
    base_config["run"] = run
    assert config.resolve(base_config)["resolved_experiments"] == expected


def test_all_stands_beside_only_the_ids_it_leaves_out(base_config):
    base_config["run"] = "all,E03"
    with pytest.raises(config.ConfigError, match="E03 among them"):
        config.resolve(base_config)


def test_all_leaves_out_what_needs_more_devices_than_there_are():
    assert "D01" not in config.by_default(1)
    # two GPUs: data parallel runs too; the what-if set (W01) runs only when asked, anywhere
    assert config.by_default(2) == [e for e in EXPERIMENTS if e != "W01"]
    assert "W01" not in config.by_default(1)


@pytest.mark.parametrize("d01, key, match", [
    ({"backend": "nccl"}, "experiments.D01.backend", "nccl needs CUDA"),
    ({"straggler": {"rank": 2}}, "experiments.D01.straggler.rank", "not a rank of 2"),
    ({"ranks": 1}, "experiments.D01.ranks", "not valid"),
    ({"straggler": {"phase": "logging"}}, "experiments.D01.straggler.phase", "not one of"),
    ({"bucket_cap_mb": [0]}, "experiments.D01.bucket_cap_mb.0", "minimum"),
])
def test_bad_data_parallel_contracts_stop_the_run(base_config, d01, key, match):
    base_config["run"] = "D01"
    base_config["experiments"]["D01"] = d01
    with pytest.raises(config.ConfigError, match=match) as err:
        config.resolve(base_config)
    assert f"'{key}'" in str(err.value)


def test_a_bad_data_parallel_contract_is_not_checked_when_d01_does_not_run(base_config):
    base_config["experiments"]["D01"] = {"backend": "nccl"}
    assert "D01" not in config.resolve(base_config)["resolved_experiments"]


def test_user_workload_target_resolves(base_config):
    base_config["workloads"]["mine"] = {"target": "perflab.instruments.workloads:mlp", "dim": 8}
    base_config["workload"] = "mine"
    cfg = config.resolve(base_config)
    target, params = config.workload_spec(cfg)
    assert target == "perflab.instruments.workloads:mlp"
    assert params == {"dim": 8, "seed": 0}


# ---------------------------------------------------------------- contract()


def test_contract_slices(tiny_cfg):
    c = config.contract(tiny_cfg, "E01")
    assert set(c) == {"experiment", "device", "dtype", "scale", "tag", "seed", "threads",
                      "flush_denormal", "host_cores",
                      "timing", "workload", "workloads", "params"}
    assert c["experiment"] == "E01"
    assert c["device"] == "cpu"
    assert c["scale"] == "tiny"
    assert c["tag"] == tiny_cfg["resolved_tag"]
    assert c["timing"] == {"warmup": 3, "repeats": 30}
    assert c["params"] == {"loops": [5, 20, 40], "loop_rounds": 3, "host_return_repeats": 5,
                           "repeats": None}
    # only the workload it builds (the controlled one), with the seed filled in
    assert c["workloads"] == {
        "mlp": {"target": "mlp",
                "params": {"dim": 64, "depth": 2, "num_classes": 10, "batch": 16, "seed": 0}}
    }
    json.dumps(c)  # a job parameter: must be plain data


def test_contract_ignores_other_experiments_and_workloads(tiny_cfg):
    other = copy.deepcopy(tiny_cfg)
    other["experiments"]["E03"]["repeats"] = 99
    other["experiments"]["E04"]["min_run_time_s"] = 9.0
    other["workloads"]["pointwise"]["dim"] = 7
    assert config.contract(other, "E01") == config.contract(tiny_cfg, "E01")
    assert config.contract(other, "E03") != config.contract(tiny_cfg, "E03")


def test_contract_follows_the_controlled_workload(tiny_cfg):
    other = copy.deepcopy(tiny_cfg)
    other["workload"] = "pointwise"
    c = config.contract(other, "E02")
    assert c["workload"] == "pointwise"
    assert set(c["workloads"]) == {"pointwise"}
    assert c["params"] == {"compile": True, "blocks": 3, "repeats": None}


def test_experiment_outputs(tiny_cfg):
    out = config.experiment_outputs(tiny_cfg, "E03")
    d = f"results/{tiny_cfg['resolved_tag']}"
    assert out == {"csv": f"{d}/e03_warmup_spread.csv",
                   "samples": f"{d}/e03_warmup_spread_samples.csv",
                   "provenance": f"{d}/e03_warmup_spread.json"}


# ---------------------------------------------------------------- bad configs

# (id, patch deep-merged over the default config pinned to cpu, offending dotted key,
#  extra text the message must contain)
BAD = [
    ("flush_denormal_word", {"flush_denormal": "yes"}, "flush_denormal", "not valid"),
    ("host_cores_word", {"host_cores": "fastest"}, "host_cores", ""),
    ("unknown-top-level", {"bogus": 1}, "bogus", "unknown key"),
    ("unknown-nested", {"timing": {"warmpu": 3}}, "timing.warmpu", "unknown key"),
    ("unknown-experiment-section", {"experiments": {"E99": {}}}, "experiments.E99", "unknown key"),
    ("unknown-experiment-param", {"experiments": {"E01": {"loop": [1]}}},
     "experiments.E01.loop", "unknown key"),
    ("wrong-type", {"timing": {"repeats": "many"}}, "timing.repeats", ""),
    ("zero-repeats", {"timing": {"repeats": 0}}, "timing.repeats", ""),
    ("negative-warmup", {"timing": {"warmup": -1}}, "timing.warmup", ""),
    ("negative-size", {"workloads": {"mlp": {"dim": -5}}}, "workloads.mlp.dim", ""),
    ("zero-batch", {"workloads": {"pointwise": {"batch": 0}}}, "workloads.pointwise.batch", ""),
    ("one-class", {"workloads": {"mlp": {"num_classes": 1}}}, "workloads.mlp.num_classes", ""),
    ("zero-lr", {"workloads": {"mlp": {"lr": 0}}}, "workloads.mlp.lr", ""),
    ("workload-not-mapping", {"workloads": {"mlp": 5}}, "workloads.mlp", ""),
    ("unknown-device", {"device": "tpu"}, "device", ""),
    ("bad-cuda-index", {"device": "cuda:x"}, "device", ""),
    ("unknown-dtype", {"dtype": "float64"}, "dtype", ""),
    ("float16-on-cpu", {"dtype": "float16"}, "dtype", "float16"),
    ("unknown-scale", {"scale": "huge"}, "scale", "huge"),
    ("unknown-experiment-in-run", {"run": ["E01", "E99"]}, "run", "E99"),
    ("unknown-experiment-in-run-string", {"run": "E01,E42"}, "run", "E42"),
    ("empty-run-list", {"run": []}, "run", ""),
    ("run-wrong-type", {"run": 5}, "run", ""),
    ("unknown-workload-name", {"workload": "resnet"}, "workload", "resnet"),
    ("empty-workload", {"workload": ""}, "workload", ""),
    ("missing-module", {"workloads": {"mine": {"target": "perflab_no_such_module_xyz:make"}}},
     "workloads.mine.target", "cannot import"),
    ("missing-attribute", {"workloads": {"mine": {"target": "perflab.instruments.workloads:no_such_fn"}}},
     "workloads.mine.target", "no_such_fn"),
    ("not-callable", {"workloads": {"mine": {"target": "perflab.experiments.catalogue:EXPERIMENTS"}}},
     "workloads.mine.target", "not callable"),
    ("malformed-target", {"workloads": {"mine": {"target": ":make"}}},
     "workloads.mine.target", "package.module:function"),
    ("unknown-registered-target", {"workloads": {"mine": {"target": "resnet50"}}},
     "workloads.mine.target", "resnet50"),
    ("controlled-missing-module", {"workload": "perflab_no_such_module_xyz:make"},
     "workload", "cannot import"),
    ("bad-tag", {"tag": "my tag/with slash"}, "tag", ""),
    ("empty-results-dir", {"results_dir": ""}, "results_dir", ""),
    ("E01-loops-empty", {"experiments": {"E01": {"loops": []}}}, "experiments.E01.loops", ""),
    ("E01-loops-zero", {"experiments": {"E01": {"loops": [20, 0]}}}, "experiments.E01.loops", ""),
    ("E01-host-return-zero", {"experiments": {"E01": {"host_return_repeats": 0}}},
     "experiments.E01.host_return_repeats", ""),
    ("E01-loop-rounds-zero", {"experiments": {"E01": {"loop_rounds": 0}}},
     "experiments.E01.loop_rounds", ""),
    ("E05-blocks-zero", {"experiments": {"E05": {"blocks": 0}}}, "experiments.E05.blocks", ""),
    ("E02-compile-not-bool", {"experiments": {"E02": {"compile": "yes"}}},
     "experiments.E02.compile", ""),
    ("E03-repeats-1", {"experiments": {"E03": {"repeats": 1}}}, "experiments.E03.repeats", ""),
    ("E03-negative-warmup", {"experiments": {"E03": {"warmups": [0, -1]}}},
     "experiments.E03.warmups", ""),
    ("E04-min-run-time-0", {"experiments": {"E04": {"min_run_time_s": 0}}},
     "experiments.E04.min_run_time_s", ""),
    ("E04-one-round", {"experiments": {"E04": {"blocks": 1}}}, "experiments.E04.blocks", ""),
    ("E04-rounds-float", {"experiments": {"E04": {"blocks": 2.5}}}, "experiments.E04.blocks", ""),
    ("E06-unknown-param", {"experiments": {"E06": {"events": True}}},
     "experiments.E06.events", "unknown key"),
    ("threads-0", {"threads": 0}, "threads", ""),
    ("threads-many", {"threads": "many"}, "threads", ""),
    ("threads-float", {"threads": 2.5}, "threads", ""),
    ("seed-negative", {"seed": -1}, "seed", ""),
    ("seed-string", {"seed": "zero"}, "seed", ""),
    ("scale-not-mapping", {"scales": {"cpu": 5}}, "scales.cpu", ""),
    ("scale-patch-bad-value", {"scale": "cpu", "scales": {"cpu": {"timing": {"repeats": 0}}}},
     "timing.repeats", "after applying scales.cpu"),
    ("scale-patch-unknown-key", {"scale": "cpu", "scales": {"cpu": {"timng": {"repeats": 3}}}},
     "timng", "after applying scales.cpu"),
    ("scale-patch-bad-size", {"scale": "cpu", "scales": {"cpu": {"workloads": {"mlp": {"depth": 0}}}}},
     "workloads.mlp.depth", "after applying scales.cpu"),
    ("scale-patch-sets-scale", {"scale": "cpu", "scales": {"cpu": {"scale": "chapter"}}},
     "scales.cpu", "cannot set scale"),
    ("scale-patch-sets-scales", {"scale": "cpu", "scales": {"cpu": {"scales": {}}}},
     "scales.cpu", "cannot set scale"),
    ("scale-patch-float16", {"scale": "f16", "scales": {"f16": {"dtype": "float16"}}},
     "dtype", "float16"),
    # issue 7: further types, ranges and bad paths
    ("gpu-jobs-word", {"gpu_jobs": "maybe"}, "gpu_jobs", "not valid"),
    ("gpu-jobs-number", {"gpu_jobs": 2}, "gpu_jobs", "not valid"),
    ("timing-not-mapping", {"timing": 5}, "timing", ""),
    ("experiments-not-mapping", {"experiments": ["E01"]}, "experiments", ""),
    ("results-dir-not-string", {"results_dir": 5}, "results_dir", ""),
    ("empty-figures-dir", {"figures_dir": ""}, "figures_dir", ""),
    ("results-dir-is-a-file", {"results_dir": str(REPO_ROOT / "README.md")},
     "results_dir", "is a file"),
    ("figures-dir-under-a-file", {"figures_dir": str(REPO_ROOT / "README.md" / "figs")},
     "figures_dir", "which is a file"),
    ("tag-empty", {"tag": ""}, "tag", ""),
    ("seed-float", {"seed": 1.5}, "seed", ""),
    # claim_processes: experiments of one job, by id, 1 to 8 processes
    ("claim-processes-unknown", {"claim_processes": {"E99": 2}}, "claim_processes.E99",
     "unknown experiment"),
    ("claim-processes-own-jobs", {"claim_processes": {"E08": 2}}, "claim_processes.E08",
     "jobs of its own shape"),
    ("claim-processes-zero", {"claim_processes": {"E05": 0}}, "claim_processes.E05",
     "1 to 8"),
    ("claim-processes-lowercase", {"claim_processes": {"e05": 2}}, "claim_processes", ""),
    # issue 39: a tensor larger than the host (E12's job died with no row)
    ("E12-big-mib-over-the-host", {"scale": "chapter", "experiments": {"E12": {"big_mib": 10**9}}},
     "experiments.E12.big_mib", "MemTotal"),
]


@pytest.mark.parametrize("patch, key, text", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_config_names_the_key(base_config, patch, key, text):
    cfg = config.deep_merge(base_config, patch)
    with pytest.raises(config.ConfigError) as exc:
        config.resolve(cfg)
    msg = str(exc.value)
    assert key in msg, msg
    assert msg.startswith(f"config error at '{key}"), msg
    assert text in msg, msg


def test_a_large_tensor_is_refused_only_where_e12_runs_and_only_beyond_the_device(base_config):
    """The control of E12-big-mib-over-the-host: not selected, or a size the host holds."""
    base_config.update(scale="chapter", experiments={"E12": {"big_mib": 10**9}}, run=["E01"])
    config.resolve(base_config)
    base_config["run"] = ["E12"]
    base_config["experiments"]["E12"]["big_mib"] = 1024
    assert config.resolve(base_config)["experiments"]["E12"]["big_mib"] == 1024


def test_enough_distinct_bad_configs():
    assert len({b[0] for b in BAD}) == len(BAD) >= 20


@needs_no_cuda
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_requested_on_cpu_machine(base_config, device):
    base_config["device"] = device
    with pytest.raises(config.ConfigError, match=r"^config error at 'device'.*no CUDA") as exc:
        config.resolve(base_config)
    assert device in str(exc.value)


# ---------------------------------------------------------------- through Snakemake


def _snakemake(tmp_path, bad: dict):
    # target one experiment rule: its inputs are all in the repository, so the plan does
    # not depend on files other parts of the pipeline (report, figures) still lack
    bad_file = tmp_path / "bad.yaml"
    bad_file.write_text(yaml.safe_dump(bad))
    results = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "e01_lying_benchmark",
         "--configfile", str(bad_file), "--config", f"results_dir={results}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
    )
    return proc, proc.stdout + proc.stderr, results


@pytest.mark.parametrize(
    "bad, key",
    [
        ({"timing": {"repeats": 0}}, "timing.repeats"),
        ({"device": "tpu"}, "device"),
        ({"workloads": {"mlp": {"target": "perflab_no_such_module_xyz:make"}}},
         "workloads.mlp.target"),
    ],
    ids=["zero-repeats", "unknown-device", "missing-module"],
)
def test_snakemake_stops_before_any_job(tmp_path, bad, key):
    proc, out, results = _snakemake(tmp_path, bad)
    assert proc.returncode != 0, out
    assert f"config error at '{key}'" in out, out
    assert "rule e0" not in out, out
    assert "Job stats" not in out, out
    assert not results.exists()


def test_snakemake_dry_run_control(tmp_path):
    """The same invocation with a valid config plans jobs (so the checks above mean something)."""
    proc, out, results = _snakemake(tmp_path, yaml.safe_load(TEST_CONFIG.read_text()))
    assert proc.returncode == 0, out
    assert "rule e01_lying_benchmark" in out, out
    assert str(results) in out
    assert not results.exists()  # a dry run writes nothing


def test_a_cpu_run_parses_its_workflow_without_torch(tmp_path):
    """Snakemake loads the workflow at every invocation: on a CPU, with a registered workload,
    the validation asks nothing of torch (a torch that cannot be imported is not noticed)."""
    blocked = tmp_path / "blocked" / "torch"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('torch imported while parsing')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--cores", "1", "e01_lying_benchmark",
         "--configfile", str(TEST_CONFIG), "--config", "device=cpu",
         f"results_dir={tmp_path / 'results'}"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked.parent), str(REPO_ROOT)])})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "rule e01_lying_benchmark" in proc.stdout + proc.stderr


def test_unknown_parameter_of_registered_workload(base_config):
    base_config["workloads"]["mlp"]["dimm"] = 512
    with pytest.raises(config.ConfigError, match="workloads.mlp.dimm"):
        config.resolve(base_config)


# ---------------------------------------------------------------- a cluster's submit host


@needs_no_cuda
def test_submit_host_takes_cuda_on_trust_with_a_tag(base_config):
    base_config.update(device="cuda", tag="h200")
    cfg = config.resolve(base_config, check_device=False)
    assert cfg["resolved_device"] == "cuda:0"
    assert cfg["resolved_scale"] == "chapter"
    assert cfg["resolved_tag"] == "h200"


@needs_no_cuda
def test_submit_host_without_cuda_needs_a_tag(base_config):
    base_config["device"] = "cuda"
    with pytest.raises(config.ConfigError, match=r"^config error at 'tag'.*explicit tag"):
        config.resolve(base_config, check_device=False)
