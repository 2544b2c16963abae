"""R01 roofline at the tiny contract on CPU, and the counters it rests on."""

from __future__ import annotations

import pytest
import torch
from experiments import assert_outputs_obey_the_contract, one_value, pipeline_results

from perflab.instruments import roofline


def test_counters_count_a_matmul_exactly():
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    work, out = roofline.count(lambda: a @ b)
    assert work.flops == 2 * 8 * 16 * 4
    # reads a and b, writes the output (float32: 4 bytes per element)
    assert work.bytes == 4 * (8 * 16 + 16 * 4 + 8 * 4)
    assert out.shape == (8, 4)


def test_cpu_attention_counts_its_flops():
    q = torch.randn(1, 2, 16, 8, requires_grad=True)  # B, H, T, Dh
    work, out = roofline.count(lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q))
    # Q K^T and P V: 2 matmuls of 2*T*T*Dh FLOPs per head
    assert work.flops == 2 * (2 * 16 * 16 * 8) * 2
    back, _ = roofline.count(lambda: out.sum().backward())
    assert back.flops >= 2 * work.flops


def test_views_move_no_bytes():
    x = torch.randn(64)
    work, _ = roofline.count(lambda: x.view(8, 8).t())
    assert work.bytes == 0 and work.flops == 0


def test_fractions_follow_the_roofline():
    # 1e9 FLOP and 1e8 B in 10 ms against 1e12 FLOP/s and 1e11 B/s
    fr = roofline.fractions(roofline.Work(10**9, 10**8, 1), 10.0, 1e12, 1e11)
    assert fr["achieved_flops"] == pytest.approx(1e11)
    assert fr["flops_fraction"] == pytest.approx(10.0)
    assert fr["bandwidth_fraction"] == pytest.approx(10.0)
    assert fr["arithmetic_intensity"] == pytest.approx(10.0)
    # ridge = 10 FLOP/B: at intensity 10 the attainable rate is the peak
    assert fr["roofline_fraction"] == pytest.approx(10.0)
    low = roofline.fractions(roofline.Work(10**8, 10**8, 1), 10.0, 1e12, 1e11)
    # intensity 1: attainable 1e11 FLOP/s, achieved 1e10 -> 10% of the roofline
    assert low["roofline_fraction"] == pytest.approx(10.0)
    assert low["flops_fraction"] == pytest.approx(1.0)


@pytest.fixture(scope="module")
def r01(pipeline_run, tiny_cfg):
    # the shared pipeline run's outputs (tests/shared_run.py): the experiment is not run again
    rows, samples, _, out = pipeline_results(pipeline_run, tiny_cfg, "R01")
    return rows, samples, out


def test_r01_outputs_obey_the_contract(r01):
    rows, samples, out = r01
    ok = rows[rows.status == "ok"]
    assert_outputs_obey_the_contract("R01", ok, samples, out)
    # CPU: the host-device copies say why they are absent
    bad = rows[rows.status != "ok"]
    assert set(bad.variant) == {"copy/device_to_device", "copy/host_to_device",
                                "copy/device_to_host", "phase/host_to_device"}
    assert bad.reason.str.len().gt(0).all()


def test_r01_ceilings_and_fractions_are_consistent(r01):
    rows, _, _ = r01
    peak = one_value(rows, "ceiling/matmul/float32", "peak_flops")
    sizes = [one_value(rows, f"matmul/float32/n{n}", "achieved_flops", "median")
             for n in (32, 64)]
    assert peak == max(sizes) > 0
    bw = one_value(rows, "ceiling/memory_bandwidth", "bandwidth")
    assert bw == one_value(rows, "copy/host_memcpy", "bandwidth", "median") > 0
    assert one_value(rows, "ceiling/ridge_point", "arithmetic_intensity") == pytest.approx(peak / bw)
    # the step's work is the sum of its phases' work
    for metric in ("flops", "bytes"):
        parts = sum(one_value(rows, f"phase/{ph}", metric) for ph in
                    ("forward", "loss", "backward", "optimizer"))
        assert one_value(rows, "phase/step", metric) == pytest.approx(parts)
    # an MLP's forward does 2*B*in*out FLOPs per Linear; backward about twice the forward
    fwd = one_value(rows, "phase/forward", "flops")
    bwd = one_value(rows, "phase/backward", "flops")
    assert fwd > 0 and 1.5 * fwd <= bwd <= 2.0 * fwd
    # AdamW's step is elementwise: no counted FLOPs, but it moves bytes
    assert one_value(rows, "phase/optimizer", "flops") == 0
    assert one_value(rows, "phase/optimizer", "bytes") > 0
    # the fractions are the achieved rates over the ceilings
    for ph in ("forward", "backward", "forward_backward", "step"):
        flops = one_value(rows, f"phase/{ph}", "achieved_flops", "median")
        assert one_value(rows, f"phase/{ph}", "flops_fraction", "median") == pytest.approx(
            100 * flops / peak)
        achieved_bw = one_value(rows, f"phase/{ph}", "achieved_bandwidth", "median")
        assert one_value(rows, f"phase/{ph}", "bandwidth_fraction", "median") == pytest.approx(
            100 * achieved_bw / bw)
