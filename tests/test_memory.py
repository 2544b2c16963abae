"""Memory instruments on this (CPU, Linux) machine: properties, not absolute sizes."""

from __future__ import annotations

import torch

from perflab.instruments import memory


def test_rss_and_high_water_mark_move_with_a_touched_allocation():
    base_hwm = memory.vmhwm_mib()
    assert memory.rss_mib() > 0
    assert base_hwm >= memory.rss_mib() * 0.99  # a high-water mark is never below the current
    block = torch.ones(256, 1024, 1024, dtype=torch.uint8)  # 256 MiB, every page touched
    grown = memory.vmhwm_mib()
    assert grown - base_hwm > 200
    del block
    if memory.reset_vmhwm():  # the kernel allows clear_refs: the mark falls back to RSS
        assert memory.vmhwm_mib() < grown - 200


def test_parameter_bytes():
    model = torch.nn.Linear(10, 4)  # 40 weights + 4 biases, fp32
    assert memory.bytes_of_parameters(model) == 44 * 4
    assert memory.bytes_of_parameters(model.to(torch.bfloat16)) == 44 * 2


def test_nvml_says_why_when_it_cannot_attribute():
    used, reason = memory.nvml_process_used_mib()
    if used is None:
        assert reason  # never a silent None
    else:
        assert used >= 0
