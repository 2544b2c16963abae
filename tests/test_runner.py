"""perflab.pipeline.runner.execute: three outputs on success, none on failure."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from perflab.core import env, io
from perflab.pipeline import runner

CACHE_VARS = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def _outputs(d: Path) -> dict[str, str]:
    return {"csv": str(d / "e01.csv"), "samples": str(d / "e01_samples.csv"),
            "provenance": str(d / "e01.json")}


def _files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def _tiny_measure(ctx: runner.Context) -> None:
    ctx.summary([1.0, 2.0, 3.0, 4.0], variant="synchronized", metric="step_latency",
                window="one step", sync_boundary=ctx.sync_name)
    ctx.unsupported(variant="cuda_events", metric="step_latency", unit="ms",
                    reason="CUDA events need a CUDA device")


def test_execute_writes_three_valid_outputs(tmp_path, tiny_contract):
    contract = tiny_contract("E01")
    out = _outputs(tmp_path / "res")
    log = tmp_path / "logs" / "e01.log"

    def measure(ctx):
        ctx.workload()  # the controlled (tiny) workload: fills provenance and row defaults
        _tiny_measure(ctx)

    ctx = runner.execute("E01", measure, contract, out, str(log))

    # rows: valid per the contract, read back through the reader
    frame = io.read_results([out["csv"]])
    assert len(frame) == 8 + 1 == len(ctx.rows)
    ok = frame[frame["status"] == "ok"]
    assert list(ok["statistic"]) == ["median", "iqr", "p25", "p75", "mean", "std", "min", "max"]
    assert ok.set_index("statistic").loc["median", "value"] == 2.5
    assert set(frame["experiment"]) == {"E01"}
    assert set(frame["device"]) == {"cpu"}
    assert set(frame["workload"]) == {"mlp"}
    assert set(frame["input_shape"]) == {"[16, 64]"}
    unsupported = frame[frame["status"] == "unsupported"].iloc[0]
    assert unsupported["window"] == "n/a" and unsupported["reason"]

    # samples
    samples = pd.read_csv(out["samples"])
    assert list(samples.columns) == io.SAMPLE_COLUMNS
    assert list(samples["value"]) == [1.0, 2.0, 3.0, 4.0]
    assert list(samples["index"]) == [0, 1, 2, 3]

    # provenance
    prov = json.loads(Path(out["provenance"]).read_text())
    assert {"environment", "contract", "workloads"} <= set(prov)
    assert prov["experiment"] == "E01"
    assert prov["contract"] == json.loads(json.dumps(contract))
    assert prov["environment"]["device"] == "cpu"
    assert prov["environment"]["torch"]
    assert prov["workloads"]["mlp"]["parameters"] > 0
    assert prov["workloads"]["mlp"]["input_shape"] == "[16, 64]"
    assert prov["rows"] == 9 and prov["samples"] == 4

    assert _files(tmp_path / "res") == ["e01.csv", "e01.json", "e01_samples.csv"]
    assert "wrote 9 rows" in log.read_text()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="one core (or an OS that cannot pin): nothing to choose between")
def test_the_job_measures_on_the_cores_it_kept(tmp_path, tiny_contract, monkeypatch):
    """host_cores fast: the measure runs on the cores within 10% of the fastest (a planted
    slow core is left out), the provenance records each core's time and the kept ones, and
    the process's cores are the job's own business (restored here for the other tests)."""
    from perflab.core import affinity

    before = sorted(os.sched_getaffinity(0))
    slow = before[-1]
    monkeypatch.setattr(affinity, "core_speeds",
                        lambda cores, **kw: {c: (5.0 if c == slow else 2.0) for c in cores})
    contract = {**tiny_contract("E01"), "host_cores": "fast"}
    out = _outputs(tmp_path / "res")
    seen = []

    def measure(ctx):
        seen.append(sorted(os.sched_getaffinity(0)))
        _tiny_measure(ctx)

    try:
        runner.execute("E01", measure, contract, out)
    finally:
        os.sched_setaffinity(0, set(before))
    assert seen == [before[:-1]]
    cores = json.loads(Path(out["provenance"]).read_text())["host_cores"]
    assert cores["pinned"] and cores["kept"] == before[:-1] and cores["allowed"] == before
    assert cores["work_ms"][str(slow)] == 5.0


def test_measure_that_raises_leaves_no_files(tmp_path, tiny_contract):
    out_dir = tmp_path / "res"

    def measure(ctx):
        _tiny_measure(ctx)  # rows were recorded before the failure
        raise RuntimeError("kernel exploded")

    with pytest.raises(RuntimeError, match="kernel exploded"):
        runner.execute("E01", measure, tiny_contract("E01"), _outputs(out_dir))
    assert _files(out_dir) == []


def test_invalid_row_raises_contract_error_and_leaves_no_files(tmp_path, tiny_contract):
    out_dir = tmp_path / "res"

    def measure(ctx):
        _tiny_measure(ctx)
        ctx.row(variant="bad", metric="step_latency", value=None, unit="ms",
                window="one step", sync_boundary="none")  # status ok, no value

    with pytest.raises(io.ContractError, match="status ok but no value"):
        runner.execute("E01", measure, tiny_contract("E01"), _outputs(out_dir))
    assert _files(out_dir) == []


def test_measure_that_records_nothing_leaves_no_files(tmp_path, tiny_contract):
    out_dir = tmp_path / "res"
    with pytest.raises(io.ContractError, match="measured nothing"):
        runner.execute("E01", lambda ctx: None, tiny_contract("E01"), _outputs(out_dir))
    assert _files(out_dir) == []


@pytest.mark.parametrize("preset", [False, True], ids=["unset-before", "set-before"])
def testprivate_compile_cache_set_during_measure_and_restored(tmp_path, tiny_contract,
                                                               monkeypatch, preset):
    for k in CACHE_VARS:
        if preset:
            monkeypatch.setenv(k, f"/user/{k}")
        else:
            monkeypatch.delenv(k, raising=False)
    before = {k: os.environ.get(k) for k in CACHE_VARS}
    seen = {}

    def measure(ctx):
        seen.update({k: os.environ.get(k) for k in CACHE_VARS})
        seen["exists"] = Path(seen["TORCHINDUCTOR_CACHE_DIR"]).is_dir()
        _tiny_measure(ctx)

    out = _outputs(tmp_path / "res")
    runner.execute("E01", measure, tiny_contract("E01"), out)

    cache = seen["TORCHINDUCTOR_CACHE_DIR"]
    assert cache and cache != before["TORCHINDUCTOR_CACHE_DIR"]
    assert seen["exists"]
    assert seen["TRITON_CACHE_DIR"] == str(Path(cache) / "triton")
    assert {k: os.environ.get(k) for k in CACHE_VARS} == before
    assert not Path(cache).exists()  # the private cache is removed after the job
    # provenance is shipped with reference runs: it names the cache without this machine's paths
    assert json.loads(Path(out["provenance"]).read_text())["inductor_cache_dir"] == (
        env.portable_path(cache))


def testprivate_compile_cache_restored_when_measure_raises(tmp_path, tiny_contract, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/user/inductor")
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    seen = []

    def measure(ctx):
        seen.append(os.environ["TORCHINDUCTOR_CACHE_DIR"])
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        runner.execute("E01", measure, tiny_contract("E01"), _outputs(tmp_path / "res"))
    assert seen[0] != "/user/inductor"
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/user/inductor"
    assert "TRITON_CACHE_DIR" not in os.environ
    assert not Path(seen[0]).exists()


def test_named_compile_cache_is_used_and_kept(tmp_path, tiny_contract):
    contract = tiny_contract("E01")
    given = tmp_path / "shared-cache"
    contract["params"]["inductor_cache_dir"] = str(given)
    seen = []

    def measure(ctx):
        seen.append(os.environ["TORCHINDUCTOR_CACHE_DIR"])
        Path(seen[0]).mkdir(parents=True, exist_ok=True)
        (Path(seen[0]) / "entry").write_text("x")
        _tiny_measure(ctx)

    runner.execute("E01", measure, contract, _outputs(tmp_path / "res"))
    assert seen == [str(given.resolve())]
    assert (given / "entry").is_file()  # a cache the contract names is not deleted


def test_context_rejects_unknown_default_columns(tiny_contract):
    ctx = runner.Context("E01", tiny_contract("E01"), log=lambda m: None)
    with pytest.raises(KeyError, match="not contract columns"):
        ctx.set_defaults(modle="x")


def test_run_from_command_line(tmp_path, monkeypatch):
    """`python scripts/eXX.py --configfile config/test.yaml --outdir ...` path of run()."""
    from perflab.pipeline import config

    test_yaml = str(config.ROOT / "config" / "test.yaml")
    ctx = runner.run("E01", _tiny_measure, None,
                     argv=["--configfile", test_yaml, "--device", "cpu",
                           "--outdir", str(tmp_path / "out")])
    tag = ctx.contract["tag"]
    assert tag.endswith("-tiny")
    assert _files(tmp_path / "out" / tag) == [
        "e01_lying_benchmark.csv", "e01_lying_benchmark.json", "e01_lying_benchmark_samples.csv"
    ]


def test_run_from_command_line_bad_config_exits_with_key(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("timing:\n  repeats: 0\n")
    with pytest.raises(SystemExit) as exc:
        runner.run("E01", _tiny_measure, None,
                   argv=["--configfile", str(bad), "--outdir", str(tmp_path / "out")])
    assert "timing.repeats" in str(exc.value.code)
    assert not (tmp_path / "out").exists()


def test_portable_paths_name_no_machine_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert env.portable_path(str(tmp_path / "scripts" / "e01.py")) == "scripts/e01.py"
    assert env.portable_path("relative/x.py") == "relative/x.py"
    assert env.portable_path("/opt/site/perflab/x.py") == "<abs>/x.py"
    scrubbed = env.scrub_paths({"argv": ["/elsewhere/.snakemake/scripts/tmp1.e01.py", "--x"],
                                "n": 3, "note": "a / b"})
    assert scrubbed == {"argv": [".snakemake/scripts/tmp1.e01.py", "--x"], "n": 3,
                        "note": "a / b"}
