"""Cross-run comparison of two synthetic result directories with known ratios."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perflab.core import io
from perflab.views import compare

ROOT = Path(__file__).resolve().parents[1]


def _row(variant, metric, value, statistic="median", unit="ms", experiment="E03"):
    return {"experiment": experiment, "variant": variant, "workload": "mlp", "model": "m",
            "input_shape": "[4, 8]", "dtype": "float32", "device": "cpu", "device_name": "x",
            "mode": "train", "execution": "eager", "metric": metric, "window": "w",
            "sync_boundary": "s", "statistic": statistic, "value": value, "unit": unit, "n": 30,
            "status": "ok", "reason": ""}


def _samples(variant, values, experiment="E03"):
    return [{"experiment": experiment, "variant": variant, "execution": "eager",
             "metric": "step_latency", "unit": "ms", "block": 0, "index": i, "value": v}
            for i, v in enumerate(values)]


def _write_run(d: Path, *, spread_median, fast_median, resolved, spread_samples, fast_samples,
               claims):
    d.mkdir(parents=True)
    io.write_results(d / "e03_warmup_spread.csv", [
        _row("spread", "step_latency", spread_median),
        _row("spread", "step_latency", spread_median / 10, statistic="iqr"),
        _row("fast", "step_latency", fast_median),
    ])
    io.write_samples(d / "e03_warmup_spread_samples.csv",
                     _samples("spread", spread_samples) + _samples("fast", fast_samples))
    io.write_results(d / "e25_worked_pass.csv", [
        _row("adamw_fused_minus_adamw_foreach", "difference_resolved", float(resolved),
             statistic="value", unit="bool", experiment="E25"),
    ])
    # files that are not result CSVs are ignored
    pd.DataFrame({"section": ["x"], "field": ["y"]}).to_csv(d / "ledger.csv", index=False)
    if claims is not None:
        pd.DataFrame(claims).to_csv(d / "claims.csv", index=False)


@pytest.fixture
def two_runs(tmp_path):
    rng = np.random.default_rng(3)
    base = 10 + rng.normal(0, 0.2, 40)
    ref, this = tmp_path / "ref", tmp_path / "this"
    _write_run(ref, spread_median=10.0, fast_median=4.0, resolved=True,
               spread_samples=base, fast_samples=4 + rng.normal(0, 0.1, 40),
               claims={"claim_id": ["C1", "C2", "C3"],
                       "verdict": ["REPRODUCED", "DIFFERS", "REPRODUCED"]})
    _write_run(this, spread_median=15.0, fast_median=4.0, resolved=False,
               spread_samples=1.5 * base, fast_samples=4 + rng.normal(0, 0.1, 40),
               claims={"claim_id": ["C1", "C2", "C3"],
                       "verdict": ["INCONCLUSIVE", "DIFFERS", "DIFFERS"]})
    return this, ref


def test_row_and_table_ratios(two_runs, tmp_path):
    this, ref = two_runs
    res = compare.compare(this, ref, tmp_path / "out")
    rows = res["rows"].set_index(["variant", "statistic"])
    assert rows.loc[("spread", "median"), "ratio"] == pytest.approx(1.5)
    assert rows.loc[("spread", "iqr"), "ratio"] == pytest.approx(1.5)
    assert rows.loc[("fast", "median"), "ratio"] == pytest.approx(1.0)
    assert len(res["rows"]) == 4  # 3 timing rows + 1 verdict row, ledger.csv ignored
    tabs = res["tables"]
    e03 = tabs[tabs.experiment == "E03"]
    assert not e03.empty
    hit = e03[e03.this == 15.0]
    assert len(hit) >= 1 and hit.ratio.tolist() == pytest.approx([1.5] * len(hit))


def test_changed_verdicts_and_claims(two_runs, tmp_path):
    this, ref = two_runs
    v = compare.compare(this, ref, tmp_path / "out")["verdicts"]
    changed = v[v.changed]
    assert set(changed.source) == {"ab", "claim"}
    claim = changed[changed.source == "claim"].iloc[0]
    assert (claim["item"], claim["this"], claim["ref"]) == ("C1", "INCONCLUSIVE", "REPRODUCED")
    ab = changed[changed.source == "ab"].iloc[0]
    assert (ab["this"], ab["ref"]) == ("inconclusive", "resolved")
    assert not v[(v.source == "claim") & (v.item == "C2")].changed.iloc[0]
    # a change to INCONCLUSIVE is one run's noise hiding the effect; only C3 is a flip
    claims = v[v.source == "claim"].set_index("item")
    assert claims.decided.to_dict() == {"C1": False, "C2": True, "C3": True}
    assert claims.flipped.to_dict() == {"C1": False, "C2": False, "C3": True}
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "claims decided in both runs (REPRODUCED or DIFFERS in each): 2, the same in both: 1, " \
           "flipped: 1" in summary


def test_diagnosis_verdict_and_candidates_are_compared(two_runs, tmp_path):
    """The H200 MLP twice: a sync tax of 9.9% then 14.5% moved the verdict from host overhead
    (still fitting in both) to synchronization; a candidate measured in one run only is not a flip."""
    this, ref = two_runs

    def diag(d, sync_outcome, verdict, optimizer):
        pd.DataFrame([
            {"candidate": "synchronization", "label": "synchronization", "outcome": sync_outcome,
             "verdict": verdict == "synchronization"},
            {"candidate": "host_overhead", "label": "host launch & Python overhead",
             "outcome": "fits", "verdict": verdict == "host_overhead"},
            {"candidate": "optimizer", "label": "optimizer", "outcome": optimizer,
             "verdict": False},
        ]).to_csv(d / "diagnosis.csv", index=False)

    diag(ref, "ruled out", "host_overhead", "not measured")
    diag(this, "fits", "synchronization", "ruled out")
    v = compare.compare(this, ref, tmp_path / "out")["verdicts"]
    d = v[v.source == "diagnosis"].set_index("item")
    assert (d.loc["verdict", "this"], d.loc["verdict", "ref"]) == (
        "synchronization", "host launch & Python overhead")
    assert d.flipped.to_dict() == {"verdict": True, "synchronization": True,
                                   "host launch & Python overhead": False, "optimizer": False}
    assert not d.loc["optimizer", "decided"]
    summary = (tmp_path / "out" / "summary.md").read_text()
    assert "diagnosis (what the machine waits for): synchronization here, host launch & Python " \
           "overhead in the reference" in summary
    # the claims line counts claims only
    assert "decided in both runs (REPRODUCED or DIFFERS in each): 2," in summary


def test_sample_significance(two_runs, tmp_path):
    this, ref = two_runs
    s = compare.compare(this, ref, tmp_path / "out")["samples"].set_index("variant")
    assert s.loc["spread", "ratio"] == pytest.approx(1.5, rel=0.02)
    # 40 samples recorded as one block: tested as 8 runs of 5 consecutive samples a side
    assert (s.blocks_this == compare.SAMPLE_CHUNKS).all()
    assert (s.block == "runs of consecutive samples").all()
    assert bool(s.loc["spread", "significant"]) and s.loc["spread", "p"] < 1e-3
    assert s.loc["spread", "p_adjusted"] >= s.loc["spread", "p"]
    assert not bool(s.loc["fast", "significant"])


def _series(values, blocks, variant="x"):
    return pd.DataFrame({"experiment": "E03", "variant": variant, "execution": "eager",
                         "metric": "step_latency", "unit": "ms", "block": blocks,
                         "index": range(len(values)), "value": values})


def test_autocorrelated_samples_are_not_many_independent_tests():
    """Two runs of one slowly drifting machine: 400 samples each would call it a change;
    the 8 blocks of each run, the unit the drift moves, do not."""
    rng = np.random.default_rng(11)

    def drift():  # one offset per block of 50 calls
        return np.repeat(rng.normal(0, 0.02, 8), 50)

    blocks = np.repeat(np.arange(8), 50)
    this = _series(10 * (1 + drift()) * rng.lognormal(0, 0.01, 400), blocks)
    ref = _series(10 * (1 + drift()) * rng.lognormal(0, 0.01, 400), blocks)
    from scipy.stats import mannwhitneyu

    assert mannwhitneyu(this.value, ref.value).pvalue < 0.05  # the samples' verdict: "changed"
    t = compare.sample_tests(this, ref)
    assert t.block.iloc[0] == "blocks" and t.blocks_this.iloc[0] == 8
    assert not t.significant.iloc[0]


def test_many_series_are_corrected_for_multiplicity():
    """Forty unchanged series and one changed: uncorrected, a few of the forty would differ
    at p < 0.05 by chance; corrected, only the changed one does."""
    rng = np.random.default_rng(5)
    blocks = np.repeat(np.arange(8), 5)
    this, ref = [], []
    for i in range(40):
        this.append(_series(rng.normal(10, 0.3, 40), blocks, f"same_{i}"))
        ref.append(_series(rng.normal(10, 0.3, 40), blocks, f"same_{i}"))
    this.append(_series(rng.normal(13, 0.3, 40), blocks, "changed"))
    ref.append(_series(rng.normal(10, 0.3, 40), blocks, "changed"))
    t = compare.sample_tests(pd.concat(this), pd.concat(ref)).set_index("variant")
    assert (t.p < 0.05).sum() > 1  # chance alone makes some unchanged series "differ"
    assert t.significant[t.significant].index.tolist() == ["changed"]


def test_outputs_and_command_line(two_runs, tmp_path):
    this, ref = two_runs
    out = tmp_path / "cli"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "compare_runs.py"), str(this),
                           str(ref), "--out", str(out)], capture_output=True, text=True,
                          cwd=ROOT, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("rows.csv", "tables.csv", "verdicts.csv", "samples.csv", "summary.md"):
        assert (out / name).is_file()
    assert (out / "compare.png").stat().st_size > 1000
    md = (out / "summary.md").read_text()
    assert "verdicts compared: 4, changed: 3" in md and "| claim | " in md


def test_without_claims_and_missing_dir(two_runs, tmp_path):
    this, ref = two_runs
    (this / "claims.csv").unlink()
    v = compare.compare(this, ref, tmp_path / "out")["verdicts"]
    assert set(v.source) == {"ab"}
    with pytest.raises(FileNotFoundError):
        compare.compare(this, tmp_path / "nowhere", tmp_path / "out2")
