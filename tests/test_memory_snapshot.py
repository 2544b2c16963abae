"""The memory snapshot escalation job: an honest page on the CPU, a timeline on CUDA."""

from __future__ import annotations

from experiments import load_script
from memory_checks import cuda_cfg

from perflab.pipeline import config


def test_cpu_page_says_why_there_is_no_snapshot(tiny_cfg, tmp_path):
    mod = load_script("memory_snapshot")
    out = tmp_path / "snap.html"
    assert mod.write(config.contract(tiny_cfg, "E09"), str(out), log=lambda m: None) == \
        "unsupported"
    page = out.read_text()
    assert "unsupported" in page and "_record_memory_history" in page


def test_cuda_snapshot_renders_a_timeline(tmp_path):
    cfg = cuda_cfg()
    mod = load_script("memory_snapshot")
    out = tmp_path / "snap.html"
    assert mod.write(config.contract(cfg, "E09"), str(out), log=lambda m: None) == "ok"
    page = out.read_text()
    assert "snapshot.pickle" in page and len(page) > 10_000  # the embedded snapshot
