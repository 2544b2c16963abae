"""E18 (attention vs sequence length): agreement, backend, OOM rows and the capped budget."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from claims_rows import case, rows
from experiments import assert_only_cuda_rows_unsupported, one_value, pipeline_results, run_tiny

from perflab import experiments
from perflab.core import io
from perflab.experiments import e18_attention_seq
from perflab.experiments import e18_attention_seq as e18_slice
from perflab.instruments import interventions, memory, workloads
from perflab.kit import tables


@pytest.fixture(scope="module")
def e18(pipeline_run, tiny_cfg):
    # the shared pipeline run's outputs (tests/shared_run.py): the experiment is not run again
    return pipeline_results(pipeline_run, tiny_cfg, "E18")


def test_rows_obey_the_contract(e18):
    rows, samples, _, _ = e18
    assert_only_cuda_rows_unsupported("E18", rows, samples, ("peak_allocated", "peak_reserved", "memory_budget"))


def test_sdpa_agrees_with_manual(e18):
    rows, _, contract, _ = e18
    for T in contract["params"]["seqs"]:
        d = f"T{T}/sdpa_vs_manual"
        scale = one_value(rows, d, "output_scale")
        assert one_value(rows, d, "out_max_abs_diff") <= 1e-4 * max(scale, 1.0)
        assert one_value(rows, d, "grad_max_abs_diff") <= 1e-4


def test_the_backend_that_ran_is_named_and_was_eligible(e18):
    rows, _, contract, _ = e18
    for T in contract["params"]["seqs"]:
        ran = [b for b in interventions.SDPA_BACKENDS
               if one_value(rows, f"T{T}/sdpa_backend/{b}", "backend_ran") == 1]
        assert len(ran) == 1, ran  # one backend dispatched, and the profiler saw which
        assert one_value(rows, f"T{T}/sdpa_backend/{ran[0]}", "backend_eligible") == 1
        # a backend that cannot run says why in the row
        no = rows[(rows.metric == "backend_eligible") & (rows.value == 0)
                  & rows.variant.str.startswith(f"T{T}/")]
        assert (no.reason.str.len() > 0).all()
        assert e18_attention_seq.backends(rows, T) == ran[0]


def test_manual_memory_grows_with_t_in_a_fresh_process(e18):
    rows, _, contract, _ = e18
    seqs = contract["params"]["seqs"]
    for impl in ("manual", "sdpa"):
        for T in seqs:
            assert (one_value(rows, f"T{T}/{impl}", "peak_rss", "max")
                    >= one_value(rows, f"T{T}/{impl}", "rss_at_start"))
    assert "fresh process" in rows[rows.metric == "peak_rss"].sync_boundary.iloc[0]


def test_table_and_figure(e18, tmp_path):
    rows, _, contract, out = e18
    t = experiments.table("E18", rows)
    assert list(t["T"]) == contract["params"]["seqs"]
    assert not tables.format_table(t).empty
    png = experiments.make_figure("E18", out["csv"], out["samples"], tmp_path / "e18.png")
    assert png.stat().st_size > 0


def test_an_oom_becomes_rows_not_a_crash(tiny_cfg, tmp_path, monkeypatch):
    """The manual path running out of memory at the longer T is recorded, and SDPA still runs."""
    longest = max(tiny_cfg["experiments"]["E18"]["seqs"])
    real = workloads.Attention.forward

    def forward(self, qkv):
        if self.impl == "manual" and qkv.shape[3] >= longest:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(self, qkv)

    monkeypatch.setattr(workloads.Attention, "forward", forward)
    _, out = run_tiny(tiny_cfg, "E18", tmp_path)  # its own run: an injected OOM
    rows = io.read_results([out["csv"]])
    oom = rows[rows.status == "oom"]
    assert set(oom.variant) == {f"T{longest}/manual", f"T{longest}/sdpa_vs_manual"}
    assert oom.reason.str.contains("out of memory").all()
    assert one_value(rows, f"T{longest}/sdpa", "fwd_bwd_latency", "median") > 0
    t = experiments.table("E18", rows)
    last = t[t["T"] == longest].iloc[0]
    assert last.manual_ms == "oom" and last.out_max_abs_diff == "oom"
    png = experiments.make_figure("E18", out["csv"], out["samples"], tmp_path / "e18.png")
    assert png.stat().st_size > 0


def test_each_cpu_variant_peak_comes_from_a_process_of_its_own(tiny_cfg):
    """A small variant measured after a large one reads its own peak (no other variant ran
    in its process); a variant whose process dies is an error reading, and the next runs."""
    from perflab.pipeline import config

    contract = config.contract(tiny_cfg, "E18")
    big = interventions.variant_peak(contract, "attention", {"impl": "manual", "seq": 512}, 1)
    small = interventions.variant_peak(contract, "attention", {"impl": "manual", "seq": 16}, 1)
    assert small["peak_rss"] < big["peak_rss"] - 50  # MiB: T=512's scores alone are 32 MiB
    assert small["rss_at_start"] <= small["peak_rss"] and big["vmhwm_reset"]
    died = interventions.variant_peak(contract, "checkpoint", {}, 1)  # no batch: it raises
    assert "exited 1" in died["error"]
    again = interventions.variant_peak(contract, "attention", {"impl": "manual", "seq": 16}, 1)
    assert again["peak_rss"] == pytest.approx(small["peak_rss"], abs=5)


def test_capped_budget_sets_the_fraction_and_restores_it(monkeypatch):
    calls = []
    fake = SimpleNamespace(
        get_device_properties=lambda i: SimpleNamespace(total_memory=120 * 1024**3),
        set_per_process_memory_fraction=lambda f, i: calls.append((round(f, 6), i)),
        empty_cache=lambda: None,
        current_device=lambda: 0,
    )
    monkeypatch.setattr(memory.torch, "cuda", fake)
    with pytest.raises(RuntimeError):
        with memory.capped_cuda_budget(12, "cuda:1") as fraction:
            assert fraction == pytest.approx(0.1)
            raise RuntimeError("boom")
    assert calls == [(0.1, 1), (1.0, 1)]  # capped, then the whole device again even on error


# ------------------------------------------------------------------ the claims' cases
# C39: rows where each finding holds, fails, and sits inside the noise
# (claims_rows.case); tests/test_claim_cases.py runs every claim's cases


def e18_rows(manual=(576.3, 2160.3), sdpa=(108.6, 201.0), manual_ooms=True, sdpa_ooms=False):
    specs = [("E18", e18_slice.BUDGET_VARIANT, e18_slice.MEMORY_BUDGET, "value", 9625.6)]
    for t, m, s in zip((1024, 2048), manual, sdpa):
        specs += [("E18", e18_slice.seq_variant(t, e18_slice.MANUAL), "peak_allocated", "max", m),
                  ("E18", e18_slice.seq_variant(t, e18_slice.SDPA), "peak_allocated", "max", s)]
    for impl, ooms in ((e18_slice.MANUAL, manual_ooms), (e18_slice.SDPA, sdpa_ooms)):
        specs.append(("E18", e18_slice.seq_variant(4096, impl), "peak_allocated", "value", None,
                      "oom", "CUDA out of memory") if ooms else
                     ("E18", e18_slice.seq_variant(4096, impl), "peak_allocated", "max", 354.0))
    return rows(*specs)


case("C39", e18_rows, lambda: e18_rows(manual_ooms=False))  # manual fit the cap
