"""Interventions applied from outside an unmodified script (``perflab whatif``, issue 42).

One :class:`Patch` per intervention, in :data:`REGISTRY` (names as W01's where the change is
the same). Each has

- ``applies(ev) -> str``: "" when it applies to the script whose BASELINE evidence is
  ``ev``, else the reason it does not (the parent plans with it);
- ``apply(obs, params)``: in the child, after the observers are installed and before the
  script runs, it patches torch (constructors, hooks, flags) so the script's own calls take
  the change; what it did goes to ``obs.patch`` (the evidence's ``patch``: name, applied,
  where, detail, error, and at close ``edit``: the diff at ``where``);
- ``edit(site_line, params) -> str``: the change as a one-line diff (``- old`` / ``+ new``)
  at the user's line of kind ``site`` (:func:`edit_for` picks it from the evidence);
- ``touches``: the phases (:data:`perflab.core.names.PHASES`) whose time it can remove.

A patch that raises while being applied stops the child before the script runs (the
evidence's ``patch`` carries the error and traceback); one that makes the script raise is
the script's failure (``status`` keeps the traceback, ``patch["raised"]`` the exception);
a patch whose target never appears, or a CUDA-only change on a run without CUDA, leaves
``applied`` False and says why. What must be in place before python starts (the
allocator's settings) is :func:`child_env`, which the parent puts in the child's
environment.
"""

from __future__ import annotations

import ast
import functools
import inspect
import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from perflab.attach.observers import construction_stack, user_site

# ------------------------------------------------------------------ the record


def _record(obs, name: str, missing: str) -> dict:
    """The evidence's patch record, 'not applied' with ``missing`` until the patch acts."""
    obs.patch = {"name": name, "applied": False, "where": [], "detail": "", "error": missing}
    return obs.patch


def _done(rec: dict, where: str, detail: str) -> None:
    rec["applied"], rec["error"] = True, None
    if where and where not in rec["where"]:
        rec["where"].append(where)
    if detail and detail not in rec["detail"].split("; "):
        rec["detail"] = f"{rec['detail']}; {detail}" if rec["detail"] else detail


def _caller(obs, built=None) -> str:
    """The user's line calling the patched function; for a constructor (``built``: the
    object), the line that built it, past its class's own ``super().__init__()``."""
    if built is not None:
        return user_site(construction_stack(built), obs.roots)
    return user_site(traceback.extract_stack()[:-2], obs.roots)


# ------------------------------------------------------------------ the edit


def edit_call(site_line: str, call: str, add: dict, drop: tuple[str, ...] = ()) -> str:
    """A one-line diff setting ``add`` (keyword: value source) in the ``call(...)`` of
    ``site_line`` ("train.py:42: loader = DataLoader(ds)"); a line that does not parse (a
    call spanning lines) gets the change said in words. Keywords in ``drop`` go."""
    loc, _, code = site_line.partition(": ")
    kw = ", ".join(f"{k}={v}" for k, v in add.items())
    try:
        tree = ast.parse(code.strip())
    except SyntaxError:
        tree = None
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and ast.unparse(n.func).split(".")[-1] == call] if tree else []
    if not calls:
        return f"add {kw} to the {call}(...) call at {loc or site_line}"
    node = calls[0]
    node.keywords = [k for k in node.keywords if k.arg not in add and k.arg not in drop] + [
        ast.keyword(arg=k, value=ast.parse(v, mode="eval").body) for k, v in add.items()]
    return f"- {code.strip()}\n+ {ast.unparse(tree)}"


# ------------------------------------------------------------------ the registry


@dataclass
class Patch:
    name: str
    title: str
    touches: tuple[str, ...]
    applies: Callable[[dict], str]
    apply: Callable[[object, dict], None]
    edit: Callable[[str, dict], str]
    params: dict = field(default_factory=dict)
    #: the kind of construction site (ev["sites"]) the edit goes at: "loader", "optimizer",
    #: "model", "forward" (the line calling the model), "compile" (the script's own
    #: torch.compile, known only from the patched run), "" (no line: a setting)
    site: str = "model"


REGISTRY: dict[str, Patch] = {}


def register(p: Patch) -> Patch:
    REGISTRY[p.name] = p
    return p


def apply(spec: dict, obs) -> None:
    """Apply ``spec`` ({"name": ..., **params}) in the child (an unknown name raises); at
    close the record gets ``edit``, the one-line diff at the line the patch acted on."""
    spec = dict(spec)
    name = spec.pop("name", None)
    p = REGISTRY.get(name)
    if p is None:  # refused: the script is not run unpatched under an unknown name
        raise ValueError(f"unknown patch {name!r} (known: {', '.join(REGISTRY)})")
    params = {**p.params, **spec}
    p.apply(obs, params)
    rec = obs.patch

    def keep_edit():  # the diff at the line the patch acted on, as the child saw it
        try:
            rec["edit"] = edit_for(name, {"patch": rec}, {**params, **(
                {"device": rec["device"]} if rec.get("device") else {})})
        except Exception as exc:  # the diff explains; it never loses the evidence
            rec["edit"] = f"(no diff: {type(exc).__name__}: {exc})"
    _on_close(obs, keep_edit)


def edit_for(name: str, ev: dict, params: dict | None = None) -> str:
    """The one-line diff for patch ``name`` from evidence ``ev``: at the line the patch
    acted on (a patched run's ``ev["patch"]["where"]``), else at the baseline's
    construction site of the patch's kind (``ev["sites"]``); "" when no line is known."""
    p = REGISTRY[name]
    rec = ev.get("patch") or {}
    site = ""
    if p.site:
        if rec.get("name") == name and rec.get("where"):
            site = rec["where"][0]
        else:
            site = next(iter((ev.get("sites") or {}).get(p.site) or []), "")
        if not site:
            return ""
    acted = {"device": rec["device"]} if rec.get("name") == name and rec.get("device") else {}
    return p.edit(site, {**p.params, **acted, **(params or {})})


def parse_spec(text: str) -> dict:
    """``NAME[:k=v,...]`` (the ``--patch`` option) -> {"name": NAME, k: v}; values are
    Python literals where they parse (4, True, "max-autotune"), else strings."""
    name, _, rest = text.partition(":")
    if name not in REGISTRY:
        raise ValueError(f"unknown patch {name!r}; known: {', '.join(REGISTRY)}")
    spec: dict = {"name": name}
    for item in filter(None, rest.split(",")):
        k, eq, v = item.partition("=")
        if not eq:
            raise ValueError(f"--patch {text!r}: {item!r} is not k=v")
        try:
            spec[k.strip()] = ast.literal_eval(v.strip())
        except (ValueError, SyntaxError):
            spec[k.strip()] = v.strip()
    return spec


def line(ev: dict) -> str:
    """The patch in one line for the verdict ("" when the run had none)."""
    p = ev.get("patch")
    if not p:
        return ""
    if p["applied"]:
        return (f"patch {p['name']}: applied ({p['detail']})"
                + (f" at {'; '.join(p['where'])}" if p["where"] else ""))
    return f"patch {p['name']}: NOT applied: {p['error']}"


# ------------------------------------------------------------------ common conditions


def _needs_cuda(ev: dict) -> str:
    return "" if ev.get("cuda") else "the script does not run on CUDA"


def _needs_loader(ev: dict) -> str:
    return "" if ev.get("loaders") else "no DataLoader was constructed"


def _needs_model(ev: dict) -> str:
    return "" if ev.get("models") else "no model forward was seen"


def _first(*checks):
    def applies(ev):
        return next((r for r in (c(ev) for c in checks) if r), "")
    return applies


# ------------------------------------------------------------------ the DataLoader


def usable_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)


def default_workers() -> int:
    """min(4, usable cores - 1), at least 1."""
    return max(1, min(4, usable_cores() - 1))


def oversubscribed(workers: int, threads: int, cores: int) -> str:
    """What the patched run's workers do to the training process's own threads, when
    ``workers`` processes and its ``threads`` intra-op threads outnumber ``cores``: a
    parallel operator of the step waits for whichever of its threads the scheduler put
    off, a tick at a time, and spin-waits meanwhile (the steps' time then varies run to
    run, in plain python as under perflab). "" when they fit."""
    if workers + threads <= cores:
        return ""
    return (f"oversubscribed: {workers} worker{'s' * (workers != 1)} + {threads} intra-op "
            f"thread{'s' * (threads != 1)} on {cores} "
            "cores (the step's parallel operators wait for descheduled threads: fewer "
            "workers or torch.set_num_threads lower it)")


def _loader_kwargs(params: dict, kind: str) -> dict:
    if kind == "workers":
        n = int(params.get("num_workers") or default_workers())
        return {"num_workers": n, "persistent_workers": bool(params.get("persistent", True))}
    return {"pin_memory": True}


def _patch_loader(kind: str, missing: str):
    def apply_(obs, params):
        from torch.utils.data import dataloader

        rec = _record(obs, f"loader_{kind}", missing)
        change = _loader_kwargs(params, kind)
        original = dataloader.DataLoader.__init__
        sig = inspect.signature(original)

        @functools.wraps(original)
        def __init__(loader, *args, **kwargs):
            bound = sig.bind(loader, *args, **kwargs)
            old = {k: bound.arguments.get(k, sig.parameters[k].default) for k in change}
            new = dict(change)
            if kind == "workers" and "num_workers" not in params:  # never fewer than its own
                new["num_workers"] = max(int(old["num_workers"] or 0), new["num_workers"])
            bound.arguments.update(new)
            original(*bound.args, **bound.kwargs)
            if old != new:
                _done(rec, _caller(obs, loader), "DataLoader(" + ", ".join(
                    f"{k}={old[k]!r} -> {v!r}" for k, v in new.items()) + ")")
                if kind == "workers":  # said beside the change: it reads in the step time
                    _done(rec, "", oversubscribed(new["num_workers"], torch.get_num_threads(),
                                                  usable_cores()))
            elif not rec["applied"]:
                rec["error"] = (f"the DataLoader at {_caller(obs, loader).partition(': ')[0]} "
                                "already has "
                                + ", ".join(f"{k}={v!r}" for k, v in new.items()))
        dataloader.DataLoader.__init__ = __init__
        if kind == "pinned":
            _on_close(obs, lambda: _needs_cuda_run(
                obs, rec, "pinned host memory only speeds copies to CUDA"))
    return apply_


def _already_workers(ev):
    lo = ev.get("loaders") or []
    return ("every DataLoader already has worker processes"
            if lo and all(x.get("num_workers", 0) > 0 for x in lo) else "")


def _already_pinned(ev):
    lo = ev.get("loaders") or []
    return "every DataLoader already pins memory" if lo and all(
        x.get("pin_memory") for x in lo) else ""


register(Patch(
    "loader_workers", "DataLoader worker processes (num_workers, persistent_workers)",
    ("input_wait",), _first(_needs_loader, _already_workers),
    _patch_loader("workers", "no DataLoader was constructed"),
    lambda site, params: _subclass_edit(site, "DataLoader", {
        k: repr(v) for k, v in _loader_kwargs(params, "workers").items()}), site="loader"))

register(Patch(
    "loader_pinned", "pinned host memory for the DataLoader's batches (pin_memory=True)",
    ("input_wait", "host_to_device"), _first(_needs_cuda, _needs_loader, _already_pinned),
    _patch_loader("pinned", "no DataLoader was constructed"),
    lambda site, params: _subclass_edit(site, "DataLoader", {"pin_memory": "True"}),
    site="loader"))


# ------------------------------------------------------------------ the optimizer


def _optimizer_classes(flag: str) -> list[type]:
    """torch.optim's classes whose constructor takes ``flag`` (fused= / foreach=)."""
    out = []
    for name in dir(torch.optim):
        cls = getattr(torch.optim, name)
        if isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) \
                and cls is not torch.optim.Optimizer \
                and flag in inspect.signature(cls.__init__).parameters:
            out.append(cls)
    return out


def _patch_optimizer(flag: str):
    def apply_(obs, params):
        rec = _record(obs, f"{flag}_optimizer",
                      f"no optimizer whose constructor takes {flag}= was constructed")
        depth = [0]
        for cls in _optimizer_classes(flag):
            original = cls.__dict__["__init__"]
            sig = inspect.signature(original)

            def __init__(opt, *args, __original=original, __sig=sig, **kwargs):
                depth[0] += 1
                try:
                    bound = __sig.bind(opt, *args, **kwargs)
                    old = bound.arguments.get(flag, __sig.parameters[flag].default)
                    bound.arguments[flag] = True
                    if flag == "fused" and "foreach" in __sig.parameters:
                        bound.arguments["foreach"] = None  # fused and foreach exclude
                    __original(*bound.args, **bound.kwargs)
                finally:
                    depth[0] -= 1
                if depth[0] == 0 and old is True and not rec["applied"]:
                    at = _caller(obs, opt).partition(": ")[0]
                    rec["error"] = f"the optimizer at {at} is already {flag}"
                elif depth[0] == 0:  # the outermost class's constructor (AdamW over Adam)
                    _done(rec, _caller(obs, opt), f"{type(opt).__name__}({flag}={old!r} -> True)")
            functools.update_wrapper(__init__, original)
            cls.__init__ = __init__
    return apply_


def _optimizer_refuses(flag: str):
    def applies(ev):
        built = ev.get("optimizers_built") or []
        if not built:
            return "no optimizer was constructed"
        takes = {c.__name__ for c in _optimizer_classes(flag)}
        left = [o for o in built if o["class"] in takes and o["impl"] != flag]
        if left:
            return ""
        if any(o["impl"] == flag for o in built):
            return f"the optimizer is already {flag}"
        return (f"{', '.join(sorted({o['class'] for o in built}))} does not take {flag}= "
                f"(torch {torch.__version__})")
    return applies


register(Patch(
    "fused_optimizer", "the fused optimizer update (one kernel for all parameters)",
    ("optimizer",), _optimizer_refuses("fused"), _patch_optimizer("fused"),
    lambda site, params: _subclass_edit(site, "torch.optim", {"fused": "True"},
                                        drop=("foreach",)),  # fused with foreach=True raises
    site="optimizer"))

register(Patch(
    "foreach_optimizer", "the foreach optimizer update (multi-tensor kernels)",
    ("optimizer",), _optimizer_refuses("foreach"), _patch_optimizer("foreach"),
    lambda site, params: _subclass_edit(site, "torch.optim", {"foreach": "True"}),
    site="optimizer"))


def _subclass_edit(site: str, base: str, add: dict, drop: tuple[str, ...] = ()) -> str:
    """:func:`edit_call` on the line's own call: ``base``'s (``DataLoader``, a
    ``torch.optim`` class) or a user subclass's, which must hand the keywords on to
    ``base`` (said beside its diff)."""
    name = _call_name(site)
    own = name == base or base == "torch.optim" and isinstance(
        getattr(torch.optim, name, None), type)
    diff = edit_call(site, name if name != "the" else base.split(".")[-1], add, drop)
    if own or not diff.startswith("- "):
        return diff
    return f"{diff}  # {name} must pass {', '.join(add)} on to {base}"


def _call_name(site_line: str) -> str:
    """The called name of the line's outermost call ("AdamW" in "opt = torch.optim.AdamW(...)")."""
    code = site_line.partition(": ")[2].strip()
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code.split("(")[0].split(".")[-1].split("=")[-1].strip() or "the"
    call = next((n for n in ast.walk(tree) if isinstance(n, ast.Call)), None)
    return ast.unparse(call.func).split(".")[-1] if call is not None else "the"


# ------------------------------------------------------------------ the outermost model


def _at_first_model(obs, rec, act: Callable[[torch.nn.Module], str],
                    at: str = "model") -> None:
    """Call ``act(module)`` once, on the first outermost model whose forward runs: the
    observer's global pre-hook (registered first, so it runs first) has just counted it as
    a model at depth 1, never a submodule, a loss module or a module inside the loss.
    ``where`` is the model's construction line (``at="model"``) or the line calling it
    (``at="forward"``: where an autocast edit goes)."""
    from torch.nn.modules import module as m

    handle = []

    def pre(module, _args):
        if torch.compiler.is_compiling() or not handle or obs._fwd_depth != 1 \
                or id(module) not in obs.models:
            return
        handle.pop().remove()
        detail = act(module)
        site = (obs._forward_sites.get(id(module), "") if at == "forward"
                else obs._module_sites.get(module, "")) or f"the {type(module).__name__} model"
        _done(rec, site, detail)
    handle.append(m.register_module_forward_pre_hook(pre))


def _needs_cuda_run(obs, rec, why: str) -> None:
    """At close: a CUDA-only change on a run that never used CUDA changed nothing."""
    if rec["applied"] and not obs.cuda:
        rec["applied"], rec["error"] = False, f"the run did not use CUDA: {why}"


def _patch_compile(mode: str | None):
    def apply_(obs, params):
        rec = _record(obs, "compile_" + (mode or "default").replace("-", "_"),
                      "no model forward ran")
        kwargs = {k: v for k, v in params.items() if k in ("mode", "dynamic", "fullgraph",
                                                           "backend")}
        if mode:
            kwargs.setdefault("mode", mode)

        def act(module):
            # the forward, through a frame of ours: Module.compile() on a model whose
            # class is torch's own (nn.Sequential) captures nothing (Dynamo skips torch's
            # files as top frames), while a frame outside torch inlines them; the module's
            # hooks (the observers') stay eager around it
            forward = module.forward

            def compiled_forward(*args, **kw):
                return forward(*args, **kw)
            module.forward = torch.compile(compiled_forward, **kwargs)
            obs.narrow_hooks()  # the global hooks Dynamo guards on, final before it compiles
            return (f"torch.compile({type(module).__name__}.forward"
                    f"{''.join(f', {k}={v!r}' for k, v in kwargs.items())}) from its second "
                    "forward on")
        _at_first_model(obs, rec, act)

        def finish():
            from perflab.instruments import compiling
            if rec["applied"] and not compiling.counters().get("stats.unique_graphs"):
                rec["applied"] = False
                rec["error"] = "compiled, but Dynamo captured no graph (the forward ran eager)"
            if kwargs.get("mode") == "reduce-overhead":
                _needs_cuda_run(obs, rec, "reduce-overhead's CUDA graphs need CUDA (on a CPU "
                                          "it is the default compile)")
        _on_close(obs, finish)
    return apply_


def _compiled_already(ev):
    return "the script already compiles its model" if (
        ev.get("dynamo_final") or {}).get("stats.unique_graphs") else ""


def _assignment(site_line: str):
    """(location, code, the ast.Assign) of a one-target assignment line, else None."""
    loc, _, code = site_line.partition(": ")
    try:
        tree = ast.parse(code.strip())
    except SyntaxError:
        return None
    st = tree.body[0] if len(tree.body) == 1 else None
    if isinstance(st, ast.Assign) and len(st.targets) == 1:
        return loc, code.strip(), st
    return None


def _construction_edit(rewrite, words, comment: str = ""):
    """``- model = X`` / ``+ model = rewrite(X, params)`` at the model's construction line,
    or ``words(location, params)`` where that line is not a one-target assignment."""
    def edit(site, params):
        found = _assignment(site)
        note = f"  # {comment}" if comment else ""
        if found is None:
            return words(site.partition(": ")[0], params) + note
        _loc, code, st = found
        new = ast.Assign(targets=st.targets, value=rewrite(st.value, params))
        return f"- {code}\n+ {ast.unparse(ast.fix_missing_locations(new))}{note}"
    return edit


def _expr(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


def _compile_edit(mode: str | None):
    """torch.compile(X), not Module.compile(): the latter captures nothing for a model of
    torch's own classes (nn.Sequential)."""
    def mode_of(params):
        return params.get("mode", mode)

    return _construction_edit(
        lambda v, params: ast.Call(func=_expr("torch.compile"), args=[v], keywords=[
            ast.keyword("mode", ast.Constant(mode_of(params)))] if mode_of(params) else []),
        lambda loc, params: f"wrap the model constructed at {loc} in torch.compile(model"
                            + (f", mode={mode_of(params)!r})" if mode_of(params) else ")"))


register(Patch(
    "compile_default", "torch.compile the model (default mode)",
    ("forward", "backward"), _first(_needs_model, _compiled_already), _patch_compile(None),
    _compile_edit(None)))

register(Patch(
    "compile_reduce_overhead", "torch.compile the model (mode reduce-overhead: CUDA graphs)",
    ("forward", "backward"), _first(_needs_cuda, _needs_model, _compiled_already),
    _patch_compile("reduce-overhead"), _compile_edit("reduce-overhead")))


def _patch_compile_dynamic(obs, params):
    rec = _record(obs, "compile_dynamic", "no torch.compile call was seen")
    original_fn = torch.compile
    original_m = torch.nn.Module.compile

    @functools.wraps(original_fn)
    def compile_(*args, **kwargs):
        kwargs["dynamic"] = True
        _done(rec, _caller(obs), "torch.compile(dynamic=True)")
        return original_fn(*args, **kwargs)

    @functools.wraps(original_m)
    def mcompile(self, *args, **kwargs):
        kwargs["dynamic"] = True
        _done(rec, _caller(obs), f"{type(self).__name__}.compile(dynamic=True)")
        return original_m(self, *args, **kwargs)
    torch.compile, torch.nn.Module.compile = compile_, mcompile


def _recompiles(ev):
    if not (ev.get("dynamo_final") or {}).get("stats.unique_graphs"):
        return "no torch.compile call was seen"
    return "" if ev.get("recompiles") else "the compiled code did not recompile"


register(Patch(
    "compile_dynamic", "torch.compile with dynamic shapes (no recompile per new shape)",
    ("forward", "backward"), _recompiles, _patch_compile_dynamic,
    lambda site, params: edit_call(site, "compile", {"dynamic": "True"}), site="compile"))


# ------------------------------------------------------------------ precision

_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def _autocast_forward(module, device_type: str, dtype) -> None:
    """Run ``module``'s forward under autocast from now on (an instance attribute: the
    context exits however the forward ends)."""
    forward = module.forward

    @functools.wraps(forward)
    def autocast_forward(*args, **kwargs):
        with torch.autocast(device_type, dtype=dtype):
            return forward(*args, **kwargs)
    module.forward = autocast_forward


def _device_of(module) -> str:
    p = next(module.parameters(), None)
    return p.device.type if p is not None else "cpu"


def _patch_autocast(dtype_name: str):
    def apply_(obs, params):
        rec = _record(obs, f"autocast_{dtype_name}", "no model forward ran")
        dtype = getattr(torch, _DTYPES[dtype_name])

        def act(module):
            dev = _device_of(module)
            rec["device"] = dev  # the edit's autocast device
            _autocast_forward(module, dev, dtype)
            return (f"torch.autocast({dev!r}, dtype=torch.{_DTYPES[dtype_name]}) "
                    f"around {type(module).__name__}.forward from its second forward on")
        _at_first_model(obs, rec, act, at="forward")
        if dtype_name == "fp16":
            _grad_scaler(obs, rec)
    return apply_


def _on_close(obs, fn) -> None:
    """Run ``fn`` at the observer's close, after any check already there."""
    before = obs.patch_finish

    def both():
        if before is not None:
            before()
        fn()
    obs.patch_finish = both


def _as_if_stepped(opt, args, kwargs) -> None:
    """A step the GradScaler skipped (inf/NaN gradients) still ends a step for the
    observers: torch's global optimizer hooks run as if the update had."""
    from torch.optim import optimizer as o

    for hook in list(o._global_optimizer_pre_hooks.values()):
        hook(opt, args, kwargs)
    for hook in list(o._global_optimizer_post_hooks.values()):
        hook(opt, args, kwargs)


def _grad_scaler(obs, rec) -> None:
    """fp16 needs a GradScaler, wired where the script already calls: a scalar loss's
    ``backward()`` (outside any optimizer step) gets the scale as its gradient (the loss
    the observers keep stays the script's); each optimizer's ``step`` goes through
    ``scaler.step`` + ``update`` (an instance attribute, set at construction); the
    script's ``clip_grad_norm_``/``clip_grad_value_`` unscale the gradients first (the AMP
    recipe), so clipping sees true gradients. The scaler is made at the first scaled
    backward, on the loss's device. A step the scaler skips still counts as a step."""
    st = {"scaler": None, "inside": False, "ran": False, "skipped": 0, "unscaled": set(),
          "optimizers": [], "scaled": False, "plain_steps": 0, "scaled_steps": 0}

    def scaler_for(device_type: str):
        if st["scaler"] is None:
            obs._making_scaler = True  # not the script's own GradScaler (observers.py)
            try:
                st["scaler"] = torch.amp.GradScaler(device_type)
            finally:
                obs._making_scaler = False
        return st["scaler"]

    original_backward = torch.Tensor.backward

    @functools.wraps(original_backward)
    def backward(t, gradient=None, *args, **kwargs):
        if gradient is None and t.numel() == 1 and t.dtype.is_floating_point \
                and not st["inside"]:
            gradient = scaler_for(t.device.type).scale(torch.ones_like(t))
            st["scaled"] = True
        return original_backward(t, gradient, *args, **kwargs)
    torch.Tensor.backward = backward

    original_init = torch.optim.Optimizer.__init__

    @functools.wraps(original_init)
    def __init__(opt, *args, **kwargs):
        original_init(opt, *args, **kwargs)
        step = opt.step
        st["optimizers"].append(opt)

        def scaled_step(*a, **kw):
            if st["inside"] or not st["scaled"]:  # inside scaler.step, or nothing scaled:
                st["ran"] = True  # (a backward not through Tensor.backward) a plain step
                st["plain_steps"] += not st["inside"]
                return step(*a, **kw)
            st["inside"], st["ran"], st["scaled"] = True, False, False
            st["scaled_steps"] += 1
            try:
                out = st["scaler"].step(opt, *a, **kw)
                st["scaler"].update()
            finally:
                st["inside"] = False
                st["unscaled"].discard(id(opt))
            if not st["ran"]:
                st["skipped"] += 1
                _as_if_stepped(opt, a, kw)
            return out
        opt.step = scaled_step
        _done(rec, "", f"GradScaler around {type(opt).__name__}.step and the loss's backward")
    torch.optim.Optimizer.__init__ = __init__

    def unscaling(original):
        @functools.wraps(original)
        def clip(parameters, *args, **kwargs):
            if st["scaler"] is not None and not st["inside"]:
                for opt in st["optimizers"]:
                    if id(opt) not in st["unscaled"]:
                        st["scaler"].unscale_(opt)
                        st["unscaled"].add(id(opt))
                _done(rec, "", f"gradients unscaled before {original.__name__}")
            return original(parameters, *args, **kwargs)
        return clip
    from torch.nn.utils import clip_grad
    for name in ("clip_grad_norm_", "clip_grad_value_"):
        wrapped = unscaling(getattr(clip_grad, name))
        setattr(clip_grad, name, wrapped)
        setattr(torch.nn.utils, name, wrapped)

    def finish():
        if st["skipped"]:
            rec["detail"] += (f"; {st['skipped']} optimizer step(s) skipped by the GradScaler "
                              "(inf/NaN gradients)")
        if st["plain_steps"]:
            rec["detail"] += (f"; {st['plain_steps']} optimizer step(s) after no scaled "
                              "loss.backward() stepped unscaled")
            if not st["scaled_steps"]:
                rec["applied"] = False
                rec["error"] = ("no loss.backward() on a scalar loss was seen (the script's "
                                "backward goes another way): no GradScaler could be wired, "
                                "fp16 ran unscaled")
        if obs.amp["grad_scaler"]:
            rec["applied"] = False
            rec["error"] = (f"the script has its own GradScaler ({obs.amp['grad_scaler'][0]}): "
                            "its loss was scaled twice")
    _on_close(obs, finish)


def _script_autocasts(ev):
    on = (ev.get("amp") or {}).get("autocast") or {}
    return ("the script's forward already runs under autocast ("
            + ", ".join(f"{d}: {t}" for d, t in on.items()) + ")") if on else ""


def _script_scales(ev):
    sc = (ev.get("amp") or {}).get("grad_scaler") or []
    return f"the script already has a GradScaler ({sc[0]})" if sc else ""


def _autocast_edit(dtype_name: str, device: str, extra: str = ""):
    """The line calling the model, run inside autocast (``with ...: <line>`` is one line);
    a line that is not one simple statement gets the change in words."""
    def edit(site, params):
        dev = params.get("device", device)
        ctx = f"with torch.autocast({dev!r}, dtype=torch.{_DTYPES[dtype_name]}):"
        loc, _, code = site.partition(": ")
        code = code.strip()
        try:
            body = ast.parse(code).body
        except SyntaxError:
            body = []
        note = f"  # {extra}" if extra else ""
        if len(body) != 1 or not isinstance(body[0], (ast.Assign, ast.AugAssign,
                                                      ast.AnnAssign, ast.Expr, ast.Return)):
            return f"run the model's forward at {loc or site} inside `{ctx}`{note}"
        return f"- {code}\n+ {ctx} {code}{note}"
    return edit


register(Patch(
    "autocast_bf16", "bf16 autocast around the model's forward",
    ("forward", "backward"), _first(_needs_model, _script_autocasts), _patch_autocast("bf16"),
    _autocast_edit("bf16", "cuda"), site="forward"))

register(Patch(
    "autocast_fp16", "fp16 autocast around the model's forward, with a GradScaler",
    ("forward", "backward"), _first(_needs_cuda, _needs_model, _script_autocasts,
                                    _script_scales),
    _patch_autocast("fp16"),
    _autocast_edit("fp16", "cuda", "and scaler = torch.amp.GradScaler(); "
                   "scaler.scale(loss).backward(); scaler.step(opt); scaler.update()"),
    site="forward"))


def _patch_tf32(obs, params):
    rec = _record(obs, "tf32", "")
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")  # cuBLAS float32 matmuls may use TF32
    torch.backends.cuda.matmul.allow_tf32 = True  # the same switch, by its older name
    torch.backends.cudnn.allow_tf32 = True  # convolutions
    _done(rec, "", f"float32 matmul precision {before} -> high, cuda.matmul.allow_tf32 and "
                   "cudnn.allow_tf32 True")

    def finish():
        now = torch.get_float32_matmul_precision()
        if rec["applied"] and now == "highest":
            rec["applied"] = False
            rec["error"] = "the script set float32 matmul precision back to highest"
        _needs_cuda_run(obs, rec, "TF32 is a CUDA tensor-core mode; a CPU's float32 "
                                  "matmuls do not change")
    _on_close(obs, finish)


def _tf32_on(ev):
    return "TF32 is already on" if ev.get("float32_matmul_precision") in (
        "high", "medium") or ev.get("cuda_matmul_allow_tf32") else ""


register(Patch(
    "tf32", "TF32 tensor-core matmuls and convolutions for float32",
    ("forward", "backward"), _first(_needs_cuda, _tf32_on), _patch_tf32,
    lambda site, params: ('+ torch.set_float32_matmul_precision("high"); '
                          "torch.backends.cudnn.allow_tf32 = True  # after import torch"),
    site=""))


# ------------------------------------------------------------------ memory


ALLOC_ENV = "PYTORCH_CUDA_ALLOC_CONF"
#: torch >= 2.9's name for the same settings, read before ALLOC_ENV when set
ALLOC_ENV_NEW = "PYTORCH_ALLOC_CONF"
EXPANDABLE = "expandable_segments:True"


def _alloc_conf(environ) -> tuple[str, str]:
    """(the variable the allocator reads, its value): the user's own, else ALLOC_ENV."""
    name = ALLOC_ENV_NEW if environ.get(ALLOC_ENV_NEW) else ALLOC_ENV
    return name, environ.get(name, "")


def child_env(spec: dict | None, environ) -> dict[str, str]:
    """The environment a patch needs before python starts (the allocator reads its
    settings once, when CUDA initialises: too late to set from inside a script that may
    touch CUDA at import): expandable_segments merged into the user's allocator settings."""
    if not spec or spec.get("name") != "expandable_segments":
        return {}
    name, old = _alloc_conf(environ)
    parts = [p for p in old.split(",") if p.strip() and
             not p.strip().startswith("expandable_segments")]
    return {name: ",".join([*parts, EXPANDABLE])}


def _patch_expandable(obs, params):
    rec = _record(obs, "expandable_segments", "")
    name, value = _alloc_conf(os.environ)
    if EXPANDABLE not in value.split(","):
        if torch.cuda.is_initialized():
            rec["error"] = (f"{name} lacks {EXPANDABLE} and CUDA was initialised before the "
                            "script ran: the allocator's settings are fixed")
            return
        os.environ.update(child_env({"name": "expandable_segments"}, os.environ))
        name, value = _alloc_conf(os.environ)
        how = "set in this process before CUDA initialised (not by its parent)"
    else:
        how = "in the process's environment from its start"
    if "cudaMallocAsync" in value:
        rec["error"] = f"{name}={value}: the cudaMallocAsync backend has no expandable segments"
        return
    read = getattr(torch._C, "_accelerator_getAllocatorSettings", None)
    if read is not None and EXPANDABLE not in read():
        rec["error"] = f"the allocator's settings read {read()!r}, without {EXPANDABLE}"
        return
    _done(rec, "", f"{name}={value} ({how})")
    _on_close(obs, lambda: _needs_cuda_run(obs, rec, "the CUDA caching allocator was never "
                                                     "used"))


def _allocator_expandable(ev):
    conf = ev.get("allocator_conf") or ""
    return "the allocator already uses expandable segments" if EXPANDABLE in conf else ""


register(Patch(
    "expandable_segments", "the CUDA caching allocator's expandable segments",
    ("forward", "backward", "optimizer"), _first(_needs_cuda, _allocator_expandable),
    _patch_expandable,
    lambda site, params: f"+ export {ALLOC_ENV}={EXPANDABLE}  # before python starts "
                         "(merged with any settings of yours)", site=""))


# ------------------------------------------------------------------ memory format


def _patch_channels_last(obs, params):
    rec = _record(obs, "channels_last", "no model forward ran")

    def to_cl(x):
        return x.contiguous(memory_format=torch.channels_last) \
            if isinstance(x, torch.Tensor) and x.dim() == 4 else x

    def act(module):
        if not any(isinstance(m, torch.nn.Conv2d) for m in module.modules()):
            return ""  # not a conv model: the close says so
        module.to(memory_format=torch.channels_last)
        module.register_forward_pre_hook(lambda _m, args: tuple(to_cl(a) for a in args))
        return (f"{type(module).__name__}.to(memory_format=torch.channels_last), 4-D inputs "
                "channels_last, from its second forward on")
    _at_first_model(obs, rec, act)

    def finish():
        if rec["applied"] and not rec["detail"]:
            rec["applied"], rec["error"] = False, "not a conv model (no Conv2d)"
    _on_close(obs, finish)


def _needs_conv(ev):
    info = ev.get("model_info") or []
    return "" if any(m.get("conv2d") for m in info) else "not a conv model (no Conv2d)"


register(Patch(
    "channels_last", "channels-last memory format for a convolutional model",
    ("forward", "backward"), _first(_needs_model, _needs_conv), _patch_channels_last,
    _construction_edit(
        lambda v, params: ast.Call(func=ast.Attribute(value=v, attr="to"), args=[], keywords=[
            ast.keyword("memory_format", _expr("torch.channels_last"))]),
        lambda loc, params: f"move the model constructed at {loc} to channels_last",
        "and each 4-D input x.contiguous(memory_format=torch.channels_last)")))
