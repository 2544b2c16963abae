"""The chapter's interventions as steps, and the peak memory of one variant alone.

E15 mixed precision, E16 activation checkpointing, E17 gradient accumulation
and E18 manual vs SDPA attention each compare variants of one step. The steps
are built here (so the experiment scripts only compose them), by
:func:`build_variant` from a picklable description (``kind`` and keyword
arguments), because peak memory is measured on one variant alone:

- on CUDA in this process, with nothing else of the experiment alive and the
  allocator's peaks reset first (:func:`variant_peak`);
- on a CPU in a fresh process whose only work is that variant: a process's peak
  resident set (VmHWM) never falls, so within one process a second variant's peak
  is hidden under the first's. Each variant's process is forked from one server
  per job (``python -m perflab.instruments.interventions --serve``) that has done the imports
  and nothing else, so a job pays them once rather than once per variant; without
  ``os.fork`` each variant is a fresh interpreter.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import functools
import gc
import importlib
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from perflab.core.names import STEP_LATENCY
from perflab.instruments import memory, steps, timing, workloads

#: autocast dtypes of E15 by name (fp32: no autocast)
AMP_DTYPES: dict[str, torch.dtype | None] = {
    "fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}


#: the intervention does not apply to this workload (the row says why); the harness's one
#: exception for "this experiment cannot run on this workload"
NotApplicable = workloads.NotApplicable


# ------------------------------------------------------------------ workloads


def build_workload(contract: Mapping[str, Any], device: torch.device, name: str | None = None,
                   **overrides: Any) -> workloads.Workload:
    """A workload of the contract (the controlled one by default), as Context.workload builds it."""
    spec = contract["workloads"][name or contract["workload"]]
    w = workloads.build(spec["target"], device, **{**spec["params"], **overrides})
    return workloads.cast(w, getattr(torch, contract["dtype"]))


# ------------------------------------------------------------------ E15 AMP


def autocast(device: torch.device, precision: str):
    """torch.autocast for ``precision`` (fp16/bf16) on the device's type; fp32: nothing."""
    dtype = AMP_DTYPES[precision]
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler:
    """The loss scaler: on for fp16 (its narrow exponent underflows small gradients), else off."""
    return torch.amp.GradScaler(device.type, enabled=(precision == "fp16"))


def amp_train_step(w: workloads.Workload, device: torch.device, precision: str):
    """The chapter's step as a ``train_step(model, optimizer, batch)`` with the forward and
    loss under autocast and the backward through the loss scaler (GradScaler for fp16)."""
    scaler = grad_scaler(device, precision)

    def train_step(model: nn.Module, opt: torch.optim.Optimizer, batch) -> torch.Tensor:
        x, y = batch
        x = x.to(device, non_blocking=True)
        y = y.to(device, non_blocking=True) if y is not None else None
        opt.zero_grad(set_to_none=True)
        with autocast(device, precision):
            loss = w.loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss

    return train_step


def amp_step(model: nn.Module, w: workloads.Workload, opt: torch.optim.Optimizer,
             x: torch.Tensor, y: torch.Tensor | None, precision: str,
             device: torch.device) -> Callable[[], torch.Tensor]:
    """:func:`amp_train_step` on a fixed batch (already on the device: its copies are no-ops)."""
    train_step = amp_train_step(w, device, precision)
    return lambda: train_step(model, opt, (x, y))


def grad_norm(model: nn.Module) -> float:
    """The L2 norm of all gradients together (fp32 accumulation)."""
    norms = [torch.linalg.vector_norm(p.grad.detach().float()) for p in model.parameters()
             if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0


def amp_one_step(fresh: nn.Module, w: workloads.Workload, x: torch.Tensor,
                 y: torch.Tensor | None, precision: str, device: torch.device,
                 make_opt: Callable) -> dict[str, Any]:
    """One step from ``fresh``'s state: loss, gradient norm (unscaled) and the parameters after."""
    model = copy.deepcopy(fresh).to(device)
    opt = make_opt(model.parameters())
    scaler = grad_scaler(device, precision)
    with autocast(device, precision):
        loss = w.loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)  # the gradient norm is compared in true units, not loss-scaled ones
    norm = grad_norm(model)
    scaler.step(opt)
    scaler.update()
    params = [p.detach().float().clone() for p in model.parameters()]
    return {"loss": float(loss.detach().float()), "grad_norm": norm, "params": params}


def grads_of(model: nn.Module) -> list[torch.Tensor]:
    """A copy of every parameter's gradient; zeros where it has none (frozen, or unused in
    the forward), so two models' gradients compare parameter by parameter."""
    return [torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
            for p in model.parameters()]


def max_abs_diff(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    return max(float((u.float() - v.float()).abs().max()) for u, v in zip(a, b))


def mean_abs(ts: list[torch.Tensor]) -> float:
    total = sum(float(t.float().abs().sum()) for t in ts)
    return total / max(sum(t.numel() for t in ts), 1)


# ------------------------------------------------------------------ E16 checkpointing


class Checkpointed(nn.Module):
    """The chapter's MLP with each (Linear, GELU) block recomputed in backward.

    Shares the wrapped model's parameters. ``torch.utils.checkpoint`` with
    ``use_reentrant=False`` (PyTorch's recommended implementation) drops each
    block's activations after the forward and recomputes them during backward.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        if not isinstance(model, workloads.MLP):
            raise NotApplicable(
                f"activation checkpointing here wraps the chapter's MLP blocks; "
                f"{type(model).__name__} has no known block structure")
        layers = list(model.body)
        self.blocks = nn.ModuleList(nn.Sequential(*layers[i:i + 2])
                                    for i in range(0, len(layers), 2))
        self.head = model.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return self.head(x)


# ------------------------------------------------------------------ E17 accumulation


def _micro_batches(x: torch.Tensor, y: torch.Tensor | None, k: int):
    if x.shape[0] % k:
        raise ValueError(f"batch {x.shape[0]} is not divisible into {k} micro-batches")
    xs = x.chunk(k)
    ys = y.chunk(k) if y is not None else [None] * k
    return list(zip(xs, ys))


def accumulate_grads(model: nn.Module, w: workloads.Workload, x: torch.Tensor,
                     y: torch.Tensor | None, k: int) -> None:
    """Backward over K micro-batches, each loss scaled by 1/K (K=1: the full batch)."""
    for xi, yi in _micro_batches(x, y, k):
        (w.loss_fn(model(xi), yi) / k).backward()


def accumulation_step(model: nn.Module, w: workloads.Workload, opt: torch.optim.Optimizer,
                      x: torch.Tensor, y: torch.Tensor | None, k: int
                      ) -> Callable[[], None]:
    """One optimizer step over K accumulated micro-batches of the batch."""
    micro = _micro_batches(x, y, k)

    def step():
        opt.zero_grad(set_to_none=True)
        for xi, yi in micro:
            (w.loss_fn(model(xi), yi) / k).backward()
        opt.step()

    return step


# ------------------------------------------------------------------ E18 attention


def attention_step(w: workloads.Workload, qkv: torch.Tensor) -> Callable[[], torch.Tensor]:
    """Forward + backward of the attention workload on a q/k/v tensor that requires grad."""

    def step():
        qkv.grad = None
        loss = w.loss_fn(w.model(qkv), None)
        loss.backward()
        return loss

    return step


def attention_outputs(w: workloads.Workload, qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(output, gradient of q/k/v) of one forward + backward, detached."""
    q = qkv.detach().clone().requires_grad_(True)
    out = w.model(q)
    w.loss_fn(out, None).backward()
    return out.detach(), q.grad.detach()


#: SDPA backends by the name of the aten operator each dispatches to
SDPA_OPS = {
    "flash_attention": ("_scaled_dot_product_flash_attention",),
    "efficient_attention": ("_scaled_dot_product_efficient_attention",),
    "cudnn_attention": ("_scaled_dot_product_cudnn_attention",),
    "math": ("_scaled_dot_product_attention_math",),
}
#: the torch.nn.attention.SDPBackend member of each name
SDPA_BACKENDS = {"flash_attention": "FLASH_ATTENTION", "efficient_attention": "EFFICIENT_ATTENTION",
                 "cudnn_attention": "CUDNN_ATTENTION", "math": "MATH"}


def sdpa_backend_ran(fn: Callable[[], Any]) -> set[str]:
    """The SDPA backends whose operator appears in a profile of one call of ``fn``.

    Read from the profiler's operator names (host side, so on any device):
    ``aten::_scaled_dot_product_flash_attention`` (also ``..._for_cpu``),
    ``..._efficient_attention``, ``..._cudnn_attention``, ``..._attention_math``.
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    names = {e.name for e in prof.events()}
    return {b for b, ops in SDPA_OPS.items() if any(op in n for n in names for op in ops)}


def sdpa_backend_eligible(fn: Callable[[], Any]) -> dict[str, str]:
    """Each backend: '' if ``fn`` runs with SDPA restricted to it, else why it cannot."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError as exc:  # torch < 2.3
        return {b: f"torch.nn.attention unavailable: {exc}" for b in SDPA_BACKENDS}
    out = {}
    for name, member in SDPA_BACKENDS.items():
        backend = getattr(SDPBackend, member, None)
        if backend is None:
            out[name] = f"SDPBackend.{member} not in this torch"
            continue
        try:
            with sdpa_kernel([backend]):
                fn()
            out[name] = ""
        except RuntimeError as exc:
            out[name] = " ".join(str(exc).split())[:200] or type(exc).__name__
    return out


# ------------------------------------------------------------------ variants


def build_variant(contract: Mapping[str, Any], kind: str, **kw: Any) -> Callable[[], Any]:
    """The step of one variant, built fresh on the contract's device (see the module doc).

    kinds: ``amp`` (precision, batch), ``checkpoint`` (checkpointed, batch),
    ``accumulation`` (k, batch), ``attention`` (impl, seq), or a builder of a floor above
    named as ``package.module:function`` (called with the contract and ``kw``; W01 names
    ``perflab.experiments.w01_whatif.transforms:variant_step``), imported by name here,
    in the variant's own process, so this instrument imports no experiment.
    """
    device = torch.device(contract["device"])
    if ":" in kind:
        module, _, function = kind.partition(":")
        return getattr(importlib.import_module(module), function)(contract, **kw)
    if kind == "attention":
        w = build_workload(contract, device, "attention", impl=kw["impl"], seq=kw["seq"])
        qkv, _ = w.batch_on(device)
        return attention_step(w, qkv.requires_grad_(True))
    w = build_workload(contract, device, batch=kw["batch"])
    if w.make_optimizer is None:
        raise NotApplicable(f"workload {w.name!r} has no optimizer: no training step")
    x, y = w.batch_on(device)
    opt = w.make_optimizer(w.model.parameters())
    if kind == "amp":
        return amp_step(w.model, w, opt, x, y, kw["precision"], device)
    if kind == "checkpoint":
        model = Checkpointed(w.model) if kw["checkpointed"] else w.model
        return steps.train_step(model, w, opt, x, y)
    if kind == "accumulation":
        return accumulation_step(w.model, w, opt, x, y, kw["k"])
    raise ValueError(f"unknown variant kind {kind!r}")


def timed_variants(ctx, variant_steps: Mapping[str, Callable[[], Any]], *, examples: int,
                   what: str, row_kw: Mapping[str, Mapping[str, Any]],
                   baseline: str | None = None, pct_metric: str = "") -> dict[str, float]:
    """Time variants as an interleaved round robin and write their rows; returns the medians.

    ``variant_steps`` maps each row variant to its step; ``row_kw`` gives each
    variant's extra row fields (dtype, input shape). Blocks and calls per block
    come from the experiment's params (``blocks``, ``inner``), the warmup calls of
    each variant from its ``warmup`` param where one is set (E15-E17: the CPU
    scale's, whose large-batch steps are tenths of a second to a second), else the
    contract's timing. Per variant: the step-latency summary, the spread of its
    block medians, examples/s; with ``baseline``, each median as a % of the
    baseline's under ``pct_metric``.
    """
    p = ctx.params
    warmup = ctx.timing["warmup"] if p.get("warmup") is None else p["warmup"]
    res = timing.interleaved_round_robin(dict(variant_steps), blocks=p["blocks"], inner=p["inner"],
                                         warmup=warmup, sync=ctx.sync)
    window = f"{p['blocks']} round-robin blocks of {p['inner']} after warmup {warmup}, {what}"
    sync = f"synchronized at both ends of each call; {timing.ROUND_ROBIN_ORDER}"
    med = {}
    for v in variant_steps:
        kw = dict(row_kw.get(v, {}))
        s = ctx.summary(res.samples[v], variant=v, metric=STEP_LATENCY, window=window,
                        sync_boundary=sync, block=res.blocks[v],
                        statistics=("median", "iqr", "p25", "p75", "mean", "min", "max"), **kw)
        med[v] = s["median"]
        for name, val in (("min", min(res.block_medians[v])), ("max", max(res.block_medians[v]))):
            ctx.row(variant=v, metric="block_median", statistic=name, value=val, unit="ms",
                    n=p["blocks"], window=window, sync_boundary=sync, **kw)
        ctx.row(variant=v, metric="throughput", statistic="median",
                value=examples / s["median"] * 1e3, unit="examples/s", n=len(res.samples[v]),
                window=window, sync_boundary=timing.DRAINED_THROUGHPUT, **kw)
    if baseline in med:
        for v in variant_steps:
            ctx.row(variant=v, metric=pct_metric, value=100 * med[v] / med[baseline], unit="%",
                    n=p["blocks"], window=window, sync_boundary="ratio of medians",
                    **dict(row_kw.get(v, {})))
    ctx.log(f"{what}: " + ", ".join(f"{v} {m:.3f} ms" for v, m in med.items()))
    return med


def _oom_reason(exc: BaseException, where: str, device: torch.device) -> str:
    peak = memory.cuda_counters(device).max_allocated_mib
    first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
    return (f"{type(exc).__name__} during {where}; peak allocated before the failure "
            f"{peak:.1f} MiB: {first}")


def _cuda_peak(contract, kind, kw, calls) -> dict[str, Any]:
    device = torch.device(contract["device"])
    sync = timing.synchronizer(device)
    gc.collect()
    torch.cuda.empty_cache()
    memory.reset_cuda_peaks(device)
    at_start = memory.cuda_counters(device).allocated_mib
    oom = None
    step = None
    try:
        step = build_variant(contract, kind, **kw)
        for _ in range(calls):
            step()
        sync()
        c = memory.cuda_counters(device)
    except torch.cuda.OutOfMemoryError as exc:
        oom = _oom_reason(exc, f"{kind} {kw}", device)
    finally:
        step = None
        gc.collect()
        torch.cuda.empty_cache()
    if oom is not None:
        return {"oom": oom}
    return {"peak_allocated": c.max_allocated_mib, "peak_reserved": c.max_reserved_mib,
            "allocated_at_start": at_start}


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])  # the child imports this same perflab
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


@functools.lru_cache(maxsize=1)
def _variant_server() -> subprocess.Popen | None:
    """This job's variant server (started on first use), or None where there is no fork."""
    if not hasattr(os, "fork"):
        return None
    try:  # the server's and its children's tracebacks go where this job logs
        err = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        err = None
    server = subprocess.Popen([sys.executable, "-m", "perflab.instruments.interventions", "--serve"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                              text=True, env=_child_env())

    def stop():
        server.stdin.close()  # the end of its input: it exits
        server.wait(timeout=60)

    atexit.register(stop)
    return server


def _fresh_process_peak(contract, kind, kw, calls) -> dict[str, Any]:
    payload = json.dumps({"contract": dict(contract), "kind": kind, "kw": kw, "calls": calls,
                          "threads": torch.get_num_threads()})
    server = _variant_server()
    if server is not None:
        server.stdin.write(payload + "\n")
        server.stdin.flush()
        line = server.stdout.readline()
        return json.loads(line) if line else {
            "error": f"the variant server exited {server.poll()} (see the job's log)"}
    proc = subprocess.run([sys.executable, "-m", "perflab.instruments.interventions"], input=payload,
                          capture_output=True, text=True, env=_child_env())
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = " ".join(proc.stderr.strip().splitlines()[-2:])[:300]
        return {"error": f"the fresh process exited {proc.returncode}: {tail}"}
    return json.loads(lines[-1])


def variant_peak(contract: Mapping[str, Any], kind: str, kw: Mapping[str, Any],
                 calls: int) -> dict[str, Any]:
    """Peak memory of ``calls`` steps of one variant alone.

    CUDA: ``peak_allocated``, ``peak_reserved`` (allocator peaks, reset before
    the variant is built, so they include its parameters and optimizer state)
    and ``allocated_at_start`` (what else was live), or ``oom``. CPU:
    ``peak_rss`` (VmHWM of a fresh process running only this variant; reset
    after the imports when the kernel allows, see ``vmhwm_reset``) and
    ``rss_at_start``, or ``error``.
    """
    if torch.device(contract["device"]).type == "cuda":
        return _cuda_peak(contract, kind, dict(kw), calls)
    return _fresh_process_peak(contract, kind, dict(kw), calls)


def peak_rows(ctx, variant: str, r: Mapping[str, Any], window: str, **kw: Any) -> None:
    """An experiment's rows for one :func:`variant_peak` reading (E15-E18 share them).

    ``ctx`` is the experiment's :class:`perflab.pipeline.runner.Context`; an ``oom`` or
    ``error`` reading becomes rows of that status with its reason.
    """
    calls_kw = dict(n=1, statistic="max", window=window, **kw)
    if "oom" in r or "error" in r:
        status = "oom" if "oom" in r else "error"
        for metric in (("peak_allocated", "peak_reserved") if ctx.is_cuda else ("peak_rss",)):
            ctx.unsupported(variant=variant, metric=metric, unit="MiB", status=status,
                            reason=r.get("oom") or r.get("error"), window=window, **kw)
        return
    if ctx.is_cuda:
        sb = "allocator peak counters after a final torch.cuda.synchronize(), reset before the build"
        ctx.row(variant=variant, metric="peak_allocated", value=r["peak_allocated"], unit="MiB",
                sync_boundary=sb, **calls_kw)
        ctx.row(variant=variant, metric="peak_reserved", value=r["peak_reserved"], unit="MiB",
                sync_boundary=sb, **calls_kw)
        ctx.row(variant=variant, metric="allocated_at_start", value=r["allocated_at_start"],
                unit="MiB", sync_boundary=sb, **{**calls_kw, "statistic": "value"})
    else:
        sb = ("VmHWM of a fresh process running only this variant"
              + ("" if r.get("vmhwm_reset") else " (VmHWM reset refused: includes the imports)"))
        ctx.row(variant=variant, metric="peak_rss", value=r["peak_rss"], unit="MiB",
                sync_boundary=sb, **calls_kw)
        ctx.row(variant=variant, metric="rss_at_start", value=r["rss_at_start"], unit="MiB",
                sync_boundary=sb, **{**calls_kw, "statistic": "value"})
        for metric in ("peak_allocated", "peak_reserved"):
            ctx.unsupported(variant=variant, metric=metric, unit="MiB", window=window,
                            reason="CUDA caching-allocator counters need a CUDA device; "
                                   "the CPU row is peak_rss", **kw)


def _variant_alone(payload: Mapping[str, Any]) -> dict[str, Any]:
    """In the variant's own process: one variant, then its VmHWM (or the error)."""
    contract = payload["contract"]
    torch.set_num_threads(int(payload["threads"]))
    torch.set_flush_denormal(bool(contract.get("flush_denormal", False)))
    torch.manual_seed(contract["seed"])
    reset = memory.reset_vmhwm()  # from here on: this variant (the imports are behind us)
    at_start = memory.rss_mib()
    try:
        step = build_variant(contract, payload["kind"], **payload["kw"])
        for _ in range(payload["calls"]):
            step()
    except (RuntimeError, MemoryError, NotApplicable, ValueError) as exc:
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
    return {"peak_rss": memory.vmhwm_mib(), "rss_at_start": at_start, "vmhwm_reset": reset}


def _fork_one(line: str) -> str:
    """One variant in a child forked from this server; its reading as one JSON line."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the variant's process: no other variant ever ran in it
        os.close(r)
        os.dup2(2, 1)  # a stray print goes to the job's log, not into the reply
        code = 0
        try:
            os.write(w, json.dumps(_variant_alone(json.loads(line))).encode())
        except BaseException:
            traceback.print_exc()
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 65536):
        chunks.append(chunk)
    os.close(r)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code != 0 or not chunks:
        return json.dumps({"error": f"the variant's process exited {code} (see the job's log)"})
    return b"".join(chunks).decode()


def _serve() -> None:
    """One variant per input line, each in a child forked from this process."""
    import torch._dynamo  # noqa: F401  # a process's first optimizer imports it (1-2 s): once here

    for line in sys.stdin:
        print(_fork_one(line), flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        _serve()
    else:  # no fork on this platform: this fresh interpreter runs one variant
        print(json.dumps(_variant_alone(json.loads(sys.stdin.read()))))
