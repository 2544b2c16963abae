"""W01's interventions: what each changes, where it applies, and how its step is checked.

Each :class:`Intervention` is one change to the loop's :class:`perflab.experiments.w01_whatif.transforms.Recipe`
(the workload's step as given), with the phases of the step whose time it can remove (the
bound the localization predicts, read from E05/E13/R01 by the W01 module), the tolerance
its one-step check is held to, and the test of whether it applies. :func:`probe` reads the
facts those tests need from the workload itself (optimizer, loader, memory by kind) on the
device of the run; :func:`plan` says, for every intervention, "" (it applies) or why not.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perflab.core.names import STEP_LATENCY

if TYPE_CHECKING:
    import torch
    from torch import nn

@dataclass
class Parts:
    """One built variant (perflab.experiments.w01_whatif.transforms builds it): its step, and
    what the one-step check and the rows read."""

    run: Callable[[Any], Any]  # one training step of the loop on a batch; returns its loss
    next_batch: Callable[[], Any]  # the next batch of its stream
    model: nn.Module  # what the step calls (compiled or wrapped)
    params: list[nn.Parameter]  # the parameters it trains (the check's)
    optimizer: torch.optim.Optimizer | None  # None: the workload's own step has none
    examples: int  # examples per step
    notes: list[str] = field(default_factory=list)  # what was done to build it

    def step(self) -> Any:
        """One step of the loop on its next batch."""
        return self.run(self.next_batch())


#: what an A/B of W01 times: ms per step, or (for a larger batch) ms per example
LATENCY_PER_EXAMPLE = "latency_per_example"
MiB = 2 ** 20


# ------------------------------------------------------------------ the loop's recipe

OPTIMIZER_IMPLS = ("as_given", "fused", "foreach")
PRECISIONS = ("fp32", "fp16", "bf16")  # the keys of perflab.instruments.interventions.AMP_DTYPES
COMPILE_MODES = ("", "default", "reduce-overhead")


@dataclass(frozen=True)
class Recipe:
    """How the loop runs the workload's step; the defaults are the step as given."""

    optimizer: str = "as_given"  # OPTIMIZER_IMPLS
    precision: str = "fp32"  # autocast dtype of the forward and loss (PRECISIONS)
    compile_mode: str = ""  # "" eager; else torch.compile's mode (COMPILE_MODES)
    batch_factor: int = 1  # the batch is this many copies of the workload's batch
    checkpoint: bool = False  # recompute each block's activations in backward
    loader_workers: int | None = None  # None: the loader as given
    pin_memory: bool = False  # pinned host batches and non_blocking copies
    read_every: int = 1  # the loop reads the loss on the host every N steps (0: never)
    accumulate: bool = False  # ... as a device-side running sum, read every read_every
    dynamic: bool = False  # the step's own torch.compile calls made dynamic=True

    def __post_init__(self):
        for name, value, allowed in (("optimizer", self.optimizer, OPTIMIZER_IMPLS),
                                     ("precision", self.precision, PRECISIONS),
                                     ("compile_mode", self.compile_mode, COMPILE_MODES)):
            if value not in allowed:
                raise ValueError(f"recipe {name} {value!r}: one of {', '.join(map(repr, allowed))}")
        if self.batch_factor < 1 or self.read_every < 0:
            raise ValueError("recipe batch_factor must be >= 1 and read_every >= 0")

    def changed(self, **kw: Any) -> Recipe:
        return replace(self, **kw)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------ the one-step check


@dataclass(frozen=True)
class Tolerance:
    """How far one step of the intervention may land from the baseline's, relative to it."""

    name: str
    loss_rel: float  # |loss_b - loss_a| / |loss_a|
    grad_rel: float  # ||g_b - g_a|| / ||g_a|| over every gradient
    update_rel: float | None  # ||u_b - u_a|| / ||u_a|| of the parameter change (None: unchecked)
    why: str
    #: the update is checked only while the gradient difference is within this (the fp32
    #: gradient limit a TF32-aware tolerance widened); None: always, where update_rel is set
    update_while_grad: float | None = None

    def describe(self) -> str:
        upd = "unchecked" if self.update_rel is None else f"<= {self.update_rel:g}"
        if self.update_rel is not None and self.update_while_grad is not None:
            upd += (f" while the gradient rel is <= {self.update_while_grad:g} (its fp32 "
                    "limit), else unchecked")
        return (f"{self.name}: loss rel <= {self.loss_rel:g}, gradient rel <= {self.grad_rel:g}, "
                f"update rel {upd} ({self.why})")

    def limits(self, grad_rel_diff: float) -> dict[str, float | None]:
        """Each check number's limit for a step whose gradient differs by ``grad_rel_diff``
        (None: that number is not checked)."""
        update = self.update_rel
        if self.update_while_grad is not None and not grad_rel_diff <= self.update_while_grad:
            update = None
        return {"loss_rel_diff": self.loss_rel, "grad_rel_diff": self.grad_rel,
                "update_rel_diff": update}


TOLERANCES = {t.name: t for t in (
    Tolerance("same arithmetic", 1e-5, 1e-4, 1e-3,
              "the same operations, at most reordered sums"),
    Tolerance("reordered", 1e-4, 1e-3, 1e-2, "fused or re-blocked kernels round differently"),
    # one Adam step moves each parameter by about lr * sign(g): a gradient near 0 whose sign
    # flips in reduced precision moves its parameter the other way, so the update is not
    # comparable element by element; the gradient is
    Tolerance("reduced precision", 2e-2, 1e-1, None,
              "autocast rounds matmul inputs to 8 (bf16) or 11 (fp16) mantissa bits"),
)}


@dataclass
class StepState:
    """What the first step from the initial state left: its loss, gradients and update."""

    loss: float
    grads: list  # each parameter's gradient (a host tensor), None where it got none
    update: list  # each parameter's change over the step (host tensors)


def _rel(a: list, b: list) -> float:
    num = math.sqrt(sum(float((u - v).square().sum()) for u, v in zip(a, b)))
    den = math.sqrt(sum(float(u.square().sum()) for u in a))
    return num / den if den else (0.0 if num == 0 else math.inf)


def differences(a: StepState, b: StepState) -> dict[str, Any]:
    """How far ``b``'s step lands from ``a``'s: loss, gradients and update, each relative to
    ``a``, and the parameters with a gradient on one side only."""
    pairs = [(ga, gb) for ga, gb in zip(a.grads, b.grads) if ga is not None or gb is not None]
    grads = [(ga, gb) for ga, gb in pairs if ga is not None and gb is not None]
    return {
        "loss_rel_diff": abs(b.loss - a.loss) / abs(a.loss) if a.loss else abs(b.loss),
        "grad_rel_diff": _rel([g for g, _ in grads], [g for _, g in grads]) if grads else 0.0,
        "update_rel_diff": _rel(a.update, b.update),
        "grads_missing": len(pairs) - len(grads),
    }


#: the check's verdicts: inside every limit; outside one; or the baseline is not repeatable
#: enough (from the same state, batch and RNG state) for its limits to tell either
OK, MISMATCH, NOT_DECIDABLE = "ok", "MISMATCH", "not decidable"
#: the check decides only where the baseline, run twice from the same state, batch and RNG
#: state, lands within this share of each limit of itself: a limit is then ten times what
#: the step's own non-determinism can move it, and a difference past it is the change's
SELF_SHARE = 0.1


def agreement(a: StepState, b: StepState, tol: Tolerance,
              control: StepState | None = None, *,
              other_generator: bool = False, reseeded: StepState | None = None) -> dict:
    """The check's numbers, the limits applied (``limits``; None: that number unchecked,
    listed in ``unchecked``) and its ``verdict`` (OK, MISMATCH, NOT_DECIDABLE, ``why``);
    ``passes`` is the verdict OK.

    ``control``: the baseline's first step once more, from the same state, batch and RNG
    state as ``a``. Without it, or where it lands further from ``a`` than SELF_SHARE of a
    limit, the check is not decidable: its limits could not tell a changed step from the
    baseline's own spread, and no limit is widened to cover that spread. ``reseeded``: the
    baseline's step from another seed; where it moves the step (the step draws random
    numbers) and the intervention draws them from ``other_generator`` (a compiled step:
    Inductor's, not eager's), the same seed gives other numbers: not decidable either.
    A parameter with a gradient on one side and none on the other is a MISMATCH.
    """
    out = differences(a, b)
    out["limits"] = tol.limits(out["grad_rel_diff"])
    out["unchecked"] = [k for k, lim in out["limits"].items() if lim is None]
    checked = {k: lim for k, lim in out["limits"].items() if lim is not None}
    out["self"] = None if control is None else differences(a, control)
    out["verdict"], out["why"] = _verdict(out, checked, other_generator, a, reseeded)
    out["passes"] = out["verdict"] == OK
    return out


def _verdict(out: dict, checked: dict, other_generator: bool, a: StepState,
             reseeded: StepState | None) -> tuple[str, str]:
    own = out["self"]
    if own is None:
        return NOT_DECIDABLE, "the baseline was not run twice: its own spread is unknown"
    if own["grads_missing"]:
        return NOT_DECIDABLE, (f"the baseline run twice gave {own['grads_missing']} "
                               "parameter(s) a gradient once only")
    loose = {k: own[k] for k, lim in checked.items()
             if not (math.isfinite(own[k]) and own[k] <= SELF_SHARE * lim)}
    if loose:
        return NOT_DECIDABLE, ("the baseline differs from itself by " + ", ".join(
            f"{k.removesuffix('_rel_diff')} {v:.2g} (limit {checked[k]:g})"
            for k, v in loose.items()) + f", over {SELF_SHARE:g} x the limit: from the same "
            "state, batch and RNG state its step is not repeatable enough to judge")
    if other_generator and reseeded is not None:
        moved = differences(a, reseeded)["grad_rel_diff"]
        if moved > own["grad_rel_diff"]:
            return NOT_DECIDABLE, (f"the step draws random numbers (another seed moves its "
                                   f"gradient by {moved:.2g}) and the intervention draws them "
                                   "from another generator (a compiled step: Inductor's), so "
                                   "the same seed gives it other numbers")
    bad = [k for k, lim in checked.items() if not (math.isfinite(out[k]) and out[k] <= lim)]
    if out["grads_missing"]:
        bad.append(f"{out['grads_missing']} parameter(s) with a gradient on one side only")
    if bad:
        return MISMATCH, "outside its limit: " + ", ".join(b.removesuffix("_rel_diff")
                                                             for b in bad)
    return OK, ""


# ------------------------------------------------------------------ TF32 on CUDA

#: K: how many times the baseline's own TF32 rounding an intervention's step may differ by.
#: The scale is one TF32 step against strict fp32, so about one step's TF32 error. Two
#: steps that both round in TF32, through other kernels (compiled, another cuDNN algorithm
#: for another batch), are each about that far from the exact step and so up to twice it
#: from each other (sqrt 2 when their errors are independent); and the one measured error
#: is one draw of an error whose size varies with the kernel: a factor 2 for that. 4 = 2 x 2.
#: A real fault (another learning rate, a lost term) moves loss or gradients by far more.
TF32_FACTOR = 4.0
#: the fp32 tolerances TF32 rounding can exceed; autocast's reduced precision is coarser
TF32_AWARE = ("same arithmetic", "reordered")


def _may(read: Callable[[], Any]) -> bool:
    try:
        return bool(read())
    except RuntimeError:
        # torch >= 2.9 refuses its legacy getters once its per-backend fp32_precision API
        # was mixed in: TF32 may run; the measured scale says how much it changes
        return True


def tf32_modes(device_type: str) -> tuple[str, ...]:
    """Which float32 operations may run TF32 (10-bit mantissa inputs) on this device now:
    "convolutions" (cuDNN; ``torch.backends.cudnn.allow_tf32``, on by default), "matmuls"
    (cuBLAS; ``torch.backends.cuda.matmul.allow_tf32``, or a float32 matmul precision other
    than "highest"). () on a CPU."""
    if device_type != "cuda":
        return ()
    import torch

    conv = _may(lambda: torch.backends.cudnn.allow_tf32)
    mm = _may(lambda: torch.backends.cuda.matmul.allow_tf32
              or torch.get_float32_matmul_precision() != "highest")
    return tuple(m for m, on in (("convolutions", conv), ("matmuls", mm)) if on)


#: torch's per-operation float32 precisions (torch >= 2.9) that its legacy TF32 setters rewrite
PER_OP_PRECISIONS = ("cuda.matmul", "mkldnn.matmul", "cudnn.conv", "cudnn.rnn")


def _per_op(backends: Any) -> list:
    found = []
    for path in PER_OP_PRECISIONS:
        obj = backends
        for part in path.split("."):
            obj = getattr(obj, part, None)
        if hasattr(obj, "fp32_precision"):
            found.append(obj)
    return found


@contextmanager
def strict_fp32() -> Iterator[None]:
    """TF32 off for cuDNN convolutions and cuBLAS matmuls inside; every flag as it was after.

    Through torch's legacy flags (every torch perflab takes), or where those cannot be read
    (torch's per-operation ``fp32_precision`` was mixed in), through that API; the
    per-operation settings the legacy setters rewrite are put back as they were too.
    """
    import torch

    b = torch.backends
    ops = _per_op(b)
    per_op = [o.fp32_precision for o in ops]
    try:
        legacy = (b.cudnn.allow_tf32, torch.get_float32_matmul_precision())
    except RuntimeError:
        legacy = None
    if legacy is None:
        b.cudnn.conv.fp32_precision = b.cuda.matmul.fp32_precision = "ieee"
    else:
        b.cudnn.allow_tf32 = False
        torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        if legacy is not None:
            torch.set_float32_matmul_precision(legacy[1])
            b.cudnn.allow_tf32 = legacy[0]
        for o, v in zip(ops, per_op):
            o.fp32_precision = v


@dataclass(frozen=True)
class Tf32Scale:
    """The baseline's own TF32 rounding: its first step as run against the same step from the
    same state in strict fp32, relative to the strict one (None where not measured: ``why``)."""

    modes: tuple[str, ...]  # what may run TF32 (tf32_modes)
    loss_rel: float | None = None
    grad_rel: float | None = None
    why: str = ""

    @property
    def measured(self) -> bool:
        return all(v is not None and math.isfinite(v) for v in (self.loss_rel, self.grad_rel))


def tf32_scale(strict: StepState, as_run: StepState, modes: tuple[str, ...]) -> Tf32Scale:
    """The scale from the two first steps (``strict``: TF32 off; ``as_run``: the baseline's)."""
    d = differences(strict, as_run)
    if d["grads_missing"]:
        return Tf32Scale(modes, why=f"{d['grads_missing']} parameter(s) got a gradient in one "
                                    "of the two steps only")
    return Tf32Scale(modes, d["loss_rel_diff"], d["grad_rel_diff"])


#: the most TF32 rounding can move one step, relative: TF32 keeps 10 mantissa bits (unit
#: roundoff 2^-11), bfloat16 7 (2^-8), so a TF32 step is 8 times closer to strict fp32 than a
#: bf16-autocast one: the reduced-precision limits over 8. A scale past this is not TF32's
TF32_CAP = {"loss_rel": 2e-2 / 8, "grad_rel": 1e-1 / 8}


def tf32_aware(tol: Tolerance, scale: Tf32Scale | None,
               own: Mapping[str, Any] | None = None) -> Tolerance:
    """``tol`` as it holds where the baseline's step was seen to round in TF32.

    ``tol`` itself on a CPU or with TF32 off (``scale`` None or without modes), and for
    reduced precision (coarser than TF32; its update is unchecked already). TF32 is observed,
    not inferred from its flags: where the strict-fp32 step lands no further from the step as
    run than the baseline from itself (``own``: :func:`differences` of the baseline run
    twice), TF32 changed nothing and the fp32 limits hold. Where observed, for same arithmetic
    and reordered: loss and gradient each within max(the fp32 limit, min(TF32_FACTOR x the
    scale, TF32_CAP)); the update at its fp32 limit while the gradient is within its fp32
    limit (then Adam's update, about lr * sign(g), is as comparable as in fp32), else
    unchecked: a gradient near 0 whose sign TF32 rounding flips moves its parameter the other
    way. A scale not measured leaves the fp32 limits (never looser), saying so.
    """
    if scale is None or not scale.modes or tol.name not in TF32_AWARE:
        return tol
    where = " and ".join(scale.modes)
    if not scale.measured:
        return replace(tol, why=f"{tol.why}; TF32 may run ({where}) but its rounding was not "
                                f"measured ({scale.why}): the fp32 limits")
    if own is not None and (scale.loss_rel <= own["loss_rel_diff"]
                            and scale.grad_rel <= own["grad_rel_diff"]):
        return replace(tol, why=f"{tol.why}; TF32 allowed ({where}) but not observed: strict "
                                "fp32 lands no further from the step than the baseline from "
                                "itself: the fp32 limits")
    k = TF32_FACTOR
    loss = max(tol.loss_rel, min(k * scale.loss_rel, TF32_CAP["loss_rel"]))
    grad = max(tol.grad_rel, min(k * scale.grad_rel, TF32_CAP["grad_rel"]))
    capped = (k * scale.loss_rel > TF32_CAP["loss_rel"]
              or k * scale.grad_rel > TF32_CAP["grad_rel"])
    return Tolerance(
        f"{tol.name}, TF32-aware", loss, grad, tol.update_rel,
        f"{tol.why}; TF32 observed ({where}): the loss and gradient limits are the larger of "
        f"the fp32 limit ({tol.loss_rel:g}, {tol.grad_rel:g}) and {k:g} x the baseline's own "
        f"TF32 rounding, strict fp32 vs as run: loss {scale.loss_rel:.2g}, gradient "
        f"{scale.grad_rel:.2g}" + (", capped at what TF32 rounding can do "
                                    f"({TF32_CAP['loss_rel']:g}, {TF32_CAP['grad_rel']:g})"
                                    if capped else ""),
        update_while_grad=tol.grad_rel)


# ------------------------------------------------------------------ what a workload offers


@dataclass
class Probe:
    """The facts the applicability tests read, from one build of the workload on the device."""

    device_type: str
    dtype: str
    has_optimizer: bool  # make_optimizer given
    has_step: bool = True  # an optimizer, or the workload's own train_step
    own_step: bool = False  # the workload brings its own train_step
    has_make_batch: bool = True
    reads_inside: bool = False  # its step returns a number: it read the loss itself
    optimizer: str = ""  # its class name
    impl: str = ""  # fused, foreach or forloop (torch's default resolved)
    cannot: dict[str, str] = field(default_factory=dict)  # "fused"/"foreach"/"checkpoint" -> why
    has_loader: bool = False
    loader_workers: int = 0
    loader_pinned: bool = False
    activation_mib: float | None = None  # saved for backward by one forward + loss
    persistent_mib: float | None = None  # parameters + gradients + optimizer state
    read_every: int = 1  # the loop's host read of the loss, every N steps (0: none)
    log_every: int = 50  # the device accumulator's read interval
    workers: int = 1  # the loader workers the intervention would use
    bf16: bool = True  # the device runs bfloat16
    sync_sites: tuple[str, ...] = ()
    #: what torch.compile did over the probe's steps (perflab.instruments.compiler_watch):
    #: graphs compiled, recompiles, a frame at the recompile limit, the cause in user's terms
    compiled_graphs: int = 0
    recompiles: int = 0
    eager_fallback: bool = False
    recompile_cause: str = ""
    probe_steps: int = 0


def sync_sites(w: Any) -> tuple[str, ...]:
    """Where the workload's own step synchronizes the host with the device.

    The hook for the sync detection of issue 16 (item 3): today perflab assembles the
    step itself and it reads nothing back, so there is none; a user's ``train_step``
    that calls ``.item()`` inside will be reported here, and the device accumulator
    cannot move such a read (it moves the loop's read only).
    """
    return ()


# ------------------------------------------------------------------ the interventions


def _no_optimizer(p: Probe) -> str:
    return "" if p.has_optimizer else ("the workload gives no make_optimizer: its optimizer "
                                       "cannot be rebuilt")


def _fused(p: Probe) -> str:
    if _no_optimizer(p):
        return _no_optimizer(p)
    if p.impl == "fused":
        return f"the optimizer ({p.optimizer}) is fused already"
    return p.cannot.get("fused") and f"{p.optimizer} cannot run fused here: {p.cannot['fused']}"


def _foreach(p: Probe) -> str:
    if _no_optimizer(p):
        return _no_optimizer(p)
    if p.impl in ("fused", "foreach"):
        return f"the optimizer ({p.optimizer}) runs {p.impl} already"
    return p.cannot.get("foreach") and f"{p.optimizer} cannot run foreach: {p.cannot['foreach']}"


def _autocast(p: Probe) -> str:
    if p.dtype != "float32":
        return f"the model is {p.dtype} already: autocast changes a float32 model's matmuls"
    return ""


def _bf16(p: Probe) -> str:
    if not p.bf16:
        return "this CUDA device has no bfloat16 support"
    return _autocast(p)


def _loader(p: Probe) -> str:
    if not p.has_loader:
        return ("the workload gives no loader: its batch is resident on the device, so there "
                "is no input wait to hide")
    return p.cannot.get("loader", "")


def _workers(p: Probe) -> str:
    if _loader(p):
        return _loader(p)
    return (f"the loader has {p.loader_workers} workers already (>= {p.workers})"
            if p.loader_workers >= p.workers else "")


def _pinned(p: Probe) -> str:
    return _loader(p) or ("the loader pins its batches already" if p.loader_pinned else "")


def _accumulator(p: Probe) -> str:
    if p.reads_inside:
        return ("the workload's train_step returns a number: it reads the loss on the host "
                "itself, inside the step, where perflab cannot move the read")
    if p.read_every == 0:
        return "the loop reads nothing on the host (read_every: 0): no sync to move"
    if p.read_every >= p.log_every:
        return f"the loop reads the loss every {p.read_every} steps already"
    return ""


#: why fp16 with a GradScaler cannot be applied to a workload's own train_step
OWN_STEP_FP16 = ("the workload's own train_step does its backward itself: a GradScaler cannot "
                 "be put inside it from outside (its step must scale the loss)")


def _fp16(p: Probe) -> str:
    return OWN_STEP_FP16 if p.own_step else _autocast(p)


def _larger_batch(p: Probe) -> str:
    if p.has_loader:
        return "the workload's loader sets the batch (its batch_size): rebuild it larger yourself"
    return "" if p.has_make_batch else "the workload gives no make_batch to draw a larger batch"


def _checkpointing(p: Probe) -> str:
    if p.cannot.get("checkpoint"):
        return p.cannot["checkpoint"]
    if p.activation_mib is not None and p.activation_mib < (p.persistent_mib or 0.0):
        share = p.activation_mib / (p.activation_mib + p.persistent_mib)
        return (f"activations do not set the peak: {p.activation_mib:.3g} MiB saved for "
                f"backward against {p.persistent_mib:.3g} MiB of parameters, gradients and "
                f"optimizer state, so checkpointing can save at most {100 * share:.0f}% of it")
    return ""


def _dynamic(p: Probe) -> str:
    """compile_dynamic applies where the workload's own step compiles and recompiles because
    a dimension's size changes (the compiler candidate's cause): the fix it names."""
    if not p.compiled_graphs:
        return (f"the workload's step is not compiled (no graph in {p.probe_steps} probe "
                "steps): no torch.compile of its own to make dynamic")
    if not (p.recompiles or p.eager_fallback):
        return (f"the step compiled and did not recompile over {p.probe_steps} probe steps: "
                "nothing for dynamic=True to remove")
    if "changed:" not in p.recompile_cause:  # compiler_watch's size causes say "... changed: a, b"
        cause = p.recompile_cause or "reason unknown"
        return (f"it recompiles, but not on a changing size ({cause}): dynamic=True does not "
                "fix that")
    return ""


@dataclass(frozen=True)
class Intervention:
    """One change to the loop's recipe; where it applies; what bounds its gain."""

    name: str
    title: str
    change: Mapping[str, Any]  # Recipe fields it sets
    tolerance: str  # a key of TOLERANCES
    touches: tuple[str, ...] = ()  # the phases (perflab.instruments.steps.PHASES) whose time it can remove
    bound: str = "phases"  # phases (E05 shares), sync_tax (E13), roofline (R01), memory
    judged: str = STEP_LATENCY
    applies: Callable[[Probe], str] = lambda p: ""
    #: why it needs a CUDA device ("" when it does not)
    cuda_only: str = ""
    #: a change no recipe field expresses, applied to the built parts (in this process only:
    #: such an intervention's peak memory is not measured in a process of its own)
    custom: Callable[[Parts], Parts] | None = None

    def recipe(self, base: Recipe) -> Recipe:
        return base.changed(**self.change)


FWD_BWD = ("forward", "loss", "backward")

REGISTRY: dict[str, Intervention] = {i.name: i for i in (
    Intervention("fused_optimizer", "fused optimizer (fused=True: one kernel per step)",
                 {"optimizer": "fused"}, "same arithmetic", ("optimizer",), applies=_fused),
    Intervention("foreach_optimizer", "foreach optimizer (one kernel per operation for all "
                 "parameters)", {"optimizer": "foreach"}, "same arithmetic", ("optimizer",),
                 applies=_foreach),
    Intervention("autocast_bf16", "bf16 autocast of forward and loss",
                 {"precision": "bf16"}, "reduced precision", FWD_BWD, applies=_bf16),
    Intervention("autocast_fp16", "fp16 autocast with a GradScaler", {"precision": "fp16"},
                 "reduced precision", FWD_BWD, applies=_fp16,
                 cuda_only="fp16 autocast with a GradScaler is a CUDA contract (a CPU has no "
                           "fast fp16 matmul)"),
    Intervention("compile_default", "torch.compile(model)", {"compile_mode": "default"},
                 "reordered", FWD_BWD),
    Intervention("compile_reduce_overhead", "torch.compile(model, mode='reduce-overhead'): "
                 "CUDA graphs", {"compile_mode": "reduce-overhead"}, "reordered", FWD_BWD,
                 cuda_only="reduce-overhead replays CUDA graphs (on a CPU it is "
                           "compile_default)"),
    Intervention("compile_dynamic", "torch.compile(dynamic=True) in place of the step's "
                 "own compile: one graph for every size of the changing dimension",
                 {"dynamic": True}, "reordered", FWD_BWD, applies=_dynamic),
    Intervention("loader_workers", "DataLoader workers", {"loader_workers": -1},
                 "same arithmetic", ("input_wait",), applies=_workers),
    Intervention("loader_pinned", "pin_memory=True and non_blocking copies",
                 {"pin_memory": True}, "same arithmetic", ("input_wait", "host_to_device"),
                 applies=_pinned,
                 cuda_only="pinned memory speeds host-to-device copies; a CPU copies nothing"),
    Intervention("device_accumulator", "the loss summed on the device, read every log_every "
                 "steps", {"accumulate": True, "read_every": -1}, "same arithmetic",
                 ("logging",), bound="sync_tax", applies=_accumulator),
    Intervention("larger_batch", "a larger batch (batch_factor x the batch)",
                 {"batch_factor": -1}, "reordered", bound="roofline",
                 judged=LATENCY_PER_EXAMPLE, applies=_larger_batch),
    Intervention("activation_checkpointing", "activation checkpointing of the model's blocks",
                 {"checkpoint": True}, "same arithmetic", bound="memory",
                 applies=_checkpointing),
)}
NAMES = tuple(REGISTRY)


def loader_workers(params: Mapping[str, Any], threads: int) -> int:
    """The workers a rebuilt loader gets: W01's ``loader_workers``, 0 meaning the job's
    ``threads`` (its cores)."""
    return int(params.get("loader_workers") or max(1, threads))


def resolve_recipe(iv: Intervention, base: Recipe, params: Mapping[str, Any],
                   threads: int = 1) -> Recipe:
    """The intervention's recipe, its -1 fields filled from the contract (W01's params)."""
    fill = {"loader_workers": loader_workers(params, threads),
            "read_every": int(params.get("log_every", 50)),
            "batch_factor": int(params.get("batch_factor", 2))}
    change = {k: (fill[k] if v == -1 else v) for k, v in iv.change.items()}
    return base.changed(**change)


def baseline_recipe(params: Mapping[str, Any]) -> Recipe:
    """The loop as the workload gives it: its host read of the loss every ``read_every`` steps."""
    return Recipe(read_every=int(params.get("read_every", 1)))


def plan(p: Probe, names: Iterable[str] = NAMES) -> dict[str, str]:
    """For each intervention: "" when it applies to the probed workload, else why not."""
    out = {}
    for name in names:
        out[name] = (device_reasons(p.device_type).get(name)
                     or ("no training step: the workload has no optimizer"
                         if not p.has_step else REGISTRY[name].applies(p) or ""))
    return out


def device_reasons(device_type: str) -> dict[str, str]:
    """The interventions that cannot apply on a device of this type, whatever the workload."""
    if device_type == "cuda":
        return {}
    return {n: f"{iv.cuda_only}: this run's device is a {device_type.upper()}"
            for n, iv in REGISTRY.items() if iv.cuda_only}


def selected(requested: str | Iterable[str]) -> list[str]:
    """The names of ``requested`` ("all" or names), each known; a ValueError names a bad one."""
    names = list(NAMES) if requested == "all" else list(requested)
    for n in names:
        if n not in REGISTRY:
            raise ValueError(f"unknown intervention {n!r}; valid: {', '.join(NAMES)}")
    return names


# ------------------------------------------------------------------ W01's jobs

EID = "W01"
SLUG = "w01_whatif"
PLAN = "plan"
#: the results W01's table reads beside its own: C00's A/A floor, the localization's bounds
CONTEXT = ("C00", "E05", "E13", "R01")


def job_outputs(result_dir: str | Path, job: str) -> dict[str, str]:
    """csv, samples and provenance of one W01 job (``plan`` or an intervention; ``"{x}"``
    for a Snakemake wildcard), and the plan's list of interventions that apply."""
    d = Path(result_dir) / SLUG
    out = {"csv": str(d / f"{job}.csv"), "samples": str(d / f"{job}_samples.csv"),
           "provenance": str(d / f"{job}.json")}
    if job == PLAN:
        out["applies"] = str(d / "applies.json")
    return out


def intervention_contract(contract: Mapping[str, Any], name: str) -> dict:
    """One intervention's contract: W01's, with ``intervention`` in place of the list (so
    adding an intervention to the list does not rerun those already measured)."""
    c = copy.deepcopy(dict(contract))
    params = {k: v for k, v in c.get("params", {}).items() if k != "interventions"}
    params["intervention"] = name
    c["params"] = params
    return c
