"""What the torch.compile experiments (E19-E22) share: the compiler's own counters,
the break-even of a compile cost, the correctness column, a failure as one line.

Compilation is measured like any other intervention: the first compiled call
(which *is* the compilation) apart from the steady state, the steady state as
an interleaved pair against eager, and the output compared against eager.
"""

from __future__ import annotations

import gc
import math
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from perflab.instruments import memory
from perflab.instruments.compiler_watch import counters  # noqa: F401  (one place: the instrument)


def delta(before: dict[str, int], after: dict[str, int], key: str) -> int:
    return after.get(key, 0) - before.get(key, 0)


def graphs_compiled(before: dict[str, int], after: dict[str, int]) -> int:
    """Graphs compiled between two snapshots (a recompile is one more graph)."""
    return delta(before, after, "stats.unique_graphs")


def failure(exc: BaseException, limit: int = 300) -> str:
    """An exception as the one line a row's reason can hold."""
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first[:limit]}"


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest elementwise |a - b|, computed in float32 on the host."""
    return float((a.detach().float().cpu() - b.detach().float().cpu()).abs().max())


def break_even_calls(first_call_ms: float, compiled_ms: float, eager_ms: float) -> int | None:
    """Calls after which compiling has paid for itself; None if it never does.

    N calls cost ``first + (N - 1) * compiled`` compiled and ``N * eager`` eager;
    the smallest N where the compiled total is no larger is
    ``ceil((first - compiled) / (eager - compiled))`` (at least 1). A compiled
    steady state no faster than eager never repays its compilation.
    """
    gain = eager_ms - compiled_ms
    if gain <= 0:
        return None
    return max(1, math.ceil((first_call_ms - compiled_ms) / gain))


def isolated_cuda_peak(device: torch.device, fn: Callable[[], Any], calls: int,
                       sync: Callable[[], None]) -> tuple[float, float]:
    """(peak allocated MiB, peak reserved MiB) of ``calls`` calls of ``fn`` alone.

    The allocator's cache is emptied and its peaks reset first, so the reading
    belongs to this callable (and what is already resident: model, inputs).
    """
    gc.collect()
    torch.cuda.empty_cache()
    memory.reset_cuda_peaks(device)
    for _ in range(calls):
        fn()
    sync()
    c = memory.cuda_counters(device)
    return c.max_allocated_mib, c.max_reserved_mib


CPU_PEAK_REASON = ("CPU: an in-process RSS peak cannot separate variants run in one process "
                   "(freed memory stays resident); E08 measures peak RSS per fresh process")


def cache_files(cache_dir: str | Path) -> int:
    """Number of files under an Inductor cache directory (0 if absent)."""
    p = Path(cache_dir)
    return sum(1 for f in p.rglob("*") if f.is_file()) if p.is_dir() else 0


def mark_execution(ctx, variant: str, execution: str) -> None:
    """Set ``execution`` on the rows and samples of ``variant`` already written.

    ``Context.ab`` writes both sides of a pair with the same contract columns;
    the compiled side of an eager/compiled pair must say it was compiled.
    """
    for r in ctx.rows:
        if r["variant"] == variant:
            r["execution"] = execution
    for s in ctx.samples:
        if s["variant"] == variant:
            s["execution"] = execution


# ------------------------------------------------------------ the compile workers at job end


def stop_compile_workers() -> int:
    """Kill Inductor's compile-worker processes now; the number of processes killed.

    Where Triton is installed, importing ``torch._inductor.async_compile`` starts a
    sidecar interpreter (``SubprocPool``) that imports torch and forks one worker per
    compile thread. At interpreter exit Inductor shuts it down politely: it waits for the
    sidecar to finish starting (its import of torch, its workers' fork) before telling it to
    stop. A job that ends seconds after the pool started (E20's warm job, a cache hit) waited
    for all of that: 6-7 s on the 2-core CPU with the pool forced on, 9.8 s on the H200.
    Called once a job's outputs are written, so nothing measured changes: the sidecar is
    stopped (it can fork no more), it and every process under it are killed, and Inductor's
    own shutdown then finds nothing running (a later compile in this process starts a new
    pool). A no-op where nothing imported the module or no pool runs.
    """
    ac = sys.modules.get("torch._inductor.async_compile")
    if ac is None:
        return 0
    from torch._inductor.compile_worker.subproc_pool import SubprocPool

    killed = 0
    for pool in list(getattr(ac, "_pool_set", ())):
        if not isinstance(pool, SubprocPool) or pool.process.poll() is not None:
            continue
        with pool.write_lock:
            pool.running = False  # its reader thread takes the closed pipe as a clean exit
        killed += _kill_tree(pool.process.pid)
        pool.process.wait()
    ac.shutdown_compile_workers()  # forgets the pools; each one's shutdown now returns at once
    return killed


def _kill_tree(pid: int) -> int:
    """SIGKILL ``pid`` and its descendants (stopped first, so it forks no new one)."""
    try:
        os.kill(pid, signal.SIGSTOP)
    except ProcessLookupError:
        return 0
    tree = [pid, *_descendants(pid)]
    for p in tree:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(tree)


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid``, read from /proc (empty where there is no /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or unreadable
        children.setdefault(ppid, []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


# ------------------------------------------------------------ eager vs compiled, measured


def no_grad_forward(model: torch.nn.Module, x: torch.Tensor) -> Callable[[], torch.Tensor]:
    """The forward of ``model`` on ``x`` under no_grad (the chapter's compile contract)."""

    def step():
        with torch.no_grad():
            return model(x)

    return step


def compile_again(model: torch.nn.Module, x: torch.Tensor) -> Callable[[], torch.Tensor]:
    """:func:`no_grad_forward` of a second ``torch.compile`` of a copy of ``model``, which
    Inductor serves from its cache (the graph the first compile wrote).

    Compiling the same module again would reuse Dynamo's in-memory code for it, so
    nothing is loaded; the forward runs under a code object of its own, which Dynamo has
    never seen: it traces it anew and hands Inductor the same graph, which Inductor then
    looks up in its cache (``inductor.fxgraph_cache_hit`` says whether it did).
    """
    import copy

    twin = copy.deepcopy(model)

    def forward(inp):
        return twin(inp)

    forward.__code__ = forward.__code__.replace()  # a fresh code object: Dynamo's cache is per code
    return no_grad_forward(torch.compile(forward), x)
