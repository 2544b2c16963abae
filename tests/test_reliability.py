"""Nothing wrong gets through: bad inputs stop clearly, faults are survived (issue 20).

Each bad input must stop with one message naming the key or the file (and the line or
row where there is one), before any job starts; each fault must leave no wrong result
behind. The cases are counted in docs/failures.md (``test_readme_counts_the_cases``):
:data:`BAD_INPUTS` and :data:`FAULTS` here, with tests/test_config.py's ``BAD`` and
tests/test_failures.py's cases.

Small fixtures throughout: result directories copied from the shipped 2-core run, a
tiny contract; Snakemake is run as a dry run where that suffices, and for real only to
stop before its first job, or for one tiny experiment.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
import yaml
from experiments import forget_package, write_user_package
from test_user_workload import USER_MODULE

from perflab import cli
from perflab.core import devicelock, env, io
from perflab.experiments.catalogue import EXPERIMENTS
from perflab.pipeline import config, preflight, runner
from perflab.views import compare, diagnose, ledger, partial, reference

ROOT = Path(__file__).resolve().parents[1]
TEST_CONFIG = ROOT / "config" / "test.yaml"
SHIPPED = ROOT / "report" / "reference" / "cpu-2c"
#: the experiments the small fixtures copy from the shipped run
FIXTURE_EXPERIMENTS = ("C00", "E01", "E05", "E13")


# ---------------------------------------------------------------- the cases counted

#: id -> what it is; every one is driven by a test below and must stop clearly
BAD_INPUTS: dict[str, str] = {}
#: id -> what it is; every one is driven by a test below and must be survived
FAULTS: dict[str, str] = {}


def _cases(table: dict[str, str], rows: list[tuple]) -> list:
    """Count each row ``(id, what, *args)`` in ``table``; its args as a pytest param."""
    for row in rows:
        assert row[0] not in table, f"case {row[0]} counted twice"
        table[row[0]] = row[1]
    return [pytest.param(*row[2:], id=row[0]) for row in rows]


# ---------------------------------------------------------------- fixtures


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A result directory of this run: four experiments of the shipped 2-core run."""
    d = tmp_path / "results" / "cpu-2c"
    d.mkdir(parents=True)
    for eid in FIXTURE_EXPERIMENTS:
        slug = EXPERIMENTS[eid].slug
        for suffix in (".csv", ".json"):
            shutil.copy(SHIPPED / "results" / f"{slug}{suffix}", d / f"{slug}{suffix}")
    return d


def _csv(d: Path, eid: str = "E01") -> Path:
    return d / f"{EXPERIMENTS[eid].slug}.csv"


def _write_samples(d: Path, eid: str = "E01", n: int = 6) -> Path:
    """A samples file for ``eid`` and its count in the provenance, as a job writes both."""
    path = d / f"{EXPERIMENTS[eid].slug}_samples.csv"
    io.write_samples(path, [{"experiment": eid, "variant": "v", "execution": "eager",
                             "metric": "step_latency", "unit": "ms", "block": 0, "index": i,
                             "value": 1.0 + i} for i in range(n)])
    prov_path = d / f"{EXPERIMENTS[eid].slug}.json"
    prov = json.loads(prov_path.read_text())
    prov["samples"] = n
    prov_path.write_text(json.dumps(prov))
    return path


def _stops(fn, *needles: str) -> str:
    """``fn()`` must raise a ContractError/ConfigError whose one message holds every needle."""
    with pytest.raises((io.ContractError, config.ConfigError)) as exc:
        fn()
    msg = str(exc.value)
    assert "\n" not in msg.strip(), msg
    for needle in needles:
        assert needle in msg, (needle, msg)
    return msg


# ---------------------------------------------------------------- config files and keys

CONFIG_FILES = _cases(BAD_INPUTS, [
    ("yaml-duplicate-key", "a key given twice in a config file", "seed: 1\nseed: 2\n",
     ["line 2", "duplicate key 'seed'", "first given on line 1"]),
    ("yaml-duplicate-nested-key", "a key given twice inside a mapping",
     "experiments:\n  E01:\n    host_return_repeats: 5\n    host_return_repeats: 6\n",
     ["line 4", "duplicate key 'host_return_repeats'"]),
    ("yaml-does-not-parse", "a config file that is not YAML", "timing: {repeats: 3\n",
     ["line 2"]),
    ("yaml-top-level-list", "a config file holding a list", "- a\n- b\n",
     ["must hold a mapping", "not a list"]),
    ("yaml-top-level-scalar", "a config file holding a number", "42\n", ["not a int"]),
    ("yaml-not-text", "a config file of binary bytes", b"\xff\xfe\x00seed", ["cannot be read"]),
    ("config-file-missing", "a config file that does not exist", None, ["does not exist"]),
    ("config-file-is-a-directory", "a directory given as a config file", "DIR",
     ["is a directory"]),
    # issue 39: a key twice on one line was taken silently (the check compared lines)
    ("yaml-duplicate-key-one-line", "a key given twice in one flow mapping",
     "timing: {repeats: 3, repeats: 5}\n", ["line 1", "duplicate key 'repeats'"]),
    ("json-duplicate-key", "a key given twice in a JSON config file", '{"seed": 1, "seed": 2}',
     ["duplicate key 'seed'", "JSON"]),
    ("config-file-empty", "an empty config file (Snakemake refuses it, naming no file)", "",
     ["holds no settings"]),
    ("config-file-only-comments", "a config file of comments only", "# device: cuda\n",
     ["holds no settings"]),
])


def _config_file(tmp_path: Path, text) -> Path:
    path = tmp_path / "mine.yaml"
    if text == "DIR":
        path.mkdir()
    elif isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text)
    return path


@pytest.mark.parametrize("text, needles", CONFIG_FILES)
def test_config_file_names_the_file(tmp_path, text, needles):
    path = _config_file(tmp_path, text)
    _stops(lambda: config.load([path], {"device": "cpu"}), str(path), *needles)


MERGE = _cases(BAD_INPUTS, [
    ("yaml-merge-key-override", "a YAML merge key overridden in the same mapping (valid YAML, "
     "was refused as a duplicate key)", "timing:\n  <<: *b\n  repeats: 7\n"),
])


@pytest.mark.parametrize("timing", MERGE)
def test_a_yaml_merge_key_override_is_taken(tmp_path, timing):
    path = tmp_path / "merge.yaml"
    path.write_text("base: &b\n  repeats: 5\n  warmup: 2\n" + timing)
    cfg = config.load_yaml(path)
    assert cfg["timing"] == {"repeats": 7, "warmup": 2}
    # the control: a key written twice by hand is still refused, naming its line
    path.write_text("seed: 1\nseed: 2\n")
    _stops(lambda: config.load_yaml(path), str(path), "duplicate key 'seed'", "line 1")


KEYS = _cases(BAD_INPUTS, [
    ("tag-dotdot", "tag=.. (results one directory up)", {"tag": ".."}, "tag"),
    ("tag-dot", "tag=. (results in results_dir itself)", {"tag": "."}, "tag"),
    ("tag-300-chars", "a 300-character tag (was an OSError traceback)", {"tag": "t" * 300},
     "tag"),
    ("results-dir-climbs", "results_dir: ../../x (wrote outside the run directory)",
     {"results_dir": "../../x"}, "results_dir"),
    ("figures-dir-climbs", "figures_dir: a/../../x", {"figures_dir": "a/../../x"},
     "figures_dir"),
    ("results-dir-nul", "a NUL byte in results_dir (was a ValueError traceback)",
     {"results_dir": "res\0x"}, "results_dir"),
    ("long-run-hours-nan", "long_run_hours: .nan (switched the long-run guard off: a run of "
     "9.9 days started)", {"long_run_hours": float("nan")}, "long_run_hours"),
    ("workload-lr-inf", "a workload's lr: .inf", {"workloads": {"mlp": {"lr": float("inf")}}},
     "workloads.mlp.lr"),
    ("repeats-whole-float", "timing.repeats: 30.0 (failed inside the job, no key named)",
     {"timing": {"repeats": 30.0}}, "timing.repeats"),
    ("warmups-whole-float", "experiments.E03.warmups: [0, 1.0, 3]",
     {"experiments": {"E03": {"warmups": [0, 1.0, 3]}}}, "experiments.E03.warmups.1"),
    ("seed-whole-float", "seed: 5.0", {"seed": 5.0}, "seed"),
    ("e17-ks-do-not-divide", "an E17 K that does not divide the batch",
     {"experiments": {"E17": {"batch": 64, "ks": [1, 3]}}}, "experiments.E17.ks"),
    ("e17-ks-after-scale", "an E17 K that does not divide the scaled batch (1024)",
     {"experiments": {"E17": {"ks": [1, 48]}}}, "experiments.E17.ks"),
    ("seed-2-64", "a seed of 2**64 (torch cannot take it)", {"seed": 2**64}, "seed"),
    ("seed-2-63", "a seed of 2**63", {"seed": 2**63}, "seed"),
    ("run-all-and-ids", "run=all,E01", {"run": "all,E01"}, "run"),
    ("run-list-with-all", "run: [E01, all]", {"run": ["E01", "all"]}, "run"),
    ("allow-long-word", "allow_long=maybe", {"allow_long": "maybe"}, "allow_long"),
    ("long-run-hours-zero", "long_run_hours=0", {"long_run_hours": 0}, "long_run_hours"),
    ("compare-to-missing", "compare_to a directory that does not exist",
     {"compare_to": "no/such/dir"}, "compare_to"),
    ("compare-to-a-file", "compare_to a file", {"compare_to": str(ROOT / "README.md")},
     "compare_to"),
    ("compare-to-empty-dir", "compare_to a directory with no result", {"compare_to": "EMPTY"},
     "compare_to"),
    ("compare-to-garbage", "compare_to a directory whose CSV is garbage",
     {"compare_to": "GARBAGE"}, "compare_to"),
])


@pytest.mark.parametrize("patch, key", KEYS)
def test_bad_key_names_the_key(tmp_path, patch, key):
    if patch.get("compare_to") == "EMPTY":
        (tmp_path / "empty").mkdir()
        patch = {"compare_to": str(tmp_path / "empty")}
    elif patch.get("compare_to") == "GARBAGE":
        (tmp_path / "junk").mkdir()
        (tmp_path / "junk" / "e01_lying_benchmark.csv").write_bytes(bytes(range(256)) * 4)
        patch = {"compare_to": str(tmp_path / "junk")}
    msg = _stops(lambda: config.load([], {"device": "cpu", **patch}),
                 f"config error at '{key}'")
    assert msg.startswith(f"config error at '{key}'"), msg


def test_compare_to_names_the_shipped_runs():
    msg = _stops(lambda: config.load([], {"device": "cpu", "compare_to": "no/such/dir"}),
                 "does not exist")
    assert "report/reference/cpu-2c" in msg and "report/reference/h200" in msg


def test_good_values_of_the_same_keys_resolve(tmp_path, run_dir):
    """The controls: what the cases above reject is rejected for the reason they name."""
    ok = config.load([], {"device": "cpu", "tag": "a..b", "seed": 2**63 - 1, "run": "ALL",
                          "compare_to": str(run_dir),
                          "experiments": {"E17": {"ks": [1, 2, 4, 8]}}})
    assert ok["resolved_tag"] == "a..b" and ok["resolved_experiments"] == config.by_default()
    shipped = config.load([], {"device": "cpu", "compare_to": str(SHIPPED)})
    assert shipped["compare_to"] == str(SHIPPED)
    path = tmp_path / "ok.yaml"
    path.write_text("seed: 1\nexperiments:\n  E01: {host_return_repeats: 5}\n")
    assert config.load([path], {"device": "cpu"})["seed"] == 1


# ---------------------------------------------------------------- command lines

COMMAND_LINES = _cases(BAD_INPUTS, [
    ("diagnose-bad-configfile", "perflab diagnose --configfile bad.yaml",
     ["diagnose", "mlp", "--device", "cpu", "--configfile"], "timing: {repeats: 3\n"),
    ("check-duplicate-key-configfile", "perflab check --configfile with a key twice",
     ["check", "mlp", "--device", "cpu", "--configfile"], "seed: 1\nseed: 2\n"),
    ("diagnose-missing-configfile", "perflab diagnose --configfile that does not exist",
     ["diagnose", "mlp", "--device", "cpu", "--configfile"], None),
    # passed on to Snakemake, which would name neither the file nor the line: read first
    ("diagnose-empty-configfile", "perflab diagnose --configfile empty.yaml (was passed on "
     "to Snakemake, which names no file)", ["diagnose", "mlp", "--device", "cpu",
                                              "--configfile"], ""),
    ("whatif-passed-on-bad-configfile", "perflab whatif -- --configfile bad.yaml",
     ["whatif", "mlp", "--device", "cpu", "--", "--configfile"], "timing:\n  a: 1\n   b: 2\n"),
    ("bench-run-bad-configfile", "perflab bench-pipeline --run -- --configfile=bad.yaml",
     ["bench-pipeline", "--run", "--directory", ".", "--", "--cores", "1", "--configfile="],
     "seed: [1\n"),
])


@pytest.mark.parametrize("argv, text", COMMAND_LINES)
def test_command_line_names_the_config_file(tmp_path, capfd, argv, text):
    path = _config_file(tmp_path, text)
    with pytest.raises(SystemExit) as stop:
        last = [argv[-1] + str(path)] if argv[-1].endswith("=") else [argv[-1], str(path)]
        cli.main([*argv[:-1], *last, *(["--directory", str(tmp_path)]
                                      if argv[0] == "diagnose" else [])])
    msg = str(stop.value.code)
    assert msg.startswith("perflab: config file") and str(path) in msg, msg
    assert "Traceback" not in msg + capfd.readouterr().err


# ---------------------------------------------------------------- through Snakemake, dry runs


def snakemake(work: Path, *args: str, config=(), configfiles=(), timeout=300):
    """``snakemake *args`` on the tiny contract (and ``configfiles``), ``--config *config``."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"),
           "--directory", str(work), "--cores", "1", *args,
           "--configfile", str(TEST_CONFIG), *map(str, configfiles),
           "--config", "device=cpu", *config]
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(work), str(ROOT), environment.get("PYTHONPATH")) if p)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=environment, cwd=work)
    return proc.returncode, proc.stdout + proc.stderr


# the strict reread of the config files and the checks at parse time, under plain
# snakemake (the other keys go through the same resolve(): tested in-process above)
DRY_RUNS = _cases(BAD_INPUTS, [
    ("snakemake-duplicate-key", "a --configfile with a key twice, under plain snakemake",
     "experiments:\n  E01: {loops: [5]}\n  E01: {loops: [6]}\n", (),
     ["FILE", "line 3", "duplicate key 'E01'"]),
    ("snakemake-compare-to-missing", "compare_to=/no/such/dir, under plain snakemake", None,
     ("compare_to=/no/such/dir",), ["config error at 'compare_to'", "does not exist"]),
    ("snakemake-json-duplicate-key", "a JSON --configfile with a key twice, under plain "
     "snakemake (Snakemake keeps the last)", '{"seed": 1,\n "seed": 2}\n', (),
     ["FILE", "duplicate key 'seed'"]),
])


@pytest.mark.parametrize("text, config_args, needles", DRY_RUNS)
def test_snakemake_stops_before_planning(tmp_path, text, config_args, needles):
    files = [_config_file(tmp_path, text)] if text else []
    rc, out = snakemake(tmp_path, "-n", "e01_lying_benchmark", config=config_args,
                        configfiles=files)
    assert rc != 0, out
    for needle in needles:
        needle = str(files[0]) if needle == "FILE" else needle
        assert needle in out, (needle, out[-3000:])
    assert "rule e01" not in out and "Traceback" not in out, out[-3000:]


def test_a_json_config_file_snakemake_reads_is_read_alike(tmp_path):
    """Snakemake reads a config file as JSON first: JSON indented with tabs (which YAML
    refuses) runs, its values the same to perflab's strict reread as to Snakemake."""
    mine = tmp_path / "mine.json"
    mine.write_text('{\n\t"workloads": {\n\t\t"mlp": {"lr": 1e-2}\n\t}\n}\n')
    assert config.load_yaml(mine) == {"workloads": {"mlp": {"lr": 0.01}}}  # YAML: "1e-2"
    rc, out = snakemake(tmp_path, "-n", "e01_lying_benchmark", config=("results_dir=res",),
                        configfiles=[mine])
    assert rc == 0 and "rule e01_lying_benchmark" in out, out[-3000:]


def test_scale_keeps_the_users_value_and_says_so(tmp_path):
    """`workloads: {mlp: {batch: 128}}` on a CPU runs batch 128 (the cpu scale's is 64)."""
    mine = tmp_path / "mine.yaml"
    mine.write_text("workloads:\n  mlp: {batch: 128}\n  transformer: {dim: 12, heads: 3}\n")
    cfg = config.load([mine], {"device": "cpu"})
    assert cfg["resolved_scale"] == "cpu"
    assert cfg["workloads"]["mlp"]["batch"] == 128
    assert cfg["workloads"]["mlp"]["dim"] == 512  # not set by the user: the scale's
    assert cfg["workloads"]["transformer"]["dim"] == 12
    assert cfg["workloads"]["transformer"]["heads"] == 3
    c = config.contract(cfg, "E01")
    assert c["workloads"]["mlp"]["params"]["batch"] == 128
    assert c["scale_kept"] == {"workloads.mlp.batch": {"scale": 64, "yours": 128}}
    # a user's value equal to the scale's is nothing to say
    same = tmp_path / "same.yaml"
    same.write_text("workloads:\n  mlp: {batch: 64}\n")
    assert "scale_kept" not in config.contract(config.load([same], {"device": "cpu"}), "E01")
    # and through Snakemake: the log says it at parse time
    rc, out = snakemake(tmp_path, "-n", "e01_lying_benchmark",
                        config=("scale=cpu", "results_dir=res"), configfiles=[mine])
    assert rc == 0, out[-3000:]
    # the files the kept values came from are named (the helper adds config/test.yaml)
    assert "perflab: scale cpu sets defaults, not what the config files (test.yaml, " \
           f"{mine.name}) or --config set; kept: workloads.mlp.batch=128 (the scale's: 64)" \
           in out, out[-3000:]


# ---------------------------------------------------------------- the pre-flight



@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """tests/test_user_workload.py's user workloads (a good step, each way to fail), importable
    here and in the child processes (the pre-flight's, Snakemake's)."""
    pkg = write_user_package(tmp_path, monkeypatch, {"models": USER_MODULE})
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(ROOT)]))
    yield f"{pkg}.models"
    forget_package(pkg)

PREFLIGHT = _cases(BAD_INPUTS, [
    ("preflight-wrong-type", "a builder that returns no Workload", "wrong_shape",
     "returned tuple, expected perflab.instruments.workloads.Workload"),
    ("preflight-loss-not-scalar", "a loss that is not a scalar", "scalar_loss_missing",
     "loss_fn must return a scalar tensor, got [2, 1]"),
    ("preflight-forward-raises", "a model whose forward raises", "model_raises",
     "the model's forward raised (RuntimeError: boom in forward)"),
])


@pytest.mark.parametrize("attr, message", PREFLIGHT)
def test_preflight_child_names_the_target(user_module, attr, message):
    target = f"{user_module}:{attr}"
    answer = preflight.run_child({"target": target, "params": {}, "device": "cpu",
                                  "dtype": "float32", "tag": "t"})
    assert answer["ok"] is False
    assert target in answer["error"] and message in answer["error"], answer


def test_preflight_child_times_a_good_step(user_module):
    answer = preflight.run_child({"target": f"{user_module}:make_step", "params": {"batch": 8},
                                  "device": "cpu", "dtype": "float32", "tag": "t"})
    assert answer["ok"] is True and answer["batch"] == 8, answer
    assert 0 < answer["step_ms"] < 10_000


#: workloads that talk on stdout, exit or block: the pre-flight answers over its own file
CHANNEL_MODULE = """
import atexit, json, sys, time
from perflab.instruments.workloads import mlp


def prints_json(device, **kw):  # a good workload whose library prints a JSON line at exit
    atexit.register(lambda: print(json.dumps({"status": "bye"})))
    return mlp(device, dim=16, depth=1, num_classes=4, batch=8)


def fakes_a_pass(device, **kw):  # a failing builder that prints what an answer looked like
    print(json.dumps({"ok": True, "device": "cpu", "description": "fake", "batch": 1,
                      "step_ms": 1.0}), flush=True)
    raise ValueError("really broken")


def exits(device, **kw):
    sys.exit(3)


def blocks(device, **kw):
    time.sleep(120)
"""

CHANNEL = _cases(BAD_INPUTS, [
    ("preflight-json-on-stdout", "a good workload printing one JSON line at exit (was "
     "refused: KeyError 'ok')", "prints_json", None),
    ("preflight-fake-pass", "a failing builder printing a passing answer on stdout (was a "
     "pass)", "fakes_a_pass", "raised while building (ValueError: really broken)"),
    ("preflight-sys-exit", "a builder calling sys.exit(3) (was: 'exit status 3:')", "exits",
     "called sys.exit(3)"),
    ("preflight-blocks", "a builder that blocks (was: no time-out)", "blocks",
     "did not finish within 5 s"),
])


@pytest.mark.parametrize("attr, message", CHANNEL)
def test_preflight_answers_over_its_own_channel(tmp_path, monkeypatch, attr, message):
    pkg = write_user_package(tmp_path, monkeypatch, {"talk": CHANNEL_MODULE})
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), str(ROOT)]))
    target = f"{pkg}.talk:{attr}"
    try:
        answer = preflight.run_child({"target": target, "params": {}, "device": "cpu",
                                      "dtype": "float32", "tag": "t"},
                                     timeout_s=5 if attr == "blocks" else 300)
    finally:
        forget_package(pkg)
    if message is None:
        assert answer["ok"] is True and answer["batch"] == 8, answer
    else:
        assert answer["ok"] is False and target in answer["error"], answer
        assert message in answer["error"], answer


def test_a_child_killed_by_a_signal_says_so():
    assert preflight._ended(-9) == "killed (signal 9, SIGKILL)"
    assert preflight._ended(3) == "exit status 3"


REAL_STOPS = _cases(BAD_INPUTS, [
    ("snakemake-builder-raises", "a workload builder that raises, under plain snakemake",
     {"workload": "USER:builder_raises"}, ["pre-flight failed, no job has started",
                                           "raised while building (ValueError: no such checkpoint)"]),
    ("snakemake-runs-for-days", "timing.repeats: 1000000000 (runs for days)",
     {"timing": {"repeats": 1_000_000_000}}, ["estimated measurement time", "days",
                                              "--config allow_long=true", "No job has started"]),
])


@pytest.mark.parametrize("patch, needles", REAL_STOPS)
def test_real_run_stops_before_its_first_job(user_module, tmp_path, patch, needles):
    """Not a dry run: Snakemake plans the jobs, then the pre-flight stops it before any."""
    if "workload" in patch:
        patch = {"workload": patch["workload"].replace("USER", user_module)}
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump(patch))
    rc, out = snakemake(tmp_path, "e01_lying_benchmark", config=("run=E01",),
                        configfiles=[mine])
    assert rc != 0, out[-3000:]
    for needle in needles:
        assert needle in out, (needle, out[-3000:])
    assert "Traceback" not in out and "rule e01_lying_benchmark:" not in out, out[-3000:]
    assert not list(tmp_path.glob("logs/**/e01*.log"))  # no job started
    assert not list(tmp_path.glob("results/**/*.csv"))


def test_estimate_counts_the_contract_and_allow_long_passes(tiny_cfg):
    contracts = [config.contract(tiny_cfg, e) for e in tiny_cfg["resolved_experiments"]]
    line = preflight.check_estimate(tiny_cfg, contracts, step_ms=1.0)
    assert "estimated measurement time" in line
    long = [{**c, "timing": {"warmup": 0, "repeats": 10**9}} for c in contracts[:1]]
    with pytest.raises(SystemExit, match="allow_long=true"):
        preflight.check_estimate(tiny_cfg, long, step_ms=1.0)
    assert "estimated" in preflight.check_estimate({**tiny_cfg, "allow_long": "true"}, long,
                                                   step_ms=1.0)
    # more repeats, more calls; a sweep multiplies
    calls = preflight.step_calls
    e01 = config.contract(tiny_cfg, "E01")
    more = {**e01, "timing": {"warmup": 3, "repeats": 300}}
    assert calls(more)[0] > calls(e01)[0]
    # R01's ceiling sweep repeats its matmuls, not the step: more sizes, same step calls
    r01 = config.contract(tiny_cfg, "R01")
    wider = {**r01, "params": {**r01["params"], "matmul_sizes": [32, 64, 128, 256],
                               "dtypes": ["float32", "bfloat16"]}}
    assert calls(wider)[0] == calls(r01)[0] and calls(wider)[1] > calls(r01)[1]
    # C00's 1000 clock reads are no step calls; its fresh processes are seconds
    c00 = config.contract(tiny_cfg, "C00")
    floors = {**c00, "params": {**c00["params"], "floor_repeats": 10**6}}
    assert calls(floors)[0] == calls(c00)[0]


# ---------------------------------------------------------------- malformed result files

def _garbage(path: Path) -> None:
    path.write_bytes(bytes((i * 37 + 11) % 256 for i in range(4096)))


def _rewrite(path: Path, fn) -> None:
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(fn(lines)))


def _cell(path: Path, column: str, value: str, where=lambda r: True) -> None:
    frame = pd.read_csv(path, keep_default_na=False, dtype=str)
    i = next(i for i, r in enumerate(frame.to_dict("records")) if where(r))
    frame.loc[i, column] = value
    frame.to_csv(path, index=False)


def _ok_median(r):
    return r["status"] == "ok" and r["statistic"] == "median" and r["metric"].endswith(
        "_latency") and "_minus_" not in r["variant"]


MALFORMED = _cases(BAD_INPUTS, [
    ("csv-garbage-bytes", "a result CSV of garbage bytes", "csv", _garbage, "not UTF-8"),
    ("csv-empty", "an empty result CSV", "csv", lambda p: p.write_bytes(b""), "empty file"),
    ("csv-header-only", "a result CSV with a header and no rows", "csv",
     lambda p: _rewrite(p, lambda ls: ls[:1]), "a header and no rows"),
    ("csv-cut-at-a-row", "a result CSV cut at a row boundary", "csv",
     lambda p: _rewrite(p, lambda ls: ls[:-3]), "the job that wrote it recorded"),
    ("csv-cut-mid-line", "a result CSV cut inside its last line", "csv",
     lambda p: p.write_bytes(p.read_bytes()[:-40]), "no newline"),
    ("csv-short-row", "a result CSV row with fields missing", "csv",
     lambda p: _rewrite(p, lambda ls: [ls[0], ",".join(ls[1].split(",")[:3]) + "\n", *ls[2:]]),
     "a line cut short"),
    ("csv-extra-fields", "a result CSV's first row with more fields than the header", "csv",
     lambda p: _rewrite(p, lambda ls: [ls[0], ls[1].rstrip("\n") + ",x,y\n", *ls[2:]]),
     "more than the header"),
    ("csv-negative-duration", "a negative step latency", "csv",
     lambda p: _cell(p, "value", "-5.0", _ok_median), "negative duration"),
    ("csv-negative-spread", "a negative IQR", "csv",
     lambda p: _cell(p, "value", "-0.5", lambda r: r["statistic"] == "iqr"), "negative spread"),
    ("csv-negative-n", "a negative sample count", "csv",
     lambda p: _cell(p, "n", "-3", lambda r: r["status"] == "ok"), "negative sample count"),
    ("json-bad", "a provenance JSON that does not parse", "json",
     lambda p: p.write_text('{"experiment": "E01", "rows": '), "not valid JSON"),
    ("json-empty", "an empty provenance JSON", "json", lambda p: p.write_text(""),
     "empty file"),
    ("samples-cut-at-a-row", "a samples CSV cut at a row boundary", "samples",
     lambda p: _rewrite(p, lambda ls: ls[:-2]), "the job that wrote it recorded 6"),
    ("samples-cut-mid-line", "a samples CSV cut inside its last line", "samples",
     lambda p: p.write_bytes(p.read_bytes()[:-2]), "no newline"),
    ("samples-not-a-number", "a sample that is not a number", "samples",
     lambda p: _rewrite(p, lambda ls: [*ls[:2], ls[2].rsplit(",", 1)[0] + ",fast\n", *ls[3:]]),
     "is not a finite number"),
    ("samples-garbage", "a samples CSV of garbage bytes", "samples", _garbage, "not UTF-8"),
])


def _readers(d: Path, kind: str):
    """Every aggregation that reads the file: (name, call)."""
    csvs = [_csv(d, e) for e in FIXTURE_EXPERIMENTS]
    if kind == "samples":
        return [("compare", lambda: compare.load_samples(d)),
                ("figures", lambda: __import__("perflab.kit.figures").kit.figures.read_samples(
                    d / "e01_lying_benchmark_samples.csv"))]
    return [("ledger", lambda: ledger.build(csvs)), ("claims", lambda: io.read_results(csvs)),
            ("diagnosis", lambda: diagnose.build(csvs)),
            ("compare", lambda: compare.compare(d, SHIPPED, d.parent / "cmp")),
            ("compared-with", lambda: compare.compare(SHIPPED, d, d.parent / "cmp2"))]


@pytest.mark.parametrize("kind, damage, reason", MALFORMED)
def test_malformed_result_file_is_refused_by_every_reader(run_dir, kind, damage, reason):
    samples = _write_samples(run_dir)
    target = {"csv": _csv(run_dir), "json": run_dir / "e01_lying_benchmark.json",
              "samples": samples}[kind]
    damage(target)
    for name, read in _readers(run_dir, kind):
        msg = _stops(read, str(target), reason)
        if reason in ("a line cut short", "more than the header", "is not a finite number"):
            assert re.search(r"row \d+ \(line \d+\)", msg), (name, msg)


def test_readers_accept_the_intact_files(run_dir):
    """The control of the cases above: every reader takes the files as a job wrote them."""
    _write_samples(run_dir)
    for kind in ("csv", "samples"):
        for name, read in _readers(run_dir, kind):
            read()


REFERENCE_FILES = _cases(BAD_INPUTS, [
    ("reference-run-json-bad", "a shipped run's run.json that does not parse", "run.json",
     "not valid JSON"),
    ("reference-claims-garbage", "a shipped run's claims.csv of garbage", "claims.csv",
     "not UTF-8"),
    ("reference-diagnosis-garbage", "a compared run's diagnosis.csv of garbage",
     "diagnosis.csv", "not UTF-8"),
])


@pytest.mark.parametrize("name, reason", REFERENCE_FILES)
def test_malformed_reference_run_is_refused(tmp_path, run_dir, name, reason):
    ref = tmp_path / "ref"
    shutil.copytree(SHIPPED, ref, ignore=shutil.ignore_patterns("report.html"))
    if name == "run.json":
        (ref / name).write_text('{"tag": ')
    else:
        _garbage(ref / name)
    target = str(ref / name)
    if name != "diagnosis.csv":  # what a shipped run carries into the report
        _stops(lambda: reference.load_run(ref), target, reason)
    if name != "run.json":  # what a comparison reads
        _stops(lambda: compare.compare(run_dir, ref, tmp_path / "cmp"), target, reason)


# ---------------------------------------------------------------- the report trusts no input

MARK = "PWN"
PAYLOADS = [
    f"<script>alert('{MARK}1')</script>",
    f"<img src=x onerror=alert('{MARK}2')>",
    f"[click](javascript:alert('{MARK}3'))",
    f"<a href=\"javascript:alert('{MARK}4')\">x</a>",
    f"<svg onload=alert('{MARK}5')>",
    # loads from outside the report (a tracking pixel; the report is read offline)
    f"![i](https://example.invalid/{MARK}7.png)",
    f"[link](https://example.invalid/{MARK}8)",
    f"<https://example.invalid/{MARK}9>",
]
HOSTILE = " ".join(PAYLOADS)
#: a directory name may hold no slash: the event-handler payload alone
HOSTILE_DIR = f"<img src=x onerror=alert('{MARK}6')>"

INJECTION = _cases(BAD_INPUTS, [
    ("inject-reference-claims", "payloads in every cell of a shipped run's claims.csv"),
    ("inject-reference-diagnosis", "payloads in a compared run's diagnosis.csv and .md"),
    ("inject-reference-run-json", "payloads in every text field of a shipped run's run.json"),
    ("inject-reference-rows", "payloads in the text cells of a shipped run's result CSVs"),
    ("inject-reference-ledger", "payloads in a shipped run's ledger.md"),
    ("inject-reference-dir-name", "an event-handler payload as a shipped run's directory name"),
    ("inject-compare-to-dir-name", "an event-handler payload as compare_to's directory name"),
    ("inject-this-diagnosis", "payloads in this run's diagnosis.md (a workload's own text)"),
    ("external-image-in-markdown", "a Markdown image from the internet in another run's text "
     "(rendered live: 52 external images in one report)"),
    ("external-link-in-markdown", "Markdown links to the internet in another run's text "
     "(104 external links in one report)"),
])
#: what a report may contain: the tags a clean one has (the template and the renderer)
REPORT_TAGS = {"a", "body", "code", "details", "div", "em", "h1", "h2", "h3", "h4", "h5", "h6",
               "head", "html", "img", "li", "main", "meta", "p", "pre", "strong", "style",
               "summary", "table", "tbody", "td", "th", "thead", "title", "tr", "ul", "ol",
               "blockquote", "hr", "br", "del",
               "nav", "span",  # the first screen's sidebar and the time bar's key
               "svg", "polyline", "circle", "text"}  # and its roofline, drawn inline


class LiveParts(HTMLParser):
    """What in an HTML page could run: scripts, event handlers, script URLs, foreign tags."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.live: list[str] = []
        self.tags: set[str] = set()

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        if tag not in REPORT_TAGS:
            self.live.append(f"<{tag}>")
        for name, value in attrs:
            v = "".join((value or "").split()).lower()
            if name.startswith("on"):
                self.live.append(f"{name}= on <{tag}>")
            if name in ("href", "src", "action", "formaction", "xlink:href") and (
                    v.startswith(("javascript:", "vbscript:"))
                    or (v.startswith("data:") and not v.startswith("data:image/png;base64,"))):
                self.live.append(f"{name}={value[:40]!r} on <{tag}>")
            if MARK in (value or ""):
                self.live.append(f"payload in {name}= of <{tag}>")
            if name in ("href", "src") and not v.startswith("#") and (
                    ":" in v.split("/", 1)[0] or v.startswith("//")) \
                    and not v.startswith("data:image/png;base64,"):
                self.live.append(f"{name}={value[:40]!r} leaves the page, on <{tag}>")

    handle_startendtag = handle_starttag


def _hostile_reference(root: Path) -> Path:
    """A shipped run (four experiments) with payloads in every field it carries."""
    ref = root / HOSTILE_DIR
    (ref / "results").mkdir(parents=True)
    for eid in FIXTURE_EXPERIMENTS:
        slug = EXPERIMENTS[eid].slug
        shutil.copy(SHIPPED / "results" / f"{slug}.json", ref / "results" / f"{slug}.json")
        frame = pd.read_csv(SHIPPED / "results" / f"{slug}.csv", keep_default_na=False, dtype=str)
        for col in ("model", "input_shape", "device_name", "window", "sync_boundary", "mode",
                    "workload", "dtype", "execution"):
            frame[col] = HOSTILE
        frame.loc[frame.status != "ok", "reason"] = HOSTILE
        frame.to_csv(ref / "results" / f"{slug}.csv", index=False)
    claims = pd.read_csv(SHIPPED / "claims.csv", keep_default_na=False, dtype=str)
    for col in claims.columns:
        if col != "claim":
            claims[col] = HOSTILE
    claims.to_csv(ref / "claims.csv", index=False)
    diag = pd.read_csv(SHIPPED / "diagnosis.csv", keep_default_na=False, dtype=str)
    for col in ("label", "because", "source", "test", "intervention", "outcome"):
        diag[col] = HOSTILE
    diag.to_csv(ref / "diagnosis.csv", index=False)
    (ref / "diagnosis.md").write_text(f"# {HOSTILE}\n\n{HOSTILE}\n")
    (ref / "ledger.md").write_text(f"```\n{HOSTILE}\n```\n")
    meta = json.loads((SHIPPED / "run.json").read_text())
    meta.update(tag=HOSTILE, device=HOSTILE, scale=HOSTILE, commit=HOSTILE, finished=HOSTILE,
                experiments=[HOSTILE])
    meta["environment"] = {k: HOSTILE for k in meta["environment"]}
    (ref / "run.json").write_text(json.dumps(meta))
    return ref


def test_report_renders_no_payload_live(tmp_path, run_dir, monkeypatch):
    scripts = ROOT / "scripts"
    sys.path.insert(0, str(scripts))
    try:
        import render_report
    finally:
        sys.path.remove(str(scripts))
    refs = tmp_path / "refs"
    ref = _hostile_reference(refs)
    csvs = [_csv(run_dir, e) for e in FIXTURE_EXPERIMENTS]
    rows, md, _ = diagnose.build(csvs)
    io.atomic_write_csv(run_dir / "diagnosis.csv", rows)
    io.atomic_write_text(run_dir / "diagnosis.md", md + f"\n{HOSTILE}\n")
    compare.compare(run_dir, ref, run_dir / "compare")
    summary = (run_dir / "compare" / "summary.md").read_text()
    assert HOSTILE_DIR in summary and f"alert('{MARK}1')" in summary  # planted, and carried
    # one result measured with other code than this checkout: the report must say so
    prov = json.loads((run_dir / "e05_phases.json").read_text())
    code = env.instrument_code(ROOT / "scripts" / "e05_phases.py")
    code["files"]["perflab/instruments/timing.py"] = "0" * 12  # timing.py has changed since
    prov["instrument_code"] = code
    (run_dir / "e05_phases.json").write_text(json.dumps(prov))
    monkeypatch.setenv("PERFLAB_REFERENCE", str(refs))
    out = tmp_path / "report.html"
    render_report.main(ROOT / "report" / "perflab.py", run_dir, tmp_path / "figures", out, ROOT)
    page = out.read_text()
    parser = LiveParts()
    parser.feed(page)
    assert parser.live == [], parser.live
    assert "<script" not in page.lower()
    # the payloads are there, shown as text: escaped, not dropped
    assert "&lt;script&gt;alert(" in page and "onerror=alert(" in page
    assert "Measured with other instrument code than this checkout" in page
    assert "E05 (perflab/instruments/timing.py)" in page
    assert f"example.invalid/{MARK}7.png" in page  # the address shown, as text
    # and in a browser: nothing requested from outside the file, nothing run
    import browser

    if browser.find_browser() is not None:
        seen = browser.inspect(out)
        assert seen["external_requests"] == [] and seen["scripts_external"] == [], seen
        assert not any(MARK in e for e in seen["console_errors"]), seen["console_errors"]


# ---------------------------------------------------------------- faults: writes killed


def _killed_mid_write(path: Path) -> None:
    """A child process that dies (SIGKILL) halfway through an atomic write of ``path``."""
    code = textwrap.dedent(f"""
        import os, signal
        from perflab.core import io
        def write(fh):
            fh.write("experiment,variant\\n" * 100)
            fh.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        io.atomic_write({str(path)!r}, write)
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True)
    assert proc.returncode == -signal.SIGKILL


WRITES = _cases(FAULTS, [
    ("killed-mid-write-next-write", "a job killed mid-write: the next write of the file cleans "
     "its temp", "write"),
    ("killed-mid-write-next-run", "a job killed mid-write: the next run's pre-flight cleans "
     "its temp", "run"),
])


@pytest.mark.parametrize("how", WRITES)
def test_temp_of_a_killed_write_is_cleaned(tmp_path, how):
    path = tmp_path / "res" / "sub" / "e01_lying_benchmark.csv"
    _killed_mid_write(path)
    left = list(path.parent.glob(".*.tmp"))
    assert len(left) == 1 and not path.exists()  # the kill left a hidden temp, no result
    if how == "write":
        io.atomic_write_text(path, "x\n")
        assert path.read_text() == "x\n"
    else:
        said = []
        removed = preflight.clean_result_temps(tmp_path / "res", said.append)
        assert removed == left and "left by a job killed while writing" in said[0]
    assert not list(path.parent.glob(".*.tmp"))


def test_temp_of_a_live_writer_is_kept(tmp_path):
    """The control: a temp whose writer still runs (this process) is not touched."""
    tmp = tmp_path / f".e01.csv.{io._TEMP_OWNER}.abcd1234.tmp"
    tmp.write_text("half")
    assert io.clean_stale_temps(tmp_path) == []
    assert tmp.exists()


# ---------------------------------------------------------------- faults: two measurements


def _hold_lock_in_child(lock_dir: Path, key: str = "cpu") -> subprocess.Popen:
    code = textwrap.dedent(f"""
        import sys, time
        from perflab.core import devicelock
        devicelock.device_key = lambda d: {key!r}
        with devicelock.held("cpu", "E03 of another run", mode="wait"):
            print("held", flush=True)
            time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PERFLAB_LOCK_DIR": str(lock_dir)})
    assert proc.stdout.readline().strip() == "held"
    return proc


def _tiny_measure(ctx):
    ctx.row(variant="v", metric="step_latency", value=1.0, unit="ms", window="w",
            sync_boundary="s", statistic="median")


def _run_one(tmp_path, tiny_contract, name="res"):
    out = {k: str(tmp_path / name / f"e01{s}") for k, s in
           (("csv", ".csv"), ("samples", "_samples.csv"), ("provenance", ".json"))}
    log = tmp_path / f"{name}.log"
    runner.execute("E01", _tiny_measure, tiny_contract("E01"), out, str(log))
    return json.loads(Path(out["provenance"]).read_text()), log.read_text()


LOCKS = _cases(FAULTS, [
    ("second-measurement-refused", "a second measurement on a busy device, refuse mode",
     "refuse"),
    ("second-measurement-waits", "a second measurement on a busy device waits, logged and "
     "recorded", "wait"),
    ("lock-holder-killed", "the lock holder killed (SIGKILL): the OS releases the lock",
     "killed"),
    ("other-device-recorded", "another perflab job on another device: recorded in the "
     "provenance", "other"),
])


def test_a_child_forked_while_measuring_does_not_keep_the_device(tmp_path, monkeypatch):
    """A child forked during a measurement (a DataLoader worker) shares the lock's open file;
    the device is free when the measurement ends, not when that child exits (seen: a loader
    worker of an in-process E05 kept the CPU locked for the rest of a test session)."""
    monkeypatch.setenv("PERFLAB_LOCK_DIR", str(tmp_path / "locks"))
    with devicelock.held("cpu", "E05 here", mode="refuse"):
        child = os.fork()
        if child == 0:
            time.sleep(60)
            os._exit(0)
    try:
        with devicelock.held("cpu", "E06 next", mode="refuse") as record:
            assert record["held"]
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


@pytest.mark.parametrize("case", LOCKS)
def test_one_measurement_per_device(tmp_path, tiny_contract, monkeypatch, case):
    locks = tmp_path / "locks"
    monkeypatch.setenv("PERFLAB_LOCK_DIR", str(locks))
    holder = _hold_lock_in_child(locks, "cuda-other" if case == "other" else "cpu")
    try:
        if case == "refuse":
            monkeypatch.setenv("PERFLAB_DEVICE_LOCK", "refuse")
            with pytest.raises(devicelock.DeviceBusy, match=rf"pid {holder.pid} .*E03 of "
                                                            r"another run"):
                _run_one(tmp_path, tiny_contract)
            assert not (tmp_path / "res").exists() or not list((tmp_path / "res").iterdir())
        elif case == "wait":
            threading.Timer(1.5, holder.kill).start()
            t0 = time.monotonic()
            prov, log = _run_one(tmp_path, tiny_contract)
            assert time.monotonic() - t0 >= 1.0
            assert f"waiting for device cpu: pid {holder.pid}" in log, log
            # the run that holds it: its experiment, tag and directory
            assert f"(E03 of another run, a run in {ROOT}, since" in log, log
            lock = prov["device_lock"]
            assert lock["held"] and lock["waited_s"] >= 1.0
            assert lock["waited_for"]["pid"] == holder.pid
        elif case == "killed":
            holder.send_signal(signal.SIGKILL)
            holder.wait()
            monkeypatch.setenv("PERFLAB_DEVICE_LOCK", "refuse")
            prov, _ = _run_one(tmp_path, tiny_contract)
            assert prov["device_lock"]["held"] and prov["device_lock"]["waited_s"] == 0
        else:
            prov, _ = _run_one(tmp_path, tiny_contract)
            others = prov["device_lock"]["other_perflab_jobs"]
            assert [o["pid"] for o in others] == [holder.pid], others
            assert prov["device_lock"]["load_average_before"] is not None
    finally:
        holder.kill()
        holder.wait()


# ---------------------------------------------------------------- faults: stale reports

STALE = _cases(FAULTS, [
    ("keep-going-downstream-failure", "a run whose failure was downstream of the results "
     "(no partial report): the old report is removed", "downstream"),
    ("failed-run-report-not-asked", "a failed run that did not target the report, a result "
     "gone: the old report is removed", "missing"),
    ("samples-rewritten-after-report", "a samples file rewritten (or corrupted) after the "
     "report: the old report is removed", "samples"),
    ("provenance-gone", "a provenance JSON deleted after the report: the old report is "
     "removed", "provenance"),
    ("report-job-due-not-run", "the report's job was due in this run and did not run: the "
     "old report is removed", "due"),
])


@pytest.mark.parametrize("case", STALE)
def test_a_failed_run_leaves_no_stale_report(tmp_path, run_dir, case):
    cfg = {"results_dir": str(run_dir.parent), "resolved_tag": run_dir.name,
           "figures_dir": str(tmp_path / "figures")}
    report = run_dir / "report.html"
    report.write_text("<html>complete</html>")
    old = time.time() - 3600
    os.utime(report, (old, old))
    for f in run_dir.iterdir():  # every result file older than the report
        os.utime(f, (old - 10, old - 10))
    since = time.time()
    # the control: results unchanged since the report: it still describes them
    assert not partial.retire_stale_report(cfg, list(FIXTURE_EXPERIMENTS), since)
    assert report.exists()
    if case == "downstream":
        _csv(run_dir, "E13").touch()  # remeasured in this run, then a figure job failed
        assert partial.build(cfg, list(FIXTURE_EXPERIMENTS), tmp_path / "logs", since,
                             ROOT) is None
    elif case == "samples":
        (run_dir / f"{EXPERIMENTS['E05'].slug}_samples.csv").write_text("\x00garbage")
        assert partial.retire_stale_report(cfg, list(FIXTURE_EXPERIMENTS), since)
    elif case == "provenance":
        _csv(run_dir, "E05").with_suffix(".json").unlink()
        assert partial.retire_stale_report(cfg, list(FIXTURE_EXPERIMENTS), since)
    elif case == "due":
        assert partial.retire_stale_report(cfg, list(FIXTURE_EXPERIMENTS), since, outdated=True)
    else:
        _csv(run_dir, "E13").unlink()  # the failed job's outputs are removed
        assert partial.retire_stale_report(cfg, list(FIXTURE_EXPERIMENTS), since)
    assert not report.exists()


# ---------------------------------------------------------------- faults: params, code

_cases(FAULTS, [
    ("restated-value-no-remeasure", "a config restating an unchanged value: no new "
     "measurement (through Snakemake)", "snakemake"),
    ("instrument-code-changed", "a result measured with other instrument code: flagged",
     "code"),
])


def test_contract_compares_by_value(tiny_cfg):
    """Two configs equal in value, built in another key order, give the same params repr."""
    other = json.loads(json.dumps(tiny_cfg))
    other["experiments"]["E01"] = dict(reversed(list(other["experiments"]["E01"].items())))
    other["timing"] = dict(reversed(list(other["timing"].items())))
    assert list(other["experiments"]["E01"]) != list(tiny_cfg["experiments"]["E01"])
    assert repr(config.contract(other, "E01")) == repr(config.contract(tiny_cfg, "E01"))


@pytest.mark.background
def test_restating_a_value_does_not_measure_again(tmp_path):
    """Fault restated-value-no-remeasure, through a real run of one tiny experiment."""
    rc, out = snakemake(tmp_path, "e01_lying_benchmark", config=("run=E01",))
    assert rc == 0, out[-4000:]
    assert "perflab: pre-flight: mlp builds and steps on cpu" in out, out[-3000:]
    assert "perflab: estimated measurement time" in out
    prov = json.loads(next((tmp_path / "results").rglob("e01_lying_benchmark.json")).read_text())
    assert prov["instrument_code"] == env.instrument_code(ROOT / "scripts" /
                                                          "e01_lying_benchmark.py")
    assert prov["device_lock"]["held"] or prov["device_lock"]["mode"] == "off"
    restate = tmp_path / "restate.yaml"
    restate.write_text("experiments:\n  E01: {host_return_repeats: 5}\n")  # test.yaml's value
    rc, out = snakemake(tmp_path, "-n", "e01_lying_benchmark", config=("run=E01",),
                        configfiles=[restate])
    assert rc == 0, out[-3000:]
    assert "Nothing to be done" in out, out[-3000:]
    # the control: a changed value does measure again
    restate.write_text("experiments:\n  E01: {host_return_repeats: 6}\n")
    rc, out = snakemake(tmp_path, "-n", "e01_lying_benchmark", config=("run=E01",),
                        configfiles=[restate])
    assert rc == 0 and "rule e01_lying_benchmark" in out, out[-3000:]


def test_changed_instrument_code_is_flagged(run_dir):
    """Fault instrument-code-changed (the report's flag: test_report_renders_no_payload_live)."""
    script = ROOT / "scripts" / "e01_lying_benchmark.py"
    now = env.instrument_code(script)
    assert set(now["files"]) >= {"perflab/instruments/timing.py", "perflab/pipeline/runner.py",
                                 "scripts/e01_lying_benchmark.py"}
    assert "perflab/kit/claims.py" not in now["files"]  # the read side measures nothing
    same = {"E01": {"instrument_code": now}}
    assert env.code_changes(same) == {}
    edited = json.loads(json.dumps(now))
    edited["files"]["perflab/instruments/timing.py"] = "0" * 12
    assert env.code_changes({"E01": {"instrument_code": edited}}) == {
        "E01": ["perflab/instruments/timing.py"]}


# ------------------------------------------------- the counts in docs/failures.md


def _readme_counts() -> tuple[int, int]:
    import test_config
    import test_failures
    import test_nonfinite

    bad = len(BAD_INPUTS) + len(test_config.BAD) + len(test_failures.BAD_CLI) \
        + test_nonfinite.CASES
    faults = len(FAULTS) + len(FAILURE_FAULTS) + test_nonfinite.FAULT_CASES
    return bad, faults


#: the faults tests/test_failures.py drives through a real Snakemake run
FAILURE_FAULTS = ("job raises", "job out of memory", "job SIGKILLed", "whole run SIGKILLed "
                  "mid-job", "--keep-going with a failed experiment")


def _readme_line() -> str:
    bad, faults = _readme_counts()
    return (f"bad inputs tried / clear: {bad} / {bad}; faults tried / survived: "
            f"{faults} / {faults}")


#: the page that counts the cases (docs/failures.md): its numbers generated by
#: `python tests/test_reliability.py`, never typed
COUNTS_PAGE = ROOT / "docs" / "failures.md"
_README_COUNTS = re.compile(r"(bad inputs tried / clear:\s+)\d+ / \d+(;\s+faults tried / "
                            r"survived:\s+)\d+ / \d+")


def test_readme_counts_the_cases():
    text = COUNTS_PAGE.read_text()
    want = _readme_line()
    assert want in " ".join(text.split()), (f"docs/failures.md should say: {want} "
                                            "(python tests/test_reliability.py writes it)")


# ---------------------------------------------------------------- command-line values

CLI_VALUES = _cases(BAD_INPUTS, [
    ("cli-cores-0", "perflab diagnose --cores 0 (hung forever)", ["diagnose", "mlp", "--cores",
                                                                  "0"], "--cores"),
    ("cli-cores-negative", "perflab whatif --cores -2", ["whatif", "mlp", "--cores", "-2"],
     "--cores"),
    ("cli-cores-float", "perflab diagnose --cores 1.5", ["diagnose", "mlp", "--cores", "1.5"],
     "--cores"),
    ("cli-timeout-nan", "perflab check --timeout nan (a time-out that never fires)",
     ["check", "mlp", "--timeout", "nan"], "--timeout"),
    ("cli-timeout-0", "perflab check --timeout 0", ["check", "mlp", "--timeout", "0"],
     "--timeout"),
    ("cli-directory-file", "perflab diagnose --directory README.md (a file)",
     ["diagnose", "mlp", "--directory", str(ROOT / "README.md")], "--directory"),
])


@pytest.mark.parametrize("argv, option", CLI_VALUES)
def test_bad_command_line_values_are_refused(argv, option, capsys):
    from perflab import cli

    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 2  # argparse's usage error: before any pre-flight or job
    assert f"argument {option}" in capsys.readouterr().err


CHECK_STOPS = _cases(BAD_INPUTS, [
    ("check-blocks", "perflab check on a builder that blocks (printed nothing, forever)",
     "blocks", "did not finish within 2 s"),
    ("check-sys-exit", "perflab check on a builder calling sys.exit(3) (printed nothing)",
     "exits", "called sys.exit(3)"),
])


@pytest.mark.parametrize("attr, message", CHECK_STOPS)
def test_perflab_check_names_the_target_of_a_builder_that_blocks_or_exits(tmp_path, monkeypatch,
                                                                          attr, message):
    from perflab import cli

    pkg = write_user_package(tmp_path, monkeypatch, {"talk": CHANNEL_MODULE})
    target = f"{pkg}.talk:{attr}"
    try:
        with pytest.raises(SystemExit) as stop:
            cli.main(["check", target, "--device", "cpu", "--timeout", "2"])
    finally:
        forget_package(pkg)
    assert target in str(stop.value.code) and message in str(stop.value.code)


TAGS = _cases(BAD_INPUTS, [
    ("workload-names-a-umlaut", "workloads named ä and ö (shared one result directory)",
     "ä", "ö"),
    ("workload-names-space-dash", "workloads named 'my model' and 'my-model' (the second "
     "overwrote the first's results)", "my model", "my-model"),
    ("workload-name-climbs", "a workload named ../../evil", "../../evil", "evil"),
    ("workload-name-300-chars", "a 300-character workload name (an OSError)", "w" * 300,
     "w" * 299),
])


@pytest.mark.parametrize("a, b", TAGS)
def test_two_workloads_never_share_a_result_tag(a, b):
    sa, sb = config.workload_slug(a), config.workload_slug(b)
    assert sa != sb
    for slug in (sa, sb):  # one directory name, short enough for any file system
        assert "/" not in slug and ".." not in slug and len(slug) <= config.SLUG_MAX + 9
    assert config.workload_slug("pkg.mod:fn") == "pkg.mod-fn"  # plain names keep theirs


if __name__ == "__main__":  # rewrite docs/failures.md's counts from the cases above
    bad, faults = _readme_counts()
    text, n = _README_COUNTS.subn(  # the numbers only: the line keeps its wrapping
        lambda m: f"{m[1]}{bad} / {bad}{m[2]}{faults} / {faults}", COUNTS_PAGE.read_text())
    assert n == 1, "docs/failures.md's counts line was not found"
    COUNTS_PAGE.write_text(text)
    print(_readme_line())
