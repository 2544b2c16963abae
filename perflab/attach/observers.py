"""The observers installed in an unmodified training script's process.

A step is the interval between two optimizer steps, seen by torch's global optimizer step
hooks (``register_optimizer_step_pre/post_hook``: any optimizer, also one a GradScaler or a
scheduler steps; nested steps, e.g. a wrapper optimizer stepping its inner one, count once).
Backward calls between two steps are the step's micro-batches. A script that never steps an
optimizer is measured per outermost forward (``unit`` says which).

Phases are perflab.instruments.phases' (E05's) boundaries, read from global hooks instead of hooks on a
model handed over: the DataLoader iterator's ``__next__`` (input wait), the first forward
after the batch arrives (host-to-device: what the loop does before its forward), the
outermost module's forward (a global module pre/post hook with a depth count, narrowed to
the outermost modules found once warm-up ends), ``torch.autograd.backward`` (backward), the
optimizer step hooks (optimizer), and the rest (logging). The clock is
:class:`perflab.instruments.phases.PhaseClock` without a drain: on a device with a queue the phases are
submission times, and the profiled window's trace decides what the device waits for.

After warm-up the steady steps follow a plan (:func:`plan`): a few steps with the host reads
located (sync window), one step with its work counted (FLOPs and bytes, R01's counters),
a short profiled window, then stretches of steps alternating with the phase hooks on and
off, so the hooks' own cost is measured on this loop. Steps of the windows are kept but
never timed. The budget stops the script by raising :class:`StopObserved` from the step
hook (the bootstrap catches it); ``follow`` lets it run on.
"""

from __future__ import annotations

import functools
import linecache
import os
import sys
import threading
import time
import traceback
import warnings
import weakref
from pathlib import Path
from typing import Any

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from perflab.instruments import memory
from perflab.instruments import phases as ph

_clock = time.perf_counter

#: steps in each stretch of the hooks-on / hooks-off alternation
STRETCH = 4
#: steps with host reads located, and profiled steps (after one profiler warm-up step);
#: then one ``settle`` step, untimed: the profiler's window closes at its start (the trace
#: collected, processed and written: 8 s of a 75 ms step on an H100, for a step of 10,000
#: host ops), which the first timed step read as its own wall
SYNC_STEPS, PROFILED_STEPS = 2, 3
#: outermost forwards with no backward and no optimizer step after which the script is taken
#: to be inference and measured per forward
FORWARDS_FOR_INFERENCE = 8
#: how often the evidence file is rewritten while the script runs (s): a killed child keeps
#: what it had
FLUSH_S = 5.0
#: the labels of a step's end, and of its start once the observers' own step-end work is
#: done (memory and Dynamo's counters, the energy counter, the evidence file, the stop rule's
#: look, the plan's next instrument): on CUDA a step is timed from the one to the other, so
#: that work, which leaves a host-bound step's device idle, is not read as the step's
STEP_END, STEP_START = "step end", "step start"
#: what a step's time is read by (the evidence's ``step_clock``)
DEVICE_CLOCK = ("CUDA events at each step end and phase boundary, in stream order: the "
                "device's time, its waits for the host included (the host's in host_wall_ms)")
HOST_CLOCK = "the host's clock (time.perf_counter) at each step end and phase boundary"
#: host reads of a tensor's value wrapped on a CPU (each one is a sync on CUDA)
HOST_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__")
SYNC_WARNING = "called a synchronizing CUDA operation"

_PERFLAB = Path(__file__).resolve().parents[1]
_TORCH = Path(torch.__file__).resolve().parent


class StopObserved(BaseException):
    """Raised from the step hook when the budget is spent; a BaseException so that the
    script's own ``except Exception`` does not swallow it."""


def plan(k: int) -> str:
    """What steady step ``k`` (0-based, after warm-up) is for."""
    if k < SYNC_STEPS:
        return "syncs"
    k -= SYNC_STEPS
    if k == 0:
        return "work"
    k -= 1
    if k <= PROFILED_STEPS:  # one profiler warm-up step, then the profiled ones
        return "profiled"
    k -= PROFILED_STEPS + 1
    if k == 0:
        return "settle"
    k -= 1
    return "observed" if (k // STRETCH) % 2 == 0 else "bare"


def user_site(stack: list[traceback.FrameSummary], roots: list[Path]) -> str:
    """``file.py:line: source`` of the innermost frame in the user's files (under ``roots``:
    the script's directory, the working directory), else the innermost frame outside torch,
    perflab and the standard library's machinery; "" when none."""
    def ok(fr, strict: bool) -> bool:
        if not fr.filename or fr.filename.startswith("<"):
            return False
        p = Path(fr.filename).resolve()
        if _PERFLAB in p.parents or _TORCH in p.parents or p.name in ("warnings.py",
                                                                        "runpy.py"):
            return False
        if not strict:
            return True
        return "site-packages" not in p.parts and any(r in p.parents for r in roots)

    for strict in (True, False):
        for fr in reversed(stack):
            if ok(fr, strict):
                line = (fr.line or linecache.getline(fr.filename, fr.lineno or 0)).strip()
                name = _short(Path(fr.filename).resolve(), roots)
                return f"{name}:{fr.lineno}" + (f": {line}" if line else "")
    return ""


def construction_stack(obj) -> list[traceback.FrameSummary]:
    """The stack of the call that constructs ``obj``, from this function's caller out,
    without the frames of ``obj``'s own constructors (every ``__init__`` whose ``self`` is
    ``obj``: a user subclass's ``super().__init__()``, torch's chain above it). Its innermost
    user frame is the line that built the object (``model = Adapters(...)``), not the
    ``super().__init__()`` inside its class."""
    frames = []
    f = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if not (code.co_name == "__init__" and code.co_argcount
                and f.f_locals.get(code.co_varnames[0]) is obj):
            frames.append((f, f.f_lineno))
        f = f.f_back
    frames.reverse()
    return list(traceback.StackSummary.extract(frames))


def _short(p: Path, roots: list[Path]) -> str:
    for r in roots:
        if r in p.parents:
            return str(p.relative_to(r))
    parts = p.parts
    return "/".join(parts[parts.index("site-packages") + 1:]) if "site-packages" in parts \
        else p.name


def uses_cuda() -> bool:
    """Whether the script's run uses CUDA: CUDA initialized *and* memory allocated on it. A
    CPU model compiled on a GPU machine initializes CUDA (Inductor asks for the device's
    properties) without running anything there, and on an H100 read as a CUDA run."""
    return (torch.cuda.is_available() and torch.cuda.is_initialized()
            and torch.cuda.max_memory_allocated() > 0)


class Observer:
    """Everything observed in one run of the script; :meth:`evidence` is what is written."""

    #: the stopping rule under a total budget (``settings["budget_s"]``): an object with
    #: ``prepare()`` and ``step_end(observer) -> reason or ""`` (perflab.attach.stopping, set
    #: by the bootstrap: the rule reads this module, so this module does not import it)
    stop_rule = None

    def __init__(self, settings: dict, out: str):
        self.s = settings
        self.out = Path(out)
        self.roots = [Path(p).resolve() for p in settings.get("roots", [os.getcwd()])]
        #: does the script use CUDA? Decided when warm-up ends (a script may run on the CPU of
        #: a machine with a GPU): the CUDA instruments then, else the CPU ones
        self.cuda = False
        self.t0 = _clock()
        #: the wall clock at t0, so the parent can split its command's time across processes
        self.unix0 = time.time()
        self.clock = ph.PhaseClock()
        self.ranges: ph.PhaseRanges | None = None
        self.steps: list[dict] = []
        self.unit = "optimizer step"
        self.optimizers: dict[int, str] = {}
        #: where each optimizer was first stepped (the user's line), and the one whose steps
        #: end a step (the first stepped)
        self.optimizer_sites: dict[str, str] = {}
        self._primary: int | None = None
        self._opt_objs: dict[int, torch.optim.Optimizer] = {}
        #: what holds memory at the end (MiB): parameters, gradients, optimizer state
        self.owners: dict[str, float] = {}
        self.models: dict[int, torch.nn.Module] = {}
        self.model_names: dict[int, str] = {}
        self.loaders: list[dict] = []
        self.host_reads: list[dict] = []
        self.sync_hits: list[dict] = []
        self.recompiles: list[str] = []
        self.limit_hits: list[str] = []
        self.profile: dict = {}
        self.ceilings: dict = {}
        self.roofline: dict = {}
        self.work: dict = {}
        self.status: dict = {"stopped_by": "", "exit": None}
        self.first_step_s: float | None = None
        self.steady_t0: float | None = None
        self._fwd_depth = self._bwd_depth = self._opt_depth = 0
        self._backwards = self._forwards = 0
        self._forwards_since_step = 0
        self._handles: list[Any] = []
        self._phase_on = True
        self._saved: dict[tuple[Any, str], Any] = {}
        self._kind = "warmup"
        self._prof = None
        self._work_modes: list[Any] = []
        self._last_flush = _clock()
        self._dynamo = None
        self._lock = threading.Lock()
        #: on CUDA, the device's own clock: a CUDA event at every phase boundary and step end,
        #: (step index, label, event) in stream order, resolved once complete (:meth:`_resolve`)
        self._marks: list[tuple[int, str | None, Any]] = []
        self._counted = 0
        self._device: dict[int, dict[str, float]] = {}
        #: the loss of the first ``loss_steps`` steps: detached tensors (summed over a step's
        #: backward calls), made floats only at close() so no timed step waits for a read
        self._loss_steps = int(settings.get("loss_steps") or 0)
        self._losses: list[Any] = []
        self._loss_acc: Any = None
        self.losses: list[float] = []
        #: construction sites: each optimizer (in construction order) and every module built
        #: while no other module's constructor ran (the outermost model is among them)
        self._opt_built: list[tuple[Any, str]] = []
        self._module_sites: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._module_init_depth = 0
        #: the user's line calling each outermost model (where an autocast edit goes), and
        #: the script's own mixed precision: autocast in force at that first forward
        #: ({device type: dtype}), each GradScaler constructed (its site)
        self._forward_sites: dict[int, str] = {}
        self.amp: dict = {"autocast": {}, "grad_scaler": []}
        self._making_scaler = False  # a patch's own GradScaler (patches.py) is not the script's
        #: a cumulative energy counter read at each step end (perflab.instruments.energy)
        self._energy = None
        #: what a patch (perflab.attach.patches) did: set by patches.apply
        self.patch: dict | None = None
        self.patch_finish = None

    # ------------------------------------------------------------ phase boundaries
    def enter(self, phase: str | None) -> None:
        if self._phase_on:
            self.clock.enter(phase)
            self._mark(len(self.steps), phase)
            if self.ranges is not None:
                self.ranges.enter(phase)

    # ------------------------------------------------------------ the device's clock
    def _mark(self, step: int, label: str | None) -> None:
        """A CUDA event on the current stream at a boundary (CUDA steady steps only). The host
        runs ahead of an asynchronous device: its clock at a boundary times the launches, not
        the work (E01's lying benchmark). The events' intervals are the device's, in stream
        order: its work between two boundaries and any wait for the host between them (E06)."""
        if self.cuda and self.steady_t0 is not None:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            self._marks.append((step, label, ev))

    def _resolve(self, block: bool) -> None:
        """Turn complete events into ms per phase and per step (``_step``: from the previous
        step's end to its own), then drop them; ``block``: wait for the device first (at the
        end, never inside a step). Each interval is counted once (``_counted``)."""
        if len(self._marks) < 2:
            return
        if block:
            torch.cuda.synchronize()
        done = self._counted
        for i in range(self._counted, len(self._marks) - 1):
            step, label, ev = self._marks[i]
            nxt = self._marks[i + 1][2]
            if not block and not nxt.query():
                break
            if label not in (None, STEP_END, STEP_START):
                d = self._device.setdefault(step, {})
                d[label] = d.get(label, 0.0) + ev.elapsed_time(nxt)
            done = i + 1
        marks = self._marks[:done + 1]
        starts = {s: ev for s, lab, ev in marks if lab == STEP_START}
        ends = [(s, ev) for s, lab, ev in marks if lab == STEP_END]
        for (_, a), (s, b) in zip(ends, ends[1:]):  # from its start, else the last step's end
            self._device.setdefault(s, {})["_step"] = starts.get(s, a).elapsed_time(b)
        # keep from the last resolved step end on: the next step's start
        keep = max((i for i, (_, lab, _) in enumerate(self._marks[:done + 1])
                    if lab == STEP_END), default=0)
        self._marks, self._counted = self._marks[keep:], done - keep

    def _device_times(self) -> None:
        """The steps' times by the device's clock: ``wall_ms`` and ``phases_ms`` of each CUDA
        steady step become the events' (the host's kept as ``host_wall_ms``,
        ``host_phases_ms``)."""
        for r in self.steps:
            d = self._device.get(r["index"])
            if not d or "_step" not in d or "host_wall_ms" in r:
                continue
            r["host_wall_ms"], r["wall_ms"] = r["wall_ms"], d.get("_step")
            if r["phases_ms"]:
                r["host_phases_ms"] = r["phases_ms"]
                r["phases_ms"] = {p: d.get(p, 0.0) for p in r["phases_ms"]}

    def _forward_pre(self, module, _args):
        if torch.compiler.is_compiling() or self._bwd_depth:
            return
        if self._fwd_depth == 0:
            self._forwards += 1
            self._forwards_since_step += 1
            if self.clock.phase == "loss" and self.unit != "forward":
                # an outermost module called after the model's forward (a loss module, a
                # second model judging the first): part of the loss phase, not a new forward
                self._fwd_depth += 1
                return
            if self.unit == "forward":  # inference: a step from one forward to the next
                self._step_end()
            if id(module) not in self.models:
                self._first_forward(module)
            self.models.setdefault(id(module), module)
            self.model_names.setdefault(id(module), type(module).__name__)
            self.enter("forward")
            if self._kind == "work" and not self._work_modes:
                self._start_work()
        self._fwd_depth += 1

    def _forward_post(self, _module, _args, _out):
        if torch.compiler.is_compiling() or self._bwd_depth or self._fwd_depth == 0:
            return
        self._fwd_depth -= 1
        if self._fwd_depth == 0:
            self.enter("loss")
            if self.unit == "optimizer step" and not self.optimizers \
                    and not self._backwards \
                    and self._forwards_since_step >= FORWARDS_FOR_INFERENCE:
                self.unit = "forward"  # inference: no backward, no optimizer step

    def _optimizer_pre(self, opt, _args, _kwargs):
        if self._opt_depth == 0:
            self.enter("optimizer")
        self._opt_depth += 1
        if id(opt) not in self.optimizers:
            self.optimizers[id(opt)] = type(opt).__name__
            self.optimizer_sites[type(opt).__name__] = user_site(traceback.extract_stack(),
                                                                 self.roots)
        if self._primary is None:
            self._primary = id(opt)
        self._opt_objs.setdefault(id(opt), opt)

    def _optimizer_post(self, opt, _args, _kwargs):
        self._opt_depth = max(0, self._opt_depth - 1)
        if self._opt_depth == 0:
            if id(opt) != self._primary:  # another optimizer (a GAN's second): in the step
                self.enter("logging")
                return
            self.unit = "optimizer step"
            self._step_end()

    def _backward_wrap(self, original):
        def backward(*args, **kwargs):
            self._bwd_depth += 1
            if self._bwd_depth == 1:
                self._backwards += 1
                if len(self._losses) < self._loss_steps:
                    self._keep_loss(args[0] if args else kwargs.get("tensors"))
                self.enter("backward")
            try:
                return original(*args, **kwargs)
            finally:
                self._bwd_depth -= 1
                if self._bwd_depth == 0:
                    self.enter("logging")
                    if self._work_modes:
                        self._stop_work()
        return backward

    def _keep_loss(self, t) -> None:
        """Add this backward's loss to the step's (a reference: no host read here)."""
        if isinstance(t, (tuple, list)):
            t = t[0] if len(t) == 1 else None
        if isinstance(t, torch.Tensor) and t.numel() == 1:
            t = t.detach()
            self._loss_acc = t if self._loss_acc is None else self._loss_acc + t

    def _optimizer_init_wrap(self, original):
        obs = self

        @functools.wraps(original)  # its signature stays the constructor's (patches.py)
        def __init__(opt, *args, **kwargs):
            original(opt, *args, **kwargs)
            obs._opt_built.append((opt, user_site(construction_stack(opt), obs.roots)))
        return __init__

    def _module_init_wrap(self, original):
        obs = self

        @functools.wraps(original)  # its signature stays the constructor's (patches.py)
        def __init__(mod, *args, **kwargs):
            # only a construction with no other module's constructor running pays for the
            # stack: the outermost model is one of these, a submodule never is
            if obs._module_init_depth == 0:
                try:
                    obs._module_sites[mod] = user_site(construction_stack(mod), obs.roots)
                except TypeError:  # a module that cannot be weakly referenced
                    pass
            obs._module_init_depth += 1
            try:
                original(mod, *args, **kwargs)
            finally:
                obs._module_init_depth -= 1
        return __init__

    def _next_wrap(self, original):
        obs = self

        def __next__(it):
            obs.enter("input_wait")
            try:
                return original(it)
            finally:
                obs.enter("host_to_device")
        return __next__

    def _first_forward(self, module) -> None:
        """An outermost model's first forward: the line calling it, the autocast in force."""
        self._forward_sites[id(module)] = user_site(traceback.extract_stack()[:-2], self.roots)
        for dev in ("cuda", "cpu"):
            try:
                if torch.is_autocast_enabled(dev):
                    self.amp["autocast"][dev] = str(torch.get_autocast_dtype(dev)).split(".")[-1]
            except (RuntimeError, TypeError, AttributeError):  # an older torch: not known
                pass

    def _scaler_init_wrap(self, original):
        obs = self

        @functools.wraps(original)
        def __init__(scaler, *args, **kwargs):
            original(scaler, *args, **kwargs)
            if obs._making_scaler:
                return
            site = user_site(traceback.extract_stack()[:-1], obs.roots)
            if site not in obs.amp["grad_scaler"]:  # torch.cuda.amp's subclass calls super()
                obs.amp["grad_scaler"].append(site)
        return __init__

    def _loader_init_wrap(self, original):
        obs = self

        @functools.wraps(original)  # its signature stays the constructor's (patches.py)
        def __init__(loader, *args, **kwargs):
            original(loader, *args, **kwargs)
            obs.loaders.append({
                "site": user_site(construction_stack(loader), obs.roots),
                "num_workers": int(getattr(loader, "num_workers", 0)),
                "pin_memory": bool(getattr(loader, "pin_memory", False)),
                "persistent_workers": bool(getattr(loader, "persistent_workers", False)),
                "batch_size": getattr(loader, "batch_size", None),
                "dataset": type(getattr(loader, "dataset", None)).__name__})
        return __init__

    # ------------------------------------------------------------ install
    def _patch(self, owner, name, make):
        self._saved[(owner, name)] = getattr(owner, name)
        setattr(owner, name, make(self._saved[(owner, name)]))

    def _unpatch(self, owner, name):
        original = self._saved.pop((owner, name), None)
        if original is not None:
            setattr(owner, name, original)

    def install(self) -> None:
        from torch.utils.data import dataloader

        register_optimizer_step_pre_hook(self._optimizer_pre)
        register_optimizer_step_post_hook(self._optimizer_post)
        self._patch(dataloader.DataLoader, "__init__", self._loader_init_wrap)
        self._patch(torch.optim.Optimizer, "__init__", self._optimizer_init_wrap)
        self._patch(torch.nn.Module, "__init__", self._module_init_wrap)
        self._patch(torch.amp.GradScaler, "__init__", self._scaler_init_wrap)
        self._phase_hooks(on=True, global_modules=True)
        self._compiler_logs()
        self.enter("logging")

    def _phase_hooks(self, *, on: bool, global_modules: bool = False) -> None:
        """Install (or remove) the phase hooks: module forward hooks (global during warm-up,
        then on the outermost modules found), the backward wrap, the loader's next()."""
        from torch.utils.data import dataloader

        for h in self._handles:
            h.remove()
        self._handles = []
        self._unpatch(torch.autograd, "backward")
        self._unpatch(dataloader._BaseDataLoaderIter, "__next__")
        self._phase_on = on
        if not on:
            return
        if global_modules or not self.models:
            from torch.nn.modules import module as m
            self._handles = [m.register_module_forward_pre_hook(self._forward_pre),
                             m.register_module_forward_hook(self._forward_post)]
        else:
            for mod in self.models.values():
                self._handles += [mod.register_forward_pre_hook(self._forward_pre),
                                  mod.register_forward_hook(self._forward_post)]
        self._patch(torch.autograd, "backward", self._backward_wrap)
        self._patch(dataloader._BaseDataLoaderIter, "__next__", self._next_wrap)

    def narrow_hooks(self) -> None:
        """Move the phase hooks from global to the outermost models found so far now, not at
        warm-up's end: a compile patch does so before its first compiled call, because
        Dynamo guards on the global hooks and a change after it recompiled the model in the
        first timed step. Safe inside a forward pre-hook: the model's own hooks, added here,
        are not in the call already running; its post-hook runs once, as the model's."""
        if self._phase_on and self.models:
            self._phase_hooks(on=True)

    def _compiler_logs(self) -> None:
        """Keep Dynamo's recompile reasons and cache-limit warnings (without printing the
        reasons: the script's own output is the user's)."""
        import logging

        obs = self

        class Keep(logging.Handler):
            def emit(self, record):
                msg = record.getMessage()
                if "Recompiling function" in msg:
                    obs.recompiles.append(msg[:600])
                elif "hit config." in msg and "limit" in msg:
                    obs.limit_hits.append(msg[:600])

        self._keep = Keep(level=logging.DEBUG)
        logging.getLogger("torch._dynamo").addHandler(self._keep)  # the cache-limit warning
        if not os.environ.get("TORCH_LOGS"):  # the user's own log settings win
            torch._logging.set_logs(recompiles=True)
            self._quiet_recompiles = True
        # torch warns once per compiled module that global hooks fire for the wrapper too:
        # perflab's depth count expects it, and the warning is not the script's
        warnings.filterwarnings("ignore", message=r"Using `torch.compile\(module\)` when "
                                "there are global hooks")

    # ------------------------------------------------------------ per step
    def _dynamo_counters(self) -> dict[str, int]:
        if "torch._dynamo" not in sys.modules:
            return {}
        guards = sys.modules.get("torch._dynamo.guards")
        if guards is not None and getattr(self, "_quiet_recompiles", False):
            # Dynamo's recompile reasons to perflab's own logger: kept, not printed (torch's
            # log handlers are rebuilt when Dynamo loads, so a filter on them does not hold)
            import logging
            quiet = logging.getLogger("perflab.attach.recompiles")
            quiet.propagate, quiet.level = False, logging.DEBUG
            quiet.handlers = [self._keep]
            guards.recompiles_log = quiet
            self._quiet_recompiles = False
        from perflab.instruments import compiling
        return compiling.counters()

    def _memory(self) -> dict[str, float]:
        if self.cuda and torch.cuda.is_initialized():
            c = memory.cuda_counters()
            torch.cuda.reset_peak_memory_stats()
            return {k: v for k, v in c.as_dict().items()}
        return {"rss_mib": memory.rss_mib()}

    def _step_end(self) -> None:
        now = _clock()
        self._mark(len(self.steps), STEP_END)
        kind = self._kind
        if kind == "work" and self._work_modes:
            self._stop_work()
        self.enter(None)
        phase_ms = dict(self.clock.ms) if self._phase_on else {}
        last = getattr(self, "_last_end", None)
        if len(self._losses) < self._loss_steps:
            self._losses.append(self._loss_acc)
        self._loss_acc = None
        row = {"index": len(self.steps), "kind": kind, "t_end_s": now - self.t0,
               "wall_ms": (now - last) * 1e3 if last is not None else None,
               "phases_ms": phase_ms, "micro_batches": self._backwards,
               "forwards": self._forwards_since_step, "memory": self._memory(),
               "dynamo": self._dynamo_counters()}
        energy = self._energy_j()
        if energy is not None:
            row["energy_j"] = energy
        self.steps.append(row)
        self._backwards = self._forwards_since_step = 0
        if self.first_step_s is None:
            self.first_step_s = now - self.t0
        self._advance(now)
        if now - self._last_flush > FLUSH_S:
            self.flush()
        self._check_budget()  # the stop rule's look too is the observers' work, not a step's
        self._last_end = _clock()  # the observers' own step-end work (the plan's next
        # instrument, the evidence file, the look) is not the next step's: its wall starts here
        self._mark(len(self.steps), STEP_START)  # and on the device's clock
        self.enter("logging")

    def _energy_j(self) -> float | None:
        """The device's cumulative energy counter now (J), opened at the first step end."""
        if self._energy is None:
            from perflab.instruments.energy import EnergyMeter
            self._energy = EnergyMeter.open(uses_cuda())
        return self._energy.read_j()

    def _advance(self, now: float) -> None:
        """Move to the next step's kind: warm-up, then the plan."""
        n = len(self.steps)
        if self._kind == "warmup" and n >= self.s.get("warmup", 3):
            self.steady_t0 = now
            self.cuda = uses_cuda()
            self._mark(n - 1, STEP_END)  # the last warm-up step's end: the first steady start
            if self.unit == "optimizer step" and self.models:
                self._phase_hooks(on=True)  # narrowed to the outermost modules
        if self.steady_t0 is None:
            return
        k = sum(1 for r in self.steps if r["kind"] != "warmup")
        before, self._kind = self._kind, plan(k)
        if self.unit == "forward" and self._kind == "bare":
            self._kind = "observed"  # the forward hook is the step clock: it cannot go off
        if before == "syncs" and self._kind != "syncs":
            self._stop_syncs()
        if self._kind == "syncs" and before != "syncs":
            self._start_syncs()
        if self._kind == "profiled" and self._prof is None and not self.s.get("no_profile"):
            self._start_profile()
        elif self._prof is not None:
            self._prof.step()
            if self._kind != "profiled":
                self._stop_profile()
        if (before == "bare") != (self._kind == "bare"):
            self._phase_hooks(on=self._kind != "bare")

    def _check_budget(self) -> None:
        rule = self.stop_rule if self.s.get("budget_s") else None
        if rule is not None and len(self.steps) == 1:
            rule.prepare()  # the looks' imports, in the untimed first warm-up step
        if self.s.get("follow") or self.steady_t0 is None:
            return
        timed = sum(1 for r in self.steps if r["kind"] in ("observed", "bare"))
        steps, seconds = self.s.get("steps"), self.s.get("seconds")
        if steps and timed >= steps:
            self.status["stopped_by"] = f"--steps {steps}: {timed} timed steps observed"
        elif rule is not None and not steps:
            reason = rule.step_end(self)  # the adaptive contract: stop on the decision
            if not reason:
                return
            self.status["stopped_by"] = reason
        elif seconds and _clock() - self.steady_t0 >= seconds and timed >= 2:
            self.status["stopped_by"] = f"--seconds {seconds:g}: the budget of steady state"
        else:
            return
        raise StopObserved(self.status["stopped_by"])

    # ------------------------------------------------------------ windows
    def _start_syncs(self) -> None:
        """Locate the step's host reads: on CUDA torch's sync debug mode (each synchronizing
        call warns at the line that made it); on a CPU, Tensor.item/tolist/cpu/... wrapped
        (a CPU has no queue: each read is free here, and a sync on CUDA)."""
        obs = self
        if self.cuda:
            self._showwarning = warnings.showwarning

            def record(message, category, filename, lineno, file=None, line=None):
                if SYNC_WARNING in str(message):
                    obs.sync_hits.append({"step": len(obs.steps), "phase": obs.clock.phase,
                                          "site": user_site(traceback.extract_stack(),
                                                            obs.roots)})
                else:
                    obs._showwarning(message, category, filename, lineno, file, line)
            self._warn_filters = warnings.filters[:]
            warnings.simplefilter("always")
            warnings.showwarning = record
            torch.cuda.set_sync_debug_mode("warn")
            return
        for name in HOST_READS:
            def make(original, name=name):
                def read(t, *a, **kw):
                    caller = sys._getframe(1).f_code.co_filename
                    if _TORCH in Path(caller).resolve().parents:
                        return original(t, *a, **kw)  # torch's own reads (an optimizer's step
                        # count on the host) are not the script's
                    obs.host_reads.append({"step": len(obs.steps), "op": name,
                                           "phase": obs.clock.phase,
                                           "site": user_site(traceback.extract_stack()[:-1],
                                                             obs.roots)})
                    return original(t, *a, **kw)
                return read
            self._patch(torch.Tensor, name, make)

    def _stop_syncs(self) -> None:
        if self.cuda:
            torch.cuda.set_sync_debug_mode(0)
            warnings.showwarning = self._showwarning
            warnings.filters[:] = self._warn_filters
            return
        for name in HOST_READS:
            self._unpatch(torch.Tensor, name)

    def _start_work(self) -> None:
        """Count one step's forward + backward work (R01's FLOP and byte counters); not in a
        compiled script (a dispatch mode around a compiled graph is another program)."""
        if self.s.get("no_work") or "torch._dynamo" in sys.modules and self._dynamo_counters(
                ).get("stats.unique_graphs", 0):
            return
        from torch.utils.flop_counter import FlopCounterMode

        from perflab.instruments.roofline import ByteCounter
        self._work_dtype = ("bfloat16" if torch.is_autocast_enabled("cuda") and self.cuda
                            or torch.is_autocast_enabled("cpu") else "float32")
        flops, moved = FlopCounterMode(display=False), ByteCounter()
        flops.__enter__()
        moved.__enter__()
        self._work_modes = [flops, moved]

    def _stop_work(self) -> None:
        flops, moved = self._work_modes
        moved.__exit__(None, None, None)
        flops.__exit__(None, None, None)
        self._work_modes = []
        self.work = {"flops": int(flops.get_total_flops()), "bytes": int(moved.bytes),
                     "ops": int(moved.ops), "dtype": self._work_dtype}

    def _start_profile(self) -> None:
        from torch.profiler import ProfilerActivity, profile, schedule

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        trace = self.out.with_name("trace.json")

        def ready(p):
            p.export_chrome_trace(str(trace))
            self.profile["trace"] = trace.name
        self._prof = profile(activities=acts, schedule=schedule(
            wait=0, warmup=1, active=PROFILED_STEPS, repeat=1), on_trace_ready=ready)
        self.ranges = ph.PhaseRanges()
        self._prof.__enter__()

    def _stop_profile(self) -> None:
        prof, self._prof = self._prof, None
        self.ranges.enter(None)
        self.ranges = None
        try:
            prof.__exit__(None, None, None)
            ops = [e for e in prof.key_averages() if not e.key.startswith("ProfilerStep")
                   and e.key not in ph.PHASES and e.key.startswith("aten::")]
            self.profile["host_ops_per_step"] = sum(e.count for e in ops) / PROFILED_STEPS
            self.profile["top_host_ops"] = [
                (e.key, e.count / PROFILED_STEPS, e.self_cpu_time_total / 1e3 / PROFILED_STEPS)
                for e in sorted(ops, key=lambda e: -e.self_cpu_time_total)[:8]]
        except Exception as exc:  # the profiler failing is evidence missing, not a crash
            self.profile["error"] = f"{type(exc).__name__}: {exc}"

    # ------------------------------------------------------------ the evidence
    def close(self) -> None:
        """Undo what is still open (a window the stop interrupted)."""
        if self._work_modes:
            self._stop_work()
        if self._kind == "syncs":
            self._stop_syncs()
        if self._prof is not None:
            self._stop_profile()
        self._kind = "closed"
        if self.patch_finish is not None:  # the patch checks what it did (patches.py)
            try:
                self.patch_finish()
            except Exception as exc:  # said in the evidence; the rest is still written
                if self.patch is not None:
                    self.patch["finish_error"] = f"{type(exc).__name__}: {exc}"
        self.losses = [float(t) if t is not None else float("nan") for t in self._losses]
        if self.cuda:
            self._resolve(block=True)
            self._device_times()
        try:
            mib = 1024 ** 2
            mods = [m for m in self.models.values()]
            self.owners = {
                "parameters_mib": sum(memory.bytes_of_parameters(m) for m in mods) / mib,
                "gradients_mib": sum(memory.bytes_of_gradients(m) for m in mods) / mib,
                "optimizer_state_mib": sum(memory.bytes_of_optimizer_state(o)
                                           for o in self._opt_objs.values()) / mib}
        except Exception as exc:  # an owner not counted is said so, never a crash
            self.owners = {"error": f"{type(exc).__name__}: {exc}"}

    def evidence(self) -> dict:
        d = self._dynamo_counters()
        metrics = {}
        if "torch._dynamo" in sys.modules:
            from torch._dynamo.utils import compilation_time_metrics as ctm
            metrics = {k: float(sum(v)) for k, v in ctm.items()}
        return {
            "settings": self.s, "unit": self.unit, "cuda": self.cuda,
            "step_clock": (DEVICE_CLOCK if self.cuda else HOST_CLOCK),
            "device_name": (torch.cuda.get_device_name() if self.cuda else "cpu"),
            "torch": torch.__version__, "first_step_s": self.first_step_s,
            "steps": self.steps, "optimizers": list(self.optimizers.values()),
            "optimizer_sites": self.optimizer_sites,
            "models": list(self.model_names.values()), "loaders": self.loaders,
            "host_reads": self.host_reads, "sync_hits": self.sync_hits,
            "recompiles": self.recompiles, "limit_hits": self.limit_hits,
            "compile_time_s": metrics, "dynamo_final": d,
            "profile": self.profile, "work": self.work, "ceilings": self.ceilings, "roofline": self.roofline,
            "owners": self.owners, "status": self.status,
            "sites": self.sites(), "optimizers_built": self.optimizers_built(), "amp": self.amp,
            "losses": self.losses, "model_info": self.model_info(),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "cuda_matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
            "allocator_conf": os.environ.get("PYTORCH_ALLOC_CONF")
            or os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
            "energy": (self._energy.describe() if self._energy is not None else
                       {"instrument": None, "unit": "J", "reason": "no step ended"}),
            **({"patch": self.patch} if self.patch is not None else {}),
            "process_s": _clock() - self.t0, "unix0": self.unix0,
            "last_step_s": self.steps[-1]["t_end_s"] if self.steps else None,
        }

    def sites(self) -> dict[str, list[str]]:
        """Where each DataLoader, optimizer and outermost model was constructed, and the
        line that first called each outermost model (``forward``)."""
        models = [self._module_sites.get(m, "") for m in self.models.values()]
        return {"loader": [lo["site"] for lo in self.loaders],
                "optimizer": [site for _, site in self._opt_built],
                "model": [m for m in models if m],
                "forward": [s for s in (self._forward_sites.get(k) for k in self.models) if s]}

    def model_info(self) -> list[dict]:
        """Each outermost model: class, parameters, 2-D convolutions (what a patch needs)."""
        return [{"class": type(m).__name__, "site": self._module_sites.get(m, ""),
                 "parameters": sum(p.numel() for p in m.parameters()),
                 "conv2d": sum(isinstance(x, torch.nn.Conv2d) for x in m.modules())}
                for m in self.models.values()]

    def optimizers_built(self) -> list[dict]:
        """Each optimizer constructed: class, its update's resolved impl, lr, site."""
        from perflab.instruments.optim import resolved_impl
        out = []
        for opt, site in self._opt_built:
            try:
                impl = resolved_impl(opt)
            except Exception:  # an optimizer without torch's defaults: said, not guessed
                impl = "unknown"
            lr = opt.param_groups[0].get("lr") if opt.param_groups else None
            out.append({"class": type(opt).__name__, "impl": impl, "site": site,
                        "lr": float(lr) if isinstance(lr, (int, float)) else None})
        return out

    def flush(self) -> None:
        from perflab.core import io

        self._last_flush = _clock()
        if self.cuda:  # between steps: only what the device has finished
            self._resolve(block=False)
            self._device_times()
        io.atomic_write_json(self.out, self.evidence())


def measure_ceilings(cuda: bool, dtype: torch.dtype = torch.float32) -> dict[str, float]:
    """This device's matmul ceiling (FLOP/s, ``dtype``) and memory bandwidth (B/s), measured
    as R01 does (perflab.instruments.roofline), small and quick: after the script, for its counted work."""
    from perflab.instruments import roofline, timing

    device = torch.device("cuda" if cuda else "cpu")
    sync = timing.synchronizer(device)
    n = 4096 if cuda else 512
    mm = roofline.matmul_op(n, dtype, device)
    mm_ms, _ = roofline.per_call_ms(mm, target_ms=20, repeats=5, sync=sync)
    copy, nbytes = roofline.copy_op("device_to_device" if cuda else "host_memcpy",
                                    256 << 20 if cuda else 64 << 20, device)
    copy_ms, _ = roofline.per_call_ms(copy, target_ms=20, repeats=5, sync=sync)
    return {"peak_flops": 2 * n ** 3 / (min(mm_ms) / 1e3), "bandwidth": nbytes / (min(copy_ms) / 1e3),
            "dtype": str(dtype).removeprefix("torch."), "matmul_n": n}


def roofline_fractions(obs: Observer) -> dict[str, float]:
    """R01's fractions (perflab.instruments.roofline.fractions) of the counted step: its forward + loss +
    backward work over those phases' mean time in the observed steps, against the ceilings.
    Computed here, where torch is loaded (the parent judges without importing it)."""
    from perflab.instruments import roofline

    rows = [r["phases_ms"] for r in obs.steps if r["kind"] == "observed" and r["phases_ms"]]
    ms = sum(sum(p.get(x, 0.0) for x in ("forward", "loss", "backward")) for p in rows)
    if not rows or not ms or "peak_flops" not in obs.ceilings:
        return {}
    w = obs.work
    return roofline.fractions(roofline.Work(w["flops"], w["bytes"], w["ops"]), ms / len(rows),
                              obs.ceilings["peak_flops"], obs.ceilings["bandwidth"])
