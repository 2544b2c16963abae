"""What one rank of D01 runs: ``python -m perflab.experiments.d01_data_parallel.ranks <job.json>``, started by torchrun.

Each rank is a fresh process (:func:`perflab.experiments.d01_data_parallel.distributed.launch` starts them all). It joins
the process group, builds the controlled workload once per configuration
(:func:`perflab.experiments.d01_data_parallel.distributed.configurations`) wrapped in ``DistributedDataParallel``, warms
every configuration, then steps them in interleaved blocks, the same balanced order on
every rank (:func:`perflab.instruments.timing.williams_orders`), and writes ``rank<r>.json``: one record
per step with its phase times, its backward's span and, per bucket, three marks of the
all-reduce (:func:`timed_hook`). Nothing is summarized here: :mod:`perflab.experiments.d01_data_parallel.overlap` reads
the records of all ranks together, since the all-reduce's split into moving bytes and
waiting for the last rank needs every rank's view of the same collective.

The marks are read on the clock the work runs on: :class:`HostClock` on a CPU,
:class:`DeviceClock` on CUDA (events on the compute stream, the device kept ahead of the
host by a lead common to all ranks). A planted straggler sleeps on that same clock (a
host sleep on a CPU, a device-side sleep on CUDA), in one phase of one rank.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from perflab.experiments.d01_data_parallel.distributed import PHASES, Config, Plan, configurations


class HostClock:
    """Each rank's host clock: on a CPU the work runs as the host calls it."""

    kind = "host"
    boundary = ("host clock (time.perf_counter) of each rank; the CPU runs synchronously, so "
                "a mark is the moment the work before it finished")
    lead_ms = 0.0

    def begin(self) -> float:
        return time.perf_counter()

    def mark(self) -> float:
        return time.perf_counter()

    def sleep(self, ms: float) -> None:
        time.sleep(ms / 1e3)

    def ahead(self, start: float) -> bool:
        return True

    def finish(self) -> None:
        return None

    @staticmethod
    def ms(start: float, mark: float) -> float:
        return (mark - start) * 1e3


class DeviceClock:
    """CUDA events on the rank's compute stream, the device kept ahead of the host.

    Each step starts from a drained device with a device-side sleep of ``lead_ms`` queued
    before its start event (the same lead on every rank), so the host submits the step while
    the device sleeps and the events span its execution, not the host's launch gaps
    (:func:`perflab.instruments.timing.time_wall_and_device`'s method). A step whose start event had
    fired before its submission ended ran behind the host: :meth:`ahead` says so.
    """

    kind = "device"

    def __init__(self, device: str):
        from perflab.instruments import timing

        self.cuda = timing.CudaClock(device)
        self.lead_ms = 1.0

    @property
    def boundary(self) -> str:
        return (f"CUDA events on each rank's compute stream, the device kept ahead of the host "
                f"by a {self.lead_ms:.2f} ms device-side sleep before each step (the same on "
                "every rank); drained before each step, synchronized after")

    def begin(self):
        self.cuda.sync()
        self.cuda.sleep(self.lead_ms)
        return self.mark()

    def mark(self):
        event = self.cuda.event()
        event.record()  # on the current stream: in a future's callback, one that waits for it
        return event

    def sleep(self, ms: float) -> None:
        self.cuda.sleep(ms)

    def ahead(self, start) -> bool:
        return not start.query()

    def finish(self) -> None:
        self.cuda.sync()

    @staticmethod
    def ms(start, mark) -> float:
        return float(start.elapsed_time(mark))


# ------------------------------------------------------------------ the instrument


class BucketMarks:
    """The comm hook's state: per bucket, marks at hand-over, hook return and completion."""

    def __init__(self, clock, inner: Callable, blocking: bool):
        self.clock, self.inner, self.blocking = clock, inner, blocking
        self.handed: dict[int, tuple[Any, Any, int]] = {}
        self.done: dict[int, Any] = {}

    def reset(self) -> None:
        self.handed.clear()
        self.done.clear()


def timed_hook(state: BucketMarks, bucket):
    """A DDP comm hook: the inner hook's all-reduce of ``bucket``, with three marks.

    ``enter`` when DDP hands the bucket over (its gradients are ready), ``returned`` when
    this hook gives the backward its thread back (at once; after the all-reduce when
    ``blocking``: overlap forced off), ``done`` in the future's callback (on CUDA recorded
    on a stream that waits for the collective, so it fires when the collective has).
    """
    i = bucket.index()
    clock = state.clock
    enter = clock.mark()
    fut, unwrap = state.inner(bucket)

    def done(f):
        state.done[i] = clock.mark()
        return unwrap(f.value())

    out = fut.then(done)
    if state.blocking:
        out.wait()  # gloo: the host waits; CUDA: the compute stream waits for the collective
    nbytes = bucket.buffer().numel() * bucket.buffer().element_size()
    state.handed[i] = (enter, clock.mark(), nbytes)
    return out


def _average(bucket):
    """DDP's default reduction: the bucket divided by the world size, all-reduced (summed).

    What ``default_hooks.allreduce_hook`` does, without its own Python callback: the timed
    hook's one callback unwraps the result, so the instrument adds a single one per bucket.
    """
    import torch.distributed as dist

    t = bucket.buffer()
    t.div_(dist.get_world_size())
    return dist.all_reduce(t, async_op=True).get_future(), lambda value: value[0]


def _fp16(bucket):
    """DDP's fp16_compress_hook (compress, all-reduce, decompress in its own callback)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    return default_hooks.fp16_compress_hook(None, bucket), lambda value: value


def inner_hook(name: str) -> Callable:
    """The all-reduce a timed configuration runs: ``bucket -> (future, unwrap its value)``."""
    return {"allreduce": _average, "fp16": _fp16}[name]


# ------------------------------------------------------------------ one configuration


def unused_parameters(w, device) -> list[str]:
    """Parameters that get no gradient from one forward + backward of the workload's batch.

    DDP must be told of them (``find_unused_parameters=True``), or its second step fails
    waiting for their gradients. The probe's gradients are cleared again.
    """
    x, y = w.batch_on(device)
    w.loss_fn(w.model(x), y).backward()
    unused = [n for n, q in w.model.named_parameters() if q.requires_grad and q.grad is None]
    w.model.zero_grad(set_to_none=True)
    return unused


class Stepper:
    """One configuration on one rank: its DDP model, optimizer, batch and comm hook."""

    def __init__(self, ctx, cfg: Config, clock, rank: int):
        import torch
        from torch.nn.parallel import DistributedDataParallel as DDP

        torch.manual_seed(ctx.contract["seed"])  # every configuration starts from one state
        w = ctx.workload()
        self.cfg, self.clock, self.rank, self.device = cfg, clock, rank, ctx.device
        kw = {} if cfg.bucket_cap_mb is None else {"bucket_cap_mb": cfg.bucket_cap_mb}
        self.unused = unused_parameters(w, ctx.device)
        self.ddp = DDP(w.model, device_ids=[ctx.device.index] if ctx.is_cuda else None,
                       find_unused_parameters=bool(self.unused), **kw)
        self.opt = w.make_optimizer(self.ddp.parameters())
        self.loss_fn = w.loss_fn
        x, y = w.make_batch(w.batch_size)
        if ctx.is_cuda:  # pinned: the copy is queued behind the lead, not waited for
            x, y = x.pin_memory(), (y.pin_memory() if y is not None else None)
        self.x_host, self.y_host = x, y
        self.marks = BucketMarks(clock, inner_hook(cfg.hook), cfg.blocking) if cfg.timed else None
        if self.marks is not None:
            self.ddp.register_comm_hook(self.marks, timed_hook)
        self.count = 0

    def _plant(self, phase: str) -> None:
        p = self.cfg.plant
        if p is not None and p[0] == self.rank and p[1] == phase:
            self.clock.sleep(p[2])

    def _submit(self) -> list[tuple[str, Any]]:
        """The step's work, a mark after each phase: (phase, mark) in order."""
        clk, k = self.clock, self.cfg.accumulate
        self._plant("input")
        x = self.x_host.to(self.device, non_blocking=True)
        y = self.y_host.to(self.device, non_blocking=True) if self.y_host is not None else None
        out = [("input", clk.mark())]
        self.opt.zero_grad(set_to_none=True)
        for micro in range(k):
            # all but the last micro-batch accumulate locally: no all-reduce
            with self.ddp.no_sync() if micro < k - 1 else contextlib.nullcontext():
                if micro == 0:
                    self._plant("forward")
                loss = self.loss_fn(self.ddp(x), y)
                out.append(("forward", clk.mark()))
                if micro == 0:
                    self._plant("backward")
                loss.backward()
                out.append(("backward", clk.mark()))
        self._plant("optimizer")
        self.opt.step()
        out.append(("optimizer", clk.mark()))
        return out

    def step(self) -> dict[str, Any]:
        """One step from a drained device: its record (every time in ms from its start)."""
        if self.marks is not None:
            self.marks.reset()
        t0 = time.perf_counter()
        start = self.clock.begin()
        marks = self._submit()
        submit_ms = (time.perf_counter() - t0) * 1e3
        ahead = self.clock.ahead(start)
        self.clock.finish()
        self.count += 1
        return self._record(start, marks, submit_ms, ahead)

    def _record(self, start, marks, submit_ms: float, ahead: bool) -> dict[str, Any]:
        ms = self.clock.ms
        at = [(phase, ms(start, m)) for phase, m in marks]
        phases, prev = dict.fromkeys(PHASES, 0.0), 0.0
        for phase, t in at:
            phases[phase] += t - prev
            prev = t
        buckets = []
        if self.marks is not None:
            for i in sorted(self.marks.handed):
                enter, returned, nbytes = self.marks.handed[i]
                buckets.append([ms(start, enter), ms(start, returned),
                                ms(start, self.marks.done[i]), nbytes])
        return {"config": self.cfg.name, "step": self.count - 1, "phases": phases,
                "step_ms": at[-1][1], "backward": [at[-3][1], at[-2][1]], "buckets": buckets,
                "ahead": ahead, "submit_ms": submit_ms}


# ------------------------------------------------------------------ the rank


def _max_over_ranks(value: float, device) -> float:
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def warm(steppers: list[Stepper], n: int, clock, device) -> None:
    """``n`` steps of every configuration (DDP rebuilds its buckets after the first); on
    CUDA, the lead every rank then keeps the device ahead by: twice the longest host
    submission, on any rank, of a configuration's last warm step (the first ones pay for
    lazy initialization, which no later step repeats)."""
    longest = 0.0
    for s in steppers:
        for _ in range(n):
            last = s.step()["submit_ms"]
        longest = max(longest, last)
    if isinstance(clock, DeviceClock):
        clock.lead_ms = max(2 * _max_over_ranks(longest, device), 0.1)


def round_robin(steppers: list[Stepper], blocks: int, inner: int, log) -> list[dict]:
    """``blocks`` blocks, each running every configuration for ``inner`` steps, in the
    balanced orders of :func:`perflab.instruments.timing.williams_orders` (the same on every rank)."""
    import torch.distributed as dist

    from perflab.instruments.timing import williams_orders

    orders = williams_orders(len(steppers))
    out = []
    for b in range(blocks):
        for k in orders[b % len(orders)]:
            # every configuration's run starts with the ranks together: the tail of the one
            # before (a planted sleep in its optimizer) is no lateness of this one
            dist.barrier()
            out += [{"block": b, **steppers[k].step()} for _ in range(inner)]
        log(f"block {b + 1}/{blocks} done")
    return out


def measure_rank(contract: dict, p: Plan, device: str, rank: int, world: int,
                 log: Callable[[str], None], new_context: Callable[..., Any]) -> dict[str, Any]:
    """Every configuration's steps on this rank, as the record the job merges.

    ``new_context(eid, contract, log)``: the job harness's context (the rank's entry,
    scripts/data_parallel_rank.py, hands in :class:`perflab.pipeline.runner.Context`)."""
    import torch

    contract = {**contract, "device": device}
    # as the harness sets up every job's process (perflab.pipeline.runner.execute)
    torch.manual_seed(contract["seed"])
    torch.set_num_threads(p.rank_threads)
    torch.set_flush_denormal(bool(contract.get("flush_denormal", False)))
    ctx = new_context("D01", contract, log)
    params = contract["params"]
    w = ctx.workload()
    record = {"rank": rank, "world": world, "backend": p.backend, "device": device,
              "device_name": ctx.device_name, "host": socket.gethostname(), "pid": os.getpid(),
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "row_defaults": {"workload": contract["workload"], "model": w.description,
                               "input_shape": w.input_shape(),
                               "dtype": str(w.dtype).removeprefix("torch.")},
              "started": _now()}
    missing = [f for f in ("make_batch", "loss_fn") if not w.gives(f)]
    if w.make_optimizer is None or missing:
        why = (f"workload {w.name!r} has no optimizer: no training step to distribute"
               if w.make_optimizer is None else
               f"workload {w.name!r} gives no {' or '.join(missing)}: D01 rebuilds the "
               "data-parallel step from model, loss_fn and make_batch (its phase marks sit "
               "between them), so a workload's own train_step cannot stand in")
        return {**record, "unsupported": why, "steps": []}
    clock = DeviceClock(device) if ctx.is_cuda else HostClock()
    steppers = [Stepper(ctx, cfg, clock, rank) for cfg in configurations(params)]
    warm(steppers, params["warmup"], clock, ctx.device)
    log(f"warm: {len(steppers)} configurations; lead {clock.lead_ms:.2f} ms")
    steps = round_robin(steppers, params["blocks"], params["inner"],
                        log if rank == 0 else (lambda m: None))
    return {**record, "clock": clock.kind, "boundary": clock.boundary, "lead_ms": clock.lead_ms,
            "workloads": ctx.workloads_built, "unused_parameters": steppers[0].unused,
            "unsupported": "", "steps": steps, "finished": _now()}


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
