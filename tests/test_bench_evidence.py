"""scripts/bench_evidence.py, the H200 command of issue 38, runs its parts here too."""

from __future__ import annotations

import json

from conftest import TEST_CONFIG
from experiments import load_script


def test_the_dropout_part_decides_both_known_answers(tmp_path):
    bench = load_script("bench_evidence")
    rc = bench.main(["--device", "cpu", "--out", str(tmp_path), "--configfile",
                     str(TEST_CONFIG), "--parts", "dropout"])
    got = json.loads((tmp_path / "summary.json").read_text())["dropout"]
    assert rc == 0 and got["ok"], got
    assert got["noop"]["check"] == "ok" and got["wrong_lr"]["check"] == "MISMATCH"
