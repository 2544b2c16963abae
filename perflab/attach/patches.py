"""Interventions applied from outside an unmodified script (``perflab whatif``, issue 42).

One :class:`Patch` per intervention, in :data:`REGISTRY` (names as W01's where the change is
the same). Each has

- ``applies(ev) -> str``: "" when it applies to the script whose BASELINE evidence is
  ``ev``, else the reason it does not (the parent plans with it);
- ``apply(obs, params)``: in the child, after the observers are installed and before the
  script runs, it patches torch (constructors, hooks, flags) so the script's own calls take
  the change; what it did goes to ``obs.patch`` (the evidence's ``patch``: name, applied,
  where, detail, error);
- ``edit(site_line, params) -> str``: the change as a diff at the user's construction line;
- ``touches``: the phases (:data:`perflab.core.names.PHASES`) whose time it can remove.

A patch that raises inside the script's run is the script's failure (the bootstrap keeps its
traceback); a patch whose target never appears leaves ``applied`` False and says why.
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

from perflab.attach.observers import user_site

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


def _caller(obs) -> str:
    return user_site(traceback.extract_stack()[:-2], obs.roots)


# ------------------------------------------------------------------ the edit


def edit_call(site_line: str, call: str, add: dict) -> str:
    """A one-line diff setting ``add`` (keyword: value source) in the ``call(...)`` of
    ``site_line`` ("train.py:42: loader = DataLoader(ds)"); a line that does not parse (a
    call spanning lines) gets the change said in words."""
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
    node.keywords = [k for k in node.keywords if k.arg not in add] + [
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


REGISTRY: dict[str, Patch] = {}


def register(p: Patch) -> Patch:
    REGISTRY[p.name] = p
    return p


def apply(spec: dict, obs) -> None:
    """Apply ``spec`` ({"name": ..., **params}) in the child; an unknown name is said."""
    spec = dict(spec)
    name = spec.pop("name", None)
    p = REGISTRY.get(name)
    if p is None:
        _record(obs, str(name), f"unknown patch {name!r} (known: {', '.join(REGISTRY)})")
        return
    p.apply(obs, {**p.params, **spec})


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


def default_workers() -> int:
    """min(4, usable cores - 1), at least 1: the cores this process may run on."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
    return max(1, min(4, cores - 1))


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
            bound.arguments.update(change)
            original(*bound.args, **bound.kwargs)
            _done(rec, _caller(obs), "DataLoader(" + ", ".join(
                f"{k}={old[k]!r} -> {v!r}" for k, v in change.items()) + ")")
        dataloader.DataLoader.__init__ = __init__
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
    lambda site, params: edit_call(site, "DataLoader", {
        k: repr(v) for k, v in _loader_kwargs(params, "workers").items()})))

register(Patch(
    "loader_pinned", "pinned host memory for the DataLoader's batches (pin_memory=True)",
    ("input_wait", "host_to_device"), _first(_needs_cuda, _needs_loader, _already_pinned),
    _patch_loader("pinned", "no DataLoader was constructed"),
    lambda site, params: edit_call(site, "DataLoader", {"pin_memory": "True"})))


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
                if depth[0] == 0:  # the outermost class's constructor (AdamW over Adam)
                    _done(rec, _caller(obs), f"{type(opt).__name__}({flag}={old!r} -> True)")
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
    lambda site, params: edit_call(site, _call_name(site), {"fused": "True"})))

register(Patch(
    "foreach_optimizer", "the foreach optimizer update (multi-tensor kernels)",
    ("optimizer",), _optimizer_refuses("foreach"), _patch_optimizer("foreach"),
    lambda site, params: edit_call(site, _call_name(site), {"foreach": "True"})))


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


def _at_first_model(obs, rec, act: Callable[[torch.nn.Module], str]) -> None:
    """Call ``act(module)`` once, on the first outermost module whose forward runs (a global
    forward pre-hook fires for the outer module before its submodules)."""
    from torch.nn.modules import module as m

    handle = []

    def pre(module, _args):
        if torch.compiler.is_compiling() or not handle:
            return
        handle.pop().remove()
        detail = act(module)
        site = obs._module_sites.get(module, "") or f"the {type(module).__name__} model"
        _done(rec, site, detail)
    handle.append(m.register_module_forward_pre_hook(pre))


def _patch_compile(mode: str | None):
    def apply_(obs, params):
        rec = _record(obs, "compile_" + (mode or "default").replace("-", "_"),
                      "no model forward ran")
        kwargs = {k: v for k, v in params.items() if k in ("mode", "dynamic", "fullgraph",
                                                           "backend")}
        if mode:
            kwargs.setdefault("mode", mode)

        def act(module):
            module.compile(**kwargs)  # the module's __call__ goes through the compiled one
            return (f"{type(module).__name__}.compile({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"
                    " from its second forward on")
        _at_first_model(obs, rec, act)

        def finish():
            from perflab.instruments import compiling
            if rec["applied"] and not compiling.counters().get("stats.unique_graphs"):
                rec["applied"] = False
                rec["error"] = "compiled, but Dynamo captured no graph (the forward ran eager)"
        obs.patch_finish = finish
    return apply_


def _compiled_already(ev):
    return "the script already compiles its model" if (
        ev.get("dynamo_final") or {}).get("stats.unique_graphs") else ""


def _model_edit(call: str):
    def edit(site, params):
        loc, _, code = site.partition(": ")
        target = code.split("=")[0].strip() if "=" in code else "model"
        return f"after {loc}: + {target}{call}"
    return edit


register(Patch(
    "compile_default", "torch.compile the model (default mode)",
    ("forward", "backward"), _first(_needs_model, _compiled_already), _patch_compile(None),
    _model_edit(".compile()")))

register(Patch(
    "compile_reduce_overhead", "torch.compile the model (mode reduce-overhead: CUDA graphs)",
    ("forward", "backward"), _first(_needs_cuda, _needs_model, _compiled_already),
    _patch_compile("reduce-overhead"), _model_edit('.compile(mode="reduce-overhead")')))


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
    lambda site, params: edit_call(site, "compile", {"dynamic": "True"})))


# ------------------------------------------------------------------ precision


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
        dtype = getattr(torch, {"bf16": "bfloat16", "fp16": "float16"}[dtype_name])

        def act(module):
            dev = _device_of(module)
            _autocast_forward(module, dev, dtype)
            return (f"torch.autocast({dev!r}, dtype=torch.{str(dtype).split('.')[-1]}) "
                    f"around {type(module).__name__}.forward from its second forward on")
        _at_first_model(obs, rec, act)
        if dtype_name == "fp16":
            _grad_scaler(obs, rec)
    return apply_


def _grad_scaler(obs, rec) -> None:
    """fp16 needs a GradScaler: the first loss's backward is scaled (Tensor.backward on a
    scalar outside any backward) and each optimizer's step goes through scaler.step +
    update (an instance attribute, set at construction). Gradient clipping by the script
    would clip scaled gradients: where the baseline clips, this patch is not equivalent."""
    scaler = torch.amp.GradScaler("cuda" if torch.cuda.is_available() else "cpu")
    original_backward = torch.Tensor.backward
    inside = [False]

    def backward(t, gradient=None, *args, **kwargs):
        if gradient is None and t.numel() == 1 and not inside[0] and t.dtype.is_floating_point:
            # scaled through the gradient, not the tensor: the loss the observers keep is
            # the script's own (unscaled)
            gradient = scaler.scale(torch.ones_like(t))
        return original_backward(t, gradient, *args, **kwargs)
    torch.Tensor.backward = backward

    original_init = torch.optim.Optimizer.__init__

    def __init__(opt, *args, **kwargs):
        original_init(opt, *args, **kwargs)
        step = opt.step

        def scaled_step(*a, **kw):
            if inside[0]:
                return step(*a, **kw)
            inside[0] = True
            try:
                out = scaler.step(opt, *a, **kw)
                scaler.update()
                return out
            finally:
                inside[0] = False
        opt.step = scaled_step
        _done(rec, "", f"GradScaler around {type(opt).__name__}.step and the loss's backward")
    torch.optim.Optimizer.__init__ = __init__


def _not_autocast(ev):
    return ""  # the baseline's own autocast is not observed yet: applies, measured


register(Patch(
    "autocast_bf16", "bf16 autocast around the model's forward",
    ("forward", "backward"), _first(_needs_model, _not_autocast), _patch_autocast("bf16"),
    _model_edit(': wrap its forward calls in `with torch.autocast(device, torch.bfloat16):`')))

register(Patch(
    "autocast_fp16", "fp16 autocast around the model's forward, with a GradScaler",
    ("forward", "backward"), _first(_needs_cuda, _needs_model), _patch_autocast("fp16"),
    _model_edit(': wrap its forward calls in `with torch.autocast("cuda", torch.float16):` '
                'and step through a torch.amp.GradScaler')))


def _patch_tf32(obs, params):
    rec = _record(obs, "tf32", "")
    before = torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.set_float32_matmul_precision("high")
    _done(rec, "", f"float32 matmul precision {before} -> high, cuda.matmul.allow_tf32 and "
                   "cudnn.allow_tf32 True")


def _tf32_on(ev):
    return "TF32 is already on" if ev.get("float32_matmul_precision") in (
        "high", "medium") or ev.get("cuda_matmul_allow_tf32") else ""


register(Patch(
    "tf32", "TF32 tensor-core matmuls and convolutions for float32",
    ("forward", "backward"), _first(_needs_cuda, _tf32_on), _patch_tf32,
    lambda site, params: '+ torch.set_float32_matmul_precision("high")  # at the top'))


# ------------------------------------------------------------------ memory


ALLOC_ENV = "PYTORCH_CUDA_ALLOC_CONF"


def _patch_expandable(obs, params):
    rec = _record(obs, "expandable_segments", "")
    if torch.cuda.is_initialized():
        rec["error"] = "CUDA was initialized before the script ran: the allocator is set"
        return
    old = os.environ.get(ALLOC_ENV, "")
    parts = [p for p in old.split(",") if p and not p.startswith("expandable_segments")]
    os.environ[ALLOC_ENV] = ",".join([*parts, "expandable_segments:True"])
    _done(rec, "", f"{ALLOC_ENV}={os.environ[ALLOC_ENV]} (was {old or 'unset'})")


register(Patch(
    "expandable_segments", "the CUDA caching allocator's expandable segments",
    ("forward", "backward", "optimizer"), _needs_cuda, _patch_expandable,
    lambda site, params: f"+ export {ALLOC_ENV}=expandable_segments:True  # before python"))


def _patch_channels_last(obs, params):
    rec = _record(obs, "channels_last", "no model forward ran")

    def to_cl(x):
        return x.contiguous(memory_format=torch.channels_last) \
            if isinstance(x, torch.Tensor) and x.dim() == 4 else x

    def act(module):
        module.to(memory_format=torch.channels_last)
        module.register_forward_pre_hook(lambda _m, args: tuple(to_cl(a) for a in args))
        return (f"{type(module).__name__}.to(memory_format=torch.channels_last), 4-D inputs "
                "channels_last, from its second forward on")
    _at_first_model(obs, rec, act)


def _needs_conv(ev):
    info = ev.get("model_info") or []
    return "" if any(m.get("conv2d") for m in info) else "not a conv model (no Conv2d)"


register(Patch(
    "channels_last", "channels-last memory format for a convolutional model",
    ("forward", "backward"), _first(_needs_model, _needs_conv), _patch_channels_last,
    _model_edit(".to(memory_format=torch.channels_last)  # and its 4-D inputs")))
