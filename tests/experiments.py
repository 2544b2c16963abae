"""Test helpers: load an experiment script and run it on the tiny contract in a temp dir."""

from __future__ import annotations

import copy
import importlib.util
import sys
import textwrap
import uuid
from pathlib import Path
from types import ModuleType

import torch

from perflab.experiments.catalogue import EXPERIMENTS
from perflab.pipeline import config, runner

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def load_script(name: str) -> ModuleType:
    """``scripts/<name>.py`` as a module, without running its ``__main__`` block."""
    path = SCRIPTS / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{name}_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run_tiny(tiny_cfg: dict, eid: str, out_dir: Path, *, extra: dict[str, str] | None = None,
             measure=None, patch=None) -> tuple[dict, dict[str, str]]:
    """Run ``eid`` through the harness on the tiny contract; returns (contract, outputs).

    One intra-op thread: fast and steady on a shared 2-core machine (restored after).
    ``patch(contract)``, when given, edits the contract in place before the run.
    """
    contract = copy.deepcopy(config.contract(tiny_cfg, eid))
    contract["threads"] = 1
    if patch is not None:
        patch(contract)
    out = {k: str(Path(out_dir) / f"{eid.lower()}.{k}") for k in ("csv", "samples", "provenance")}
    out.update(extra or {})
    saved = torch.get_num_threads()
    try:
        runner.execute(eid, measure or load_script(EXPERIMENTS[eid].slug).measure, contract, out)
    finally:
        torch.set_num_threads(saved)
    return contract, out


def one_value(rows, variant: str, metric: str, statistic: str = "value") -> float:
    """The single value of (variant, metric, statistic); fails if it is absent or repeated."""
    sel = rows[(rows.variant == variant) & (rows.metric == metric)
               & (rows.statistic == statistic)]
    assert len(sel) == 1, (variant, metric, statistic, len(sel))
    return float(sel.value.iloc[0])


def ab_sizes(rows, variant: str, blocks: int, inner: int) -> tuple[int, int]:
    """(block pairs, calls per block) an interleaved A/B of ``blocks`` x ``inner`` ran, its
    difference ``variant``: as configured under the fixed rule; under the adaptive one the
    pairs its ``sampling_decision`` row says, of timing.adaptive_sizes's shorter blocks."""
    from perflab.core.names import SAMPLING_DECISION
    from perflab.instruments import timing

    hit = rows[(rows.variant == variant) & (rows.metric == SAMPLING_DECISION)]
    if hit.empty:
        return blocks, inner
    most, small = timing.adaptive_sizes(blocks, inner)
    n = int(hit.value.iloc[0])
    assert 0 < n <= most, (variant, n, most)
    return n, small


def assert_outputs_obey_the_contract(eid: str, rows, samples, out: dict[str, str]) -> None:
    """Every row measured, of this experiment; samples in their columns; provenance written."""
    from perflab.core import io

    assert (rows.status == "ok").all()
    assert (rows.experiment == eid).all()
    assert list(samples.columns) == io.SAMPLE_COLUMNS
    assert Path(out["provenance"]).is_file()


def write_user_package(tmp_path: Path, monkeypatch, modules: dict[str, str]) -> str:
    """A package of ``modules`` (name -> source) in ``tmp_path``, importable; returns its name.

    The name is unique per call, so no test imports another test's module.
    Pair with :func:`forget_package` when done.
    """
    pkg = f"perflab_user_{uuid.uuid4().hex[:8]}"
    (tmp_path / pkg).mkdir()
    (tmp_path / pkg / "__init__.py").write_text("")
    for name, source in modules.items():
        (tmp_path / pkg / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return pkg


def forget_package(pkg: str) -> None:
    for mod in [m for m in sys.modules if m == pkg or m.startswith(pkg + ".")]:
        del sys.modules[mod]


def tiny_results(tiny_cfg: dict, eid: str, out_dir: Path):
    """Run ``eid`` on the tiny contract: (rows, samples, contract, outputs), rows validated."""
    import pandas as pd

    from perflab.core import io

    contract, out = run_tiny(tiny_cfg, eid, out_dir)
    return io.read_results([out["csv"]]), pd.read_csv(out["samples"]), contract, out


def pipeline_results(run_dir: Path, tiny_cfg: dict, eid: str):
    """``eid``'s outputs in the shared pipeline run (the ``pipeline_run`` fixture), in the
    shape :func:`tiny_results` returns: (rows, samples, contract, outputs), rows validated;
    the contract is the one the job ran under (its provenance)."""
    import json

    import pandas as pd

    from perflab.core import io

    out = {k: str(Path(run_dir) / v) for k, v in config.experiment_outputs(tiny_cfg, eid).items()}
    contract = json.loads(Path(out["provenance"]).read_text())["contract"]
    return io.read_results([out["csv"]]), pd.read_csv(out["samples"]), contract, out


def assert_only_cuda_rows_unsupported(eid: str, rows, samples,
                                      allowed=("peak_allocated", "peak_reserved")) -> None:
    """Rows of ``eid`` only; on a CPU the only rows not measured are CUDA-only, saying so."""
    from perflab.core import io

    assert (rows.experiment == eid).all()
    assert list(samples.columns) == io.SAMPLE_COLUMNS
    bad = rows[rows.status != "ok"]
    assert set(bad.metric) <= set(allowed), set(bad.metric)
    assert bad.reason.str.contains("CUDA").all()


def assert_round_robin_takes_the_warmup(tiny_cfg: dict, eid: str, out_dir: Path, monkeypatch,
                                        **params) -> None:
    """`experiments.<eid>.warmup` (2 here) replaces timing.warmup in the round robin of
    :func:`perflab.instruments.interventions.timed_variants`, and every timed row's window says so."""
    from perflab.core import io
    from perflab.instruments import timing

    seen, real = [], timing.interleaved_round_robin

    def spy(steps, **kw):
        seen.append(kw["warmup"])
        return real(steps, **kw)

    monkeypatch.setattr(timing, "interleaved_round_robin", spy)
    cfg = copy.deepcopy(tiny_cfg)
    cfg["experiments"][eid].update(params, warmup=2)
    assert cfg["timing"]["warmup"] != 2
    _, out = run_tiny(cfg, eid, out_dir)
    rows = io.read_results([out["csv"]])
    assert seen and set(seen) == {2}
    timed = rows[rows.metric == "step_latency"]
    assert len(timed) and timed.window.str.contains("after warmup 2,").all()


def assert_cpu_scale_sets(eid: str, key: str, cpu_value, yours) -> None:
    """`experiments.<eid>.<key>`: the CPU scale sets ``cpu_value`` as a default beneath the
    user's value (``yours`` is kept, and ``scale_kept`` records both); the chapter's scale
    leaves the key null (the timing default), so the chapter's contract is unchanged."""
    assert config.load([], {"device": "cpu"})["experiments"][eid][key] == cpu_value
    chapter = config.load([], {"device": "cpu", "scale": "chapter"})
    assert chapter["experiments"][eid][key] is None
    mine = config.load([], {"device": "cpu", "experiments": {eid: {key: yours}}})
    assert mine["experiments"][eid][key] == yours
    assert mine["scale_kept"][f"experiments.{eid}.{key}"] == {"yours": yours, "scale": cpu_value}
