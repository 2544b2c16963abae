"""Which host cores a job measures on: the fastest of the cores it is allowed.

The cores of one host are not always equal. On the lent H200's 16-core VM, one process
per core, pinned, read the chapter step's host submission at 2.33-2.45 ms on seven cores
and 3.4-4.8 ms on the others (the device's step is 2.9 ms): a host-bound step's time, and
every verdict that rests on the host keeping up with the device, followed whichever core
a job's main thread landed on, and moved 40-80% between processes of one run. Hybrid CPUs
(performance and efficiency cores) are the same on a laptop.

So a job on a CUDA device first times a fixed piece of interpreter work on each core it is
allowed (round robin, the fastest of a few tries each: a core's speed is what it can do,
not how often it was interrupted) and keeps the cores within :data:`FAST_WITHIN_PCT` of the
fastest. The main thread, which launches every kernel, and every thread started after it,
then run on those cores; a process forked from it (a DataLoader's workers) gets every allowed
core back, as in the user's training: on an H100's 16-core host a job kept 1-11 cores from one
job to the next, and a ResNet's two decoding workers shared the one kept core with the main
thread in some jobs and not in others. What was measured and kept goes into the job's
provenance. On the CPU device the default keeps every core: there the step's compute runs
on all of them, and the contract's thread count says how many.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

#: a core is kept when its work takes at most this % longer than the fastest core's
FAST_WITHIN_PCT = 10.0
#: tries of the work on each core, round robin; a core's time is its fastest try
TRIES = 5
#: iterations of the interpreter loop one try runs (~1-2 ms on a server core)
WORK_ITERATIONS = 20_000
#: the config's choices (``host_cores``): auto = fast on CUDA, all on the CPU
POLICIES = ("auto", "fast", "all")


def allowed_cores() -> list[int]:
    """The cores this process may run on, or [] where the OS cannot say (not Linux)."""
    if not hasattr(os, "sched_getaffinity"):
        return []
    return sorted(os.sched_getaffinity(0))


def _work() -> float:
    """ms of a fixed piece of interpreter work (what launching a kernel costs the host is
    interpreter and driver code of this kind, not arithmetic on wide registers)."""
    t = time.perf_counter()
    acc = 0
    for i in range(WORK_ITERATIONS):
        acc += i & 7
    return (time.perf_counter() - t) * 1e3


def core_speeds(cores: list[int], *, tries: int = TRIES,
                work: Callable[[], float] = _work) -> dict[int, float]:
    """ms of :func:`_work` on each core: the fastest of ``tries``, taken round robin so a
    moment's interruption costs one try of one core. The caller's own cores are restored."""
    before = os.sched_getaffinity(0)
    best = {c: float("inf") for c in cores}
    try:
        for _ in range(tries):
            for c in cores:
                os.sched_setaffinity(0, {c})
                best[c] = min(best[c], work())
    finally:
        os.sched_setaffinity(0, before)
    return best


def fast_cores(speeds: dict[int, float], within_pct: float = FAST_WITHIN_PCT) -> list[int]:
    """The cores whose time is within ``within_pct`` % of the fastest core's."""
    if not speeds:
        return []
    fastest = min(speeds.values())
    return sorted(c for c, ms in speeds.items() if ms <= fastest * (1 + within_pct / 100))


def policy_for(policy: str, device: str) -> str:
    """``fast`` or ``all``: what ``auto`` means on ``device`` (``cuda``, ``cuda:1``, ``cpu``)."""
    if policy not in POLICIES:
        raise ValueError(f"host_cores must be one of {', '.join(POLICIES)}, not {policy!r}")
    if policy == "auto":
        return "fast" if str(device).startswith("cuda") else "all"
    return policy


def choose(policy: str, device: str, *,
           speeds_of: Callable[[list[int]], dict[int, float]] | None = None) -> dict[str, Any]:
    """Pin this process to the cores ``policy`` keeps; what was measured and kept.

    The record: the policy as resolved, the allowed cores, each one's ms of work (``fast``
    only), the cores kept, and whether the affinity changed. One allowed core, or an OS
    that cannot pin: nothing to choose, the record says so.
    """
    resolved = policy_for(policy, device)
    allowed = allowed_cores()
    record: dict[str, Any] = {"policy": policy, "resolved": resolved, "allowed": allowed,
                              "kept": allowed, "pinned": False}
    if resolved == "all" or len(allowed) < 2:
        return record
    try:
        speeds = (speeds_of or core_speeds)(allowed)
        kept = fast_cores(speeds)
        if kept and kept != allowed:
            os.sched_setaffinity(0, set(kept))
            record["pinned"] = True
            _children_on(allowed)
    except OSError as exc:  # a container that refuses a core: measure on all, and say so
        os.sched_setaffinity(0, set(allowed))
        record.update(error=f"could not pin ({exc}): every allowed core kept")
        return record
    record.update(work_ms={str(c): round(ms, 4) for c, ms in speeds.items()}, kept=kept,
                  within_pct=FAST_WITHIN_PCT)
    return record


_CHILD_CORES: list[set[int]] = []


def _children_on(cores: list[int]) -> None:
    """A process forked from here from now on runs on ``cores`` (its workers are the user's
    input pipeline, not the step's launches: they get the cores the user's run would give
    them). One hook per process, the latest cores."""
    if not _CHILD_CORES:
        os.register_at_fork(after_in_child=_widen)
        _CHILD_CORES.append(set(cores))
    _CHILD_CORES[0] = set(cores)


def _widen() -> None:
    try:
        os.sched_setaffinity(0, _CHILD_CORES[0])
    except OSError:
        pass  # a core taken away meanwhile: the child keeps its parent's


def describe(record: dict[str, Any]) -> str:
    """One line for the job's log."""
    allowed, kept = record["allowed"], record["kept"]
    if "error" in record:
        return f"host cores: {len(allowed)} ({record['error']})"
    if not record["pinned"]:
        why = ("every core kept" if record["resolved"] == "all" or len(allowed) < 2
               else f"all {len(allowed)} within {FAST_WITHIN_PCT:g}% of the fastest")
        return f"host cores: {len(allowed)} ({why})"
    ms = record["work_ms"]
    slow = [c for c in allowed if c not in kept]
    return (f"host cores: {len(kept)} of {len(allowed)} kept, within {FAST_WITHIN_PCT:g}% of "
            f"the fastest ({min(ms.values()):.3f} ms of work; the slowest left out "
            f"{max(ms[str(c)] for c in slow):.3f} ms); forked workers on all {len(allowed)}")
