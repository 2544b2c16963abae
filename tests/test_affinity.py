"""The host cores a job measures on (perflab/core/affinity.py): which are kept, and that the
process really runs on them afterwards."""

import os

import pytest

from perflab.core import affinity

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"),
                                reason="the OS cannot pin a process to cores")


@pytest.fixture
def restore_cores():
    before = os.sched_getaffinity(0)
    yield sorted(before)
    os.sched_setaffinity(0, before)


def test_fast_cores_keeps_those_near_the_fastest():
    speeds = {0: 3.6, 1: 2.35, 2: 2.40, 3: 4.7, 4: 2.60, 5: 2.58}
    # 10% over 2.35 is 2.585: 2.60 is out, 2.58 in
    assert affinity.fast_cores(speeds) == [1, 2, 5]
    assert affinity.fast_cores({0: 1.0, 1: 1.05}) == [0, 1]
    assert affinity.fast_cores({}) == []


def test_auto_is_fast_on_cuda_and_all_on_the_cpu():
    assert affinity.policy_for("auto", "cuda") == affinity.policy_for("auto", "cuda:1") == "fast"
    assert affinity.policy_for("auto", "cpu") == "all"
    assert affinity.policy_for("fast", "cpu") == "fast"
    with pytest.raises(ValueError, match="host_cores must be one of"):
        affinity.policy_for("fastest", "cuda")


def test_a_slow_core_is_left_out_and_the_process_runs_on_the_rest(restore_cores):
    allowed = restore_cores
    if len(allowed) < 2:
        pytest.skip("one core: nothing to choose between")
    slow = allowed[0]
    planted = lambda cores: {c: (4.0 if c == slow else 2.4) for c in cores}  # noqa: E731
    rec = affinity.choose("fast", "cuda", speeds_of=planted)
    assert rec["pinned"] and rec["kept"] == allowed[1:]
    assert sorted(os.sched_getaffinity(0)) == allowed[1:]
    assert "kept" in affinity.describe(rec) and "4.000 ms" in affinity.describe(rec)


def test_equal_cores_or_policy_all_leave_the_process_alone(restore_cores):
    allowed = restore_cores
    equal = lambda cores: {c: 2.4 for c in cores}  # noqa: E731
    rec = affinity.choose("fast", "cuda", speeds_of=equal)
    assert not rec["pinned"] and sorted(os.sched_getaffinity(0)) == allowed

    def never(cores):
        raise AssertionError("policy all measures nothing")

    rec = affinity.choose("auto", "cpu", speeds_of=never)
    assert rec["resolved"] == "all" and not rec["pinned"]
    assert "every core kept" in affinity.describe(rec)


def test_core_speeds_measures_each_core_and_restores_the_mask(restore_cores):
    allowed = restore_cores
    seen = []

    def work():
        seen.append(os.sched_getaffinity(0))
        return 1.0 + len(seen)

    speeds = affinity.core_speeds(allowed, tries=2, work=work)
    # round robin: each core alone, in turn, once per try; its time the fastest try
    assert seen == [{c} for c in allowed] * 2
    assert speeds == {c: 2.0 + i for i, c in enumerate(allowed)}
    assert sorted(os.sched_getaffinity(0)) == allowed
    real = affinity.core_speeds(allowed, tries=1)
    assert set(real) == set(allowed) and all(0 < ms < 1e3 for ms in real.values())


def test_a_core_the_os_refuses_keeps_every_core_and_says_so(restore_cores, monkeypatch):
    allowed = restore_cores
    if len(allowed) < 2:
        pytest.skip("one core: nothing to choose between")
    real = os.sched_setaffinity

    def refuse(pid, cores):
        if len(cores) == 1:
            raise OSError(22, "Invalid argument")
        real(pid, cores)

    monkeypatch.setattr(os, "sched_setaffinity", refuse)
    rec = affinity.choose("fast", "cuda")
    assert not rec["pinned"] and rec["kept"] == allowed and "could not pin" in rec["error"]
    assert sorted(os.sched_getaffinity(0)) == allowed
    assert "could not pin" in affinity.describe(rec)


class _Affinity:
    """A dataset whose one example is the cores the process serving it may run on."""

    def __len__(self):
        return 1

    def __getitem__(self, i):
        return sorted(os.sched_getaffinity(0))


def test_a_dataloader_worker_forked_after_pinning_gets_every_allowed_core(restore_cores):
    """The step's launches run on the fast cores; the user's input pipeline (its DataLoader
    workers) on every core the run allows, as in their own training, not squeezed onto the
    kept ones (an H100 job kept one core, and a ResNet's two decoding workers shared it)."""
    import torch

    allowed = restore_cores
    if len(allowed) < 2:
        pytest.skip("one core: nothing to choose between")
    planted = lambda cores: {c: (4.0 if c != allowed[-1] else 2.4) for c in cores}  # noqa: E731
    rec = affinity.choose("fast", "cuda", speeds_of=planted)
    assert rec["pinned"] and sorted(os.sched_getaffinity(0)) == [allowed[-1]]
    loader = torch.utils.data.DataLoader(_Affinity(), batch_size=None, num_workers=1,
                                         multiprocessing_context="fork")
    (worker_cores,) = list(loader)
    assert worker_cores == allowed and sorted(os.sched_getaffinity(0)) == [allowed[-1]]
    assert f"forked workers on all {len(allowed)}" in affinity.describe(rec)
