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


# ------------------------------------------------------------------ the precision that runs


def test_flops_are_counted_by_the_precision_their_operands_have():

    m, x = torch.nn.Linear(32, 32), torch.randn(4, 32)

    def step(autocast):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            out = m(x)
        out.float().sum().backward()

    for autocast, prec in ((True, "bfloat16"), (False, "float32")):
        work, _ = roofline.count(lambda: step(autocast))
        assert work.by_precision == {prec: work.flops} and work.flops > 0


def test_the_blend_is_the_time_at_each_ceiling_summed():
    from perflab.instruments import precision

    # 3 parts bf16 at 4 units/s and 1 part fp32 at 1: 4 FLOP in 0.75 + 1 s
    assert precision.blend({"bfloat16": 3, "float32": 1}, {"bfloat16": 4.0, "float32": 1.0}
                           )[0] == pytest.approx(4 / 1.75)
    # a precision that ran with no ceiling measured: no blend, saying which
    peak, why = precision.blend({"bfloat16": 3}, {"float32": 1.0})
    assert peak is None and "bfloat16" in why
    assert precision.tf32_applies("matmul", "cpu") is False


def test_a_bf16_autocast_step_is_judged_against_the_bf16_ceiling(tiny_cfg, tmp_path,
                                                                   monkeypatch):
    """examples/known/bf16_autocast: its FLOPs counted as bfloat16, the bf16 ceiling measured
    although the config names float32 only, each phase against the blend of what it ran."""
    import copy

    from conftest import REPO_ROOT
    from experiments import run_tiny

    from perflab.core import io
    from perflab.experiments import r01_roofline as r01

    monkeypatch.syspath_prepend(str(REPO_ROOT / "examples"))
    cfg = copy.deepcopy(tiny_cfg)
    cfg["workload"] = "bf16"
    cfg["workloads"] = {"bf16": {"target": "known.bf16_autocast:make_step",
                                 "params": {"dim": 64, "depth": 2, "batch": 16}}}

    def patch(c):
        c["workload"], c["workloads"] = "bf16", cfg["workloads"]

    _, out = run_tiny(tiny_cfg, "R01", tmp_path, patch=patch)
    rows = io.read_results([out["csv"]])
    fb = rows[rows.variant == r01.phase_variant(r01.FORWARD_BACKWARD)].set_index("metric")
    assert fb.value[r01.precision_flops("bfloat16")] == fb.value[r01.FLOPS] > 0
    bf16_peak = one_value(rows, r01.matmul_ceiling("bfloat16"), r01.PEAK_FLOPS)
    assert fb.value[r01.BLENDED_PEAK] == pytest.approx(bf16_peak)
    assert "bfloat16 100%" in fb.window[r01.BLENDED_PEAK]
    bw = one_value(rows, r01.MEMORY_BANDWIDTH, r01.BANDWIDTH)
    assert fb.value[r01.RIDGE] == pytest.approx(bf16_peak / bw)
    assert (rows.variant == r01.CACHE_BANDWIDTH).any() and fb.value[r01.CACHE_FRACTION] > 0


# ------------------------------------------------------------------ where the step convolves


def test_convolution_flops_are_counted_apart_with_their_sizes():
    """A conv's FLOPs go under conv_<precision> (its own ceiling), a Linear's under the
    precision; the forward convolution's arguments are recorded for the ceiling's size."""
    from perflab.instruments import convolution, precision

    conv, lin = torch.nn.Conv2d(3, 4, 3, padding=1, bias=False), torch.nn.Linear(4, 2)
    x = torch.randn(2, 3, 8, 8)
    flops = precision.PrecisionFlops()
    with flops:
        lin(conv(x).mean((2, 3))).sum().backward()
    fwd = 2 * 2 * 4 * 8 * 8 * 3 * 9
    assert flops.by_precision["conv_float32"] == fwd * 2  # forward + the weight's gradient
    assert flops.by_precision["float32"] == 3 * 2 * 2 * 4 * 2  # the Linear, fwd + 2 grads
    call = convolution.heaviest(flops.convs)
    assert call.input == (2, 3, 8, 8) and call.weight == (4, 3, 3, 3) and call.padding == (1, 1)
    assert flops.convs[call] == fwd
    # the timed convolution does what the step's did, counted by the same counter
    work, out = roofline.count(convolution.conv_op(call, "forward", torch.float32,
                                                   torch.device("cpu")))
    assert work.flops == fwd and out.shape == (2, 4, 8, 8)
    back, _ = roofline.count(convolution.conv_op(call.batched(4), "backward", torch.float32,
                                                 torch.device("cpu")))
    assert back.flops == 4 * 2 * fwd  # the input's and the weight's gradients
    # under autocast the convolution runs (and is counted, and timed) in bfloat16
    with precision.PrecisionFlops() as amp, torch.autocast("cpu", dtype=torch.bfloat16):
        conv(x)
    assert dict(amp.by_precision) == {"conv_bfloat16": fwd}
    bf16 = convolution.conv_op(call, "forward", torch.bfloat16, torch.device("cpu"))()
    assert bf16.dtype == torch.bfloat16


def test_a_conv_phase_is_judged_against_the_conv_ceiling():
    """The blend sends conv FLOPs to the conv ceiling: a phase of 90% conv FLOPs whose conv
    ceiling is a quarter of the matmul one reads 3.1x higher against the matmul alone."""
    from perflab.instruments import precision

    mix = {"conv_float32": 90, "float32": 10}
    with_conv, _ = precision.blend(mix, {"float32": 4.0, "conv_float32": 1.0})
    assert with_conv == pytest.approx(100 / (90 / 1.0 + 10 / 4.0))
    peak, why = precision.blend(mix, {"float32": 4.0})  # no conv ceiling: no blend at all
    assert peak is None and "conv_float32" in why


@pytest.fixture(scope="module")
def convnet_r01(tiny_cfg, tmp_path_factory):
    from experiments import run_tiny

    from perflab.core import io
    from perflab.pipeline import config

    spec = config.contract({**tiny_cfg, "workload": "convnet"}, "R01")["workloads"]

    def patch(c):
        c["workload"], c["workloads"] = "convnet", spec

    _, out = run_tiny(tiny_cfg, "R01", tmp_path_factory.mktemp("r01_conv"), patch=patch)
    return io.read_results([out["csv"]])


def test_the_convnet_has_a_conv_ceiling_and_its_phases_use_it(convnet_r01):
    """The built-in convnet (tiny): a conv ceiling timed at the step's heaviest conv, the
    forward + backward judged against the blend of conv and matmul ceilings, <= 100%."""
    from perflab.experiments import r01_roofline as r01
    from perflab.instruments import precision

    rows = convnet_r01
    conv_peak = one_value(rows, r01.conv_ceiling("float32"), r01.PEAK_FLOPS)
    timed = rows[rows.variant.str.startswith("conv/float32/") & (rows.metric == r01.ACHIEVED_FLOPS)]
    assert set(timed.variant) == {f"conv/float32/{d}_x{k}" for d in ("forward", "backward")
                                  for k in (1, 4)}
    assert conv_peak == timed.value.max() > 0
    # the step's heaviest conv (channels 4, image 8, batch 4): the first, 3 -> 4 at 8 x 8
    shapes = set(rows[rows.variant.str.startswith("conv/float32/")].input_shape)
    assert shapes == {"[4, 3, 8, 8] * [4, 3, 3, 3] pad [1, 1]",
                      "[16, 3, 8, 8] * [4, 3, 3, 3] pad [1, 1]"}
    mm_peak = one_value(rows, r01.matmul_ceiling("float32"), r01.PEAK_FLOPS)
    fb = rows[rows.variant == r01.phase_variant(r01.FORWARD_BACKWARD)].set_index("metric")
    conv, mm = (fb.value.get(r01.precision_flops(k), 0.0) for k in ("conv_float32", "float32"))
    assert conv > 0.5 * fb.value[r01.FLOPS] and conv + mm == pytest.approx(fb.value[r01.FLOPS])
    blended = precision.blend({"conv_float32": conv, "float32": mm},
                              {"conv_float32": conv_peak, "float32": mm_peak})[0]
    assert fb.value[r01.BLENDED_PEAK] == pytest.approx(blended)
    # against the matmul ceiling alone the same phase would read another fraction
    assert abs(conv_peak / mm_peak - 1) > 0.05
    assert fb.value[r01.FLOPS_FRACTION] == pytest.approx(
        100 * fb.value[r01.ACHIEVED_FLOPS] / blended)
    fractions = rows[rows.metric.isin([r01.FLOPS_FRACTION, r01.BANDWIDTH_FRACTION])
                     & (rows.status == "ok")]
    assert len(fractions) and (fractions.value <= r01.CEILING_MAX_PCT).all(), fractions.value
    assert one_value(rows, r01.TF32_MODE, "tf32_convolution") == 0  # a CPU: never
