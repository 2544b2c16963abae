"""The step W01 times, built from a workload and a :class:`Recipe`: each field one change.

A :class:`Recipe` holds the knobs of a training loop that perflab can turn without editing
the user's code: how the optimizer runs (as given, fused, foreach), autocast (bf16, fp16
with a GradScaler), ``torch.compile`` (default, ``reduce-overhead``), the batch size,
activation checkpointing of the model's blocks, the loader (workers, pinned memory with
``non_blocking`` copies) and how the loop reads the loss on the host (every N steps, or
accumulated on the device and read every N). :func:`build` turns a workload and a recipe
into :class:`Parts`: the step callable and what the one-step check reads.

Each transform changes the step every experiment times (:class:`perflab.instruments.steps.Step`: the
workload's ``train_step`` fed from its ``loader``, or the chapter's on ``make_batch``'s
batch). Where the workload brings its own opaque ``train_step(model, optimizer, batch)``,
the transforms that reach it from outside still apply: the optimizer factory
(fused/foreach), the model it is handed (compiled, checkpointed), autocast around the call,
the loader it is fed (workers, pinning). Two do not: a GradScaler cannot be put inside
someone else's backward (fp16 then needs the step's own scaling), and a host read inside
the step (a ``.item()``, or a step that returns a number) cannot be moved from outside —
the device-side accumulator moves the loop's read only; where the step syncs inside is
what :func:`perflab.experiments.w01_whatif.whatif.sync_sites` will report.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Mapping
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from perflab.experiments.w01_whatif import whatif
from perflab.experiments.w01_whatif.whatif import Parts, Probe, Recipe, StepState  # noqa: F401 (Parts: re-exported)
from perflab.instruments import compiler_watch, interventions, memory, steps, workloads
from perflab.instruments.optim import resolved_impl  # noqa: F401 (re-exported)
from perflab.instruments.phases import read_loss

Tensor = torch.Tensor

# ------------------------------------------------------------------ the optimizer


def optimizer_with(opt: torch.optim.Optimizer, impl: str) -> torch.optim.Optimizer:
    """The same optimizer class over the same parameter groups, with ``fused`` or ``foreach``.

    Built fresh (no state yet), every hyperparameter of every group kept; for a
    torch.optim class, whose constructor takes ``fused=`` / ``foreach=``. A class that
    does not take the flag raises TypeError, one that cannot run fused here RuntimeError.
    """
    if impl == "as_given":
        return opt
    groups = [{k: v for k, v in g.items() if k not in ("fused", "foreach")}
              for g in opt.param_groups]
    flag = {"fused": True, "foreach": False} if impl == "fused" else {"foreach": True}
    return type(opt)(groups, **flag)


# ------------------------------------------------------------------ the model


class Recompute(nn.Module):
    """A block whose activations are dropped after the forward and recomputed in backward."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args, **kwargs):  # a library's block takes keywords (attention masks)
        return checkpoint(self.inner, *args, use_reentrant=False, **kwargs)


def checkpoint_blocks(model: nn.Module) -> tuple[nn.Module, str]:
    """(the model with each block recomputed in backward, what was wrapped).

    The chapter's MLP is wrapped per (Linear, GELU) block as E16 does
    (:class:`perflab.instruments.interventions.Checkpointed`); any other model's blocks are the
    children of its outermost ``nn.Sequential`` or ``nn.ModuleList`` holding two or more
    with parameters, each wrapped in place (the model is the caller's own copy). Raises
    :class:`perflab.instruments.workloads.NotApplicable` without such blocks, or when a block
    holds BatchNorm in training mode (its recompute would update the running statistics
    twice).
    """
    if isinstance(model, workloads.MLP):
        return interventions.Checkpointed(model), "each (Linear, GELU) block of the MLP"
    own = _own_checkpointing(model)
    if own:
        return model, own
    containers = [(name, m) for name, m in model.named_modules()
                  if isinstance(m, (nn.Sequential, nn.ModuleList))
                  and sum(1 for c in m if any(True for _ in c.parameters())) >= 2]
    if not containers:
        raise workloads.NotApplicable(
            f"{type(model).__name__} has no nn.Sequential or nn.ModuleList of two or more "
            "blocks with parameters to checkpoint")
    # the outermost such container: a model's blocks, not the layers inside one block
    name, blocks = min(containers, key=lambda nm: (nm[0].count(".") + bool(nm[0]), -len(nm[1])))
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) and m.training
           for m in blocks.modules()):
        raise workloads.NotApplicable(
            f"the blocks of {name or 'the model'} hold BatchNorm in training mode: "
            "recomputing them in backward would update its running statistics twice")
    for i, child in enumerate(list(blocks)):
        blocks[i] = Recompute(child)
    return model, f"each of the {len(blocks)} children of {name or 'the model'}"


def _own_checkpointing(model: nn.Module) -> str | None:
    """Turn on the model's library's own activation checkpointing where it has one, as its
    user would, and say which; None where it has none. A Hugging Face model's blocks take a
    key-value cache that a recompute would extend twice (its own switch turns the cache off
    in training); timm's blocks are its own to choose."""
    if getattr(model, "supports_gradient_checkpointing", True):
        # transformers 5 names it activation_checkpointing_enable (the older name warns)
        for name, keyword in (("activation_checkpointing_enable", "activation_checkpointing_kwargs"),
                              ("gradient_checkpointing_enable", "gradient_checkpointing_kwargs")):
            hf = getattr(model, name, None)
            if not callable(hf):
                continue
            try:
                hf(**{keyword: {"use_reentrant": False}})
            except TypeError:  # a transformers from before the keyword
                hf()
            return f"the model's own activation checkpointing ({name})"
    timm = getattr(model, "set_grad_checkpointing", None)
    if callable(timm):
        timm(True)
        return "the model's own activation checkpointing (set_grad_checkpointing)"
    return None


def compiled(model: nn.Module, mode: str) -> nn.Module:
    """``torch.compile(model)`` in ``mode`` ("default" or "reduce-overhead"); lazy: the
    first call compiles (forward and, through AOTAutograd, backward; the optimizer stays eager)."""
    return torch.compile(model, mode=None if mode == "default" else mode)


@contextmanager
def dynamic_compiles():
    """Every ``torch.compile`` called inside compiles with ``dynamic=True``: the fix for a
    step that compiles itself with ``dynamic=False`` (or the default's specialization) and
    recompiles on each new size. The step's own call is reached where it is made (a step
    that compiles lazily, on its first call, as most do); Dynamo's BACKEND_MATCH guard keeps
    these graphs apart from the baseline's static ones in the same process."""
    given = torch.compile

    def dynamic(*args, **kwargs):
        kwargs["dynamic"] = True
        return given(*args, **kwargs)

    torch.compile = dynamic
    try:
        yield
    finally:
        torch.compile = given


def with_dynamic_compiles(train_step):
    """``train_step`` with every torch.compile it calls made dynamic (:func:`dynamic_compiles`)."""
    def step(model, opt, batch):
        with dynamic_compiles():
            return train_step(model, opt, batch)

    return step


# ------------------------------------------------------------------ the batches


def rebuilt_loader(loader: Any, workers: int | None, pin_memory: bool):
    """The user's DataLoader with ``workers`` and ``pin_memory``, every other choice kept.

    Same dataset, batch sampler (so the same batches in the same order), collate and
    worker init. Raises NotApplicable for an iterable that is not a DataLoader: perflab
    cannot know how to rebuild it.
    """
    from torch.utils.data import DataLoader

    if not isinstance(loader, DataLoader):
        raise workloads.NotApplicable(
            f"the loader is a {type(loader).__name__}, not a torch DataLoader: perflab cannot "
            "rebuild it with other workers or pinning")
    n = loader.num_workers if workers is None else workers
    extra = {"persistent_workers": True, "prefetch_factor": loader.prefetch_factor or 2} if n else {}
    batch_sampler, generator = _same_order(loader)
    return DataLoader(loader.dataset, batch_sampler=batch_sampler, generator=generator,
                      collate_fn=loader.collate_fn, num_workers=n,
                      pin_memory=pin_memory or loader.pin_memory,
                      worker_init_fn=loader.worker_init_fn, **extra)


def _copied(gen: Any) -> Any:
    if not isinstance(gen, torch.Generator):
        return gen
    out = torch.Generator(device=gen.device)
    out.set_state(gen.get_state())
    return out


def _same_order(loader: Any) -> tuple[Any, Any]:
    """(a copy of the loader's batch sampler, of its generator) whose random streams start
    where the loader's are now, shared as the loader shares them: the rebuilt loader's first
    pass then draws the batches the given loader's next pass will. (A loader that shuffles
    from the global RNG cannot be copied so: the one-step check then sees other batches and
    says so.)"""
    batches = copy.copy(loader.batch_sampler)
    gen = _copied(loader.generator)
    sampler = getattr(loader.batch_sampler, "sampler", None)
    if isinstance(getattr(sampler, "generator", None), torch.Generator):
        batches.sampler = copy.copy(sampler)
        batches.sampler.generator = (gen if sampler.generator is loader.generator
                                     else _copied(sampler.generator))
    return batches, gen


def _batches(w: workloads.Workload, recipe: Recipe, device: torch.device
             ) -> tuple[steps.BatchStream, int]:
    """(the step's batches, examples per step).

    Without a loader the batch is resident, as every experiment's step; a larger batch is
    the workload's batch ``batch_factor`` times over (the same cost as as many fresh
    examples, and the same mean loss and gradient, so the one-step check compares like
    with like). With a loader, each step takes its next batch (rebuilt with workers or
    pinning when the recipe says so).
    """
    if w.loader is None:
        x, y = w.batch_on(device)
        if recipe.batch_factor > 1:
            x = torch.cat([x] * recipe.batch_factor)
            y = torch.cat([y] * recipe.batch_factor) if y is not None else None
        return steps.BatchStream(itertools.repeat((x, y))), int(x.shape[0])
    if recipe.batch_factor > 1:
        raise workloads.NotApplicable("the workload's loader sets the batch (its batch_size): "
                                      "not rebuilt larger here")
    loader = w.loader
    if recipe.loader_workers is not None or recipe.pin_memory:
        loader = rebuilt_loader(loader, recipe.loader_workers, recipe.pin_memory)
    return steps.BatchStream(loader), int(getattr(loader, "batch_size", None) or w.batch_size)


def _train_step(w: workloads.Workload, recipe: Recipe, device: torch.device):
    """The ``train_step(model, optimizer, batch)`` the recipe runs.

    The workload's own step is called as it is, under autocast when the recipe asks for it
    (its backward then runs inside autocast too: perflab cannot split an opaque step); a
    GradScaler cannot be put inside it, so fp16 needs the step's own scaling. Without one,
    the chapter's step (:func:`perflab.instruments.workloads.default_train_step`), or its autocast form.
    """
    if w.train_step is not None:
        if recipe.precision == "fp16":
            raise workloads.NotApplicable(whatif.OWN_STEP_FP16)
        if recipe.precision == "fp32":
            return w.train_step

        def own_under_autocast(model, opt, batch):
            with interventions.autocast(device, recipe.precision):
                return w.train_step(model, opt, batch)

        return own_under_autocast
    if recipe.precision == "fp32":
        return workloads.default_train_step(w, device)
    return interventions.amp_train_step(w, device, recipe.precision)


def _loop_read(recipe: Recipe, device: torch.device) -> Callable[[Any], None]:
    """What the loop does with each step's loss: the host read every N steps, or a device sum."""
    count = itertools.count(1)
    total = torch.zeros((), device=device)

    def read(loss: Any) -> None:
        nonlocal total
        n = next(count)
        if recipe.accumulate:
            total = total + steps.device_loss(loss, device)  # stays on the device: no sync
            if recipe.read_every and n % recipe.read_every == 0:
                float(total)  # one host read per read_every steps
                total = torch.zeros((), device=device)
        elif recipe.read_every and n % recipe.read_every == 0:
            read_loss(loss)  # the host waits for this step's work

    return read


def build(w: workloads.Workload, recipe: Recipe, device: torch.device,
          model: nn.Module | None = None) -> Parts:
    """The loop's step for ``recipe`` on ``model`` (the workload's own by default).

    The step every experiment times (:class:`perflab.instruments.steps.Step`: the workload's
    train_step on the next batch of its loader), with the recipe's changes, then the
    loop's read of the loss. Compiling happens on the first call.
    """
    if w.make_optimizer is None and w.train_step is None:
        raise workloads.NotApplicable(f"workload {w.name!r} has no optimizer: no training step")
    model = model if model is not None else w.model
    params = list(model.parameters())
    notes = []
    opt = (optimizer_with(w.make_optimizer(params), recipe.optimizer)
           if w.make_optimizer is not None else None)
    if recipe.checkpoint:
        model, what = checkpoint_blocks(model)
        notes.append(f"checkpointed {what}")
    run = compiled(model, recipe.compile_mode) if recipe.compile_mode else model
    batches, examples = _batches(w, recipe, device)
    train_step = _train_step(w, recipe, device)
    if recipe.dynamic:
        train_step = with_dynamic_compiles(train_step)
        notes.append("the step's own torch.compile calls made dynamic=True")
    kit = steps.Step(run, opt, train_step, batches, w)
    read = _loop_read(recipe, device)

    def on(batch: Any) -> Any:
        loss = kit.run(batch)
        read(loss)
        return loss

    return Parts(on, kit.next_batch, run, params, opt, examples, notes)


def fresh_copy(model: nn.Module, device: torch.device) -> nn.Module:
    """An independent copy of ``model``'s state on ``device`` (each variant trains its own)."""
    return copy.deepcopy(model).to(device)


# ------------------------------------------------------------------ W01's readings


def capture(parts: Parts, before: list[Tensor], loss: Any) -> StepState:
    """The state after ``parts``' first step (``before``: its parameters before it), on the host."""
    grads = [None if p.grad is None else p.grad.detach().float().cpu() for p in parts.params]
    update = [(p.detach().float().cpu() - b) for p, b in zip(parts.params, before)]
    return StepState(read_loss(loss), grads, update)


def parameters_before(parts: Parts) -> list[Tensor]:
    return [p.detach().float().cpu().clone() for p in parts.params]


def _try(what: Callable[[], Any]) -> str:
    try:
        what()
    except (RuntimeError, TypeError, ValueError, workloads.NotApplicable) as exc:
        return " ".join(f"{type(exc).__name__}: {exc}".split())[:240]
    return ""


#: steps the probe runs on a copy of the model (the first, for the memory; then more, to
#: see whether a compiled step recompiles as its batches change)
PROBE_STEPS = 3


def probe(w: workloads.Workload, device: torch.device, params: Mapping[str, Any]) -> Probe:
    """Run ``w``'s step once (on a copy of its model) and read what applies to it."""
    pr = Probe(device.type, str(w.dtype).removeprefix("torch."),
               w.make_optimizer is not None, has_step=(w.make_optimizer is not None
                                                       or w.train_step is not None),
               own_step=w.train_step is not None, has_make_batch=w.gives("make_batch"),
               read_every=int(params.get("read_every", 1)),
               log_every=int(params.get("log_every", 50)), sync_sites=whatif.sync_sites(w),
               bf16=device.type != "cuda" or torch.cuda.is_bf16_supported())
    pr.has_loader = w.loader is not None
    pr.loader_workers = int(getattr(w.loader, "num_workers", 0) or 0)
    pr.loader_pinned = bool(getattr(w.loader, "pin_memory", False))
    pr.workers = whatif.loader_workers(params, torch.get_num_threads())
    if pr.has_loader:
        pr.cannot["loader"] = _try(lambda: rebuilt_loader(w.loader, 0, False))
    model = copy.deepcopy(w.model)
    pr.cannot["checkpoint"] = _try(lambda: checkpoint_blocks(copy.deepcopy(model)))
    if not pr.has_step:
        return pr
    step = steps.build(w, device, model=model)
    watch = compiler_watch.CompilerWatch().start()
    try:
        activations, loss = memory.bytes_saved_during(step, exclude=list(model.parameters()))
        for _ in range(PROBE_STEPS - 1):  # a size that changes shows from the second step
            step()
    finally:
        seen = watch.stop()
    pr.probe_steps, pr.compiled_graphs = PROBE_STEPS, seen.graphs
    pr.recompiles, pr.eager_fallback = seen.recompiles, seen.eager_fallback
    pr.recompile_cause = seen.cause()
    if seen.compiled:  # the probe's graphs would count against the measured steps' limit
        torch._dynamo.reset()
    pr.reads_inside = not isinstance(loss, torch.Tensor)  # the step returned a number
    pr.activation_mib = activations / whatif.MiB
    opt = step.optimizer
    state = memory.bytes_of_optimizer_state(opt) if opt is not None else 0
    pr.persistent_mib = (memory.bytes_of_parameters(model) + memory.bytes_of_gradients(model)
                         + state) / whatif.MiB
    if opt is not None:
        pr.optimizer, pr.impl = type(opt).__name__, resolved_impl(opt)
        for impl in ("fused", "foreach"):
            pr.cannot[impl] = _try(lambda: optimizer_with(opt, impl).step())
    return pr


#: how the peak-memory instrument builds a side in its own process (interventions.build_variant)
VARIANT_BUILDER = f"{__name__}:variant_step"


def variant_step(contract: Mapping[str, Any], side: str) -> Callable[[], Any]:
    """The step of one side of the contract's intervention, built fresh on its device: what
    :func:`perflab.instruments.interventions.variant_peak` runs alone for that side's peak memory."""
    device = torch.device(contract["device"])
    p = contract["params"]
    w = interventions.build_workload(contract, device)
    base = whatif.baseline_recipe(p)
    recipe = (base if side == "baseline" else
              whatif.resolve_recipe(whatif.REGISTRY[p["intervention"]], base, p,
                                    torch.get_num_threads()))
    return build(w, recipe, device).step
