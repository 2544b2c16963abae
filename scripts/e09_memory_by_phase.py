"""E09 — where memory goes: allocated after each phase, cold and steady, and the hidden peak.

The controlled training step runs ``steady_step`` times in this fresh process.
On the first (cold) step and on the steady step, ``torch.cuda.memory_allocated``
is read at each phase boundary (start, zero_grad, forward, loss, backward,
optimizer), and ``max_memory_allocated`` over the step (peaks reset at its
start). The hidden peak is the step's peak minus the largest boundary reading:
bytes that were live only inside a phase.

The persistent breakdown after the steady step counts the tensors themselves
(each distinct storage once): parameters, gradients, optimizer state; "other"
is the allocator's allocated minus those three (CUDA only). The optimizer
state appearing on the first ``.step()`` is read both ways: the state's bytes
before and after step 1, and the allocator's jump across step 1's optimizer
phase.

On a CPU there is no allocator counter: the phase rows are ``unsupported``,
each step's peak is the process's peak resident set (VmHWM, reset before the
step), and the breakdown has no "other" (its percentages are of the counted
tensors).
"""

import gc

from perflab import memory
from perflab.runner import run

#: the boundaries the chapter reads, in step order
BOUNDARIES = ("start", "zero_grad", "forward", "loss", "backward", "optimizer")
MiB = memory.MiB


def _phased_step(ctx, w, opt, x, y, read):
    """One training step with ``read()`` at each boundary; returns {boundary: MiB}."""
    r = {"start": read()}
    opt.zero_grad(set_to_none=True)
    r["zero_grad"] = read()
    out = w.model(x)
    r["forward"] = read()
    loss = w.loss_fn(out, y)
    r["loss"] = read()
    loss.backward()
    r["backward"] = read()
    opt.step()
    r["optimizer"] = read()
    del out, loss  # the step's locals end here, as in a training loop
    return r


def measure(ctx):
    p = ctx.params
    steady = int(p["steady_step"])
    parts = ctx.trainable(variants=("cold", "steady"), metric="peak_allocated", unit="MiB")
    if parts is None:
        return
    w, opt = parts
    x, y = w.batch_on(ctx.device)
    cuda = ctx.is_cuda

    def read() -> float:
        ctx.sync()
        return memory.cuda_counters(ctx.device).allocated_mib if cuda else float("nan")

    sync_b = ("read after torch.cuda.synchronize()" if cuda
              else "read after the step returned (the CPU runs synchronously)")
    state_before = memory.bytes_of_optimizer_state(opt) / MiB
    gc.collect()
    readings, peaks = {}, {}
    for i in range(1, steady + 1):
        label = "cold" if i == 1 else ("steady" if i == steady else None)
        ctx.sync()
        if cuda:
            memory.reset_cuda_peaks(ctx.device)
            reset = True
        else:
            reset = memory.reset_vmhwm()
        r = _phased_step(ctx, w, opt, x, y, read)
        ctx.sync()
        if label is None:
            continue
        readings[label] = r
        if cuda:
            c = memory.cuda_counters(ctx.device)
            peaks[label] = {"peak_allocated": c.max_allocated_mib,
                            "peak_reserved": c.max_reserved_mib}
        else:
            peaks[label] = {"peak_rss": memory.vmhwm_mib(), "reset": reset}
        if i == 1:
            state_after_first = memory.bytes_of_optimizer_state(opt) / MiB

    for label, i in (("cold", 1), ("steady", steady)):
        step_name = f"step {i} of {steady}" + (" (the first of this process)" if i == 1 else "")
        for b in BOUNDARIES:
            v = f"{label}/{b}"
            window = f"{step_name}: after {b}" if b != "start" else f"{step_name}: before zero_grad"
            if cuda:
                ctx.row(variant=v, metric="allocated", value=readings[label][b], unit="MiB",
                        window=f"{window}; torch.cuda.memory_allocated", sync_boundary=sync_b)
            else:
                ctx.unsupported(variant=v, metric="allocated", unit="MiB", reason=(
                    "torch.cuda.memory_allocated needs a CUDA device; a CPU process has no "
                    "live-tensor counter, and RSS at a boundary would include freed-but-kept "
                    "heap pages"))
        if cuda:
            pk = peaks[label]
            top = max(readings[label].values())
            win = f"{step_name}: over the whole step (peak counters reset at its start)"
            ctx.row(variant=label, metric="peak_allocated", value=pk["peak_allocated"],
                    unit="MiB", window=f"{win}; torch.cuda.max_memory_allocated",
                    sync_boundary=sync_b)
            ctx.row(variant=label, metric="peak_reserved", value=pk["peak_reserved"],
                    unit="MiB", window=f"{win}; torch.cuda.max_memory_reserved",
                    sync_boundary=sync_b)
            ctx.row(variant=label, metric="max_boundary_allocated", value=top, unit="MiB",
                    window=f"{step_name}: the largest of the six boundary readings",
                    sync_boundary=sync_b)
            ctx.row(variant=label, metric="hidden_peak", value=pk["peak_allocated"] - top,
                    unit="MiB", window=(f"{step_name}: peak allocated minus the largest "
                                        "boundary reading: live only inside a phase"),
                    sync_boundary=sync_b)
        else:
            pk = peaks[label]
            span = ("VmHWM reset to the current RSS before the step" if pk["reset"]
                    else "VmHWM since the process started (the kernel refused the reset)")
            ctx.row(variant=label, metric="peak_rss", value=pk["peak_rss"], unit="MiB",
                    window=f"{step_name}: peak resident set of this whole process; {span}",
                    sync_boundary=sync_b)
            for metric in ("peak_allocated", "peak_reserved", "hidden_peak"):
                ctx.unsupported(variant=label, metric=metric, unit="MiB", reason=(
                    "allocator peak counters need a CUDA device; the CPU row is peak_rss "
                    "(whole process, not a tensor ledger)"))

    # the optimizer state appears on the first .step()
    acct = "tensor accounting: bytes of the optimizer's per-parameter state tensors"
    ctx.row(variant="optimizer_state", metric="state_before_first_step", value=state_before,
            unit="MiB", window=f"before step 1; {acct}", sync_boundary="n/a (host bookkeeping)")
    ctx.row(variant="optimizer_state", metric="state_after_first_step", value=state_after_first,
            unit="MiB", window=f"after step 1's optimizer phase; {acct}",
            sync_boundary="n/a (host bookkeeping)")
    if cuda:
        jump = readings["cold"]["optimizer"] - readings["cold"]["backward"]
        ctx.row(variant="optimizer_state", metric="first_step_allocated_jump", value=jump,
                unit="MiB", window="step 1: allocated after optimizer minus after backward",
                sync_boundary=sync_b)
    else:
        ctx.unsupported(variant="optimizer_state", metric="first_step_allocated_jump",
                        unit="MiB", reason="needs torch.cuda.memory_allocated (CUDA only)")

    # persistent breakdown after the steady step (grads are present until the next zero_grad)
    parts_mib = {
        "parameters": memory.bytes_of_parameters(w.model) / MiB,
        "gradients": memory.bytes_of_gradients(w.model) / MiB,
        "optimizer_state": memory.bytes_of_optimizer_state(opt) / MiB,
    }
    persistent = sum(parts_mib.values())
    when = f"after step {steady}'s optimizer phase"
    if cuda:
        total = readings["steady"]["optimizer"]
        parts_mib["other"] = total - persistent
        denom = f"of allocated {when} (torch.cuda.memory_allocated)"
    else:
        total = persistent
        denom = "of the counted tensors (parameters + gradients + optimizer state)"
    for name, mib in parts_mib.items():
        how = ("allocated minus the three counted parts" if name == "other"
               else "tensor accounting: distinct storages' bytes")
        ctx.row(variant=f"persistent/{name}", metric="bytes", value=mib, unit="MiB",
                window=f"{when}; {how}", sync_boundary="n/a (host bookkeeping)")
        ctx.row(variant=f"persistent/{name}", metric="share", value=100 * mib / total,
                unit="%", window=f"{when}; share {denom}", sync_boundary="n/a (host bookkeeping)")
    if not cuda:
        ctx.unsupported(variant="persistent/other", metric="bytes", unit="MiB", reason=(
            "'other' is allocated minus the counted tensors; allocated is CUDA only"))
    ctx.row(variant="persistent", metric="bytes", value=persistent, unit="MiB",
            window=f"{when}; parameters + gradients + optimizer state (tensor accounting)",
            sync_boundary="n/a (host bookkeeping)")
    if cuda:
        ctx.row(variant="persistent", metric="share", value=100 * persistent / total, unit="%",
                window=f"{when}; share {denom}", sync_boundary="n/a (host bookkeeping)")
        act = readings["steady"]["forward"] - readings["steady"]["zero_grad"]
        ctx.row(variant="activations", metric="bytes", value=act, unit="MiB",
                window=f"step {steady}: allocated after forward minus after zero_grad "
                "(live forward state at the boundary)", sync_boundary=sync_b)
    else:
        ctx.unsupported(variant="activations", metric="bytes", unit="MiB",
                        reason="live forward state is read from torch.cuda.memory_allocated "
                        "(CUDA only)")
    if cuda:
        ctx.log("cold: " + " ".join(f"{b}={readings['cold'][b]:.1f}" for b in BOUNDARIES)
                + f" peak={peaks['cold']['peak_allocated']:.1f}")
        ctx.log("steady: " + " ".join(f"{b}={readings['steady'][b]:.1f}" for b in BOUNDARIES)
                + f" peak={peaks['steady']['peak_allocated']:.1f}")
    ctx.log(f"persistent {persistent:.1f} MiB; optimizer state {state_before:.1f} -> "
            f"{state_after_first:.1f} MiB on the first step")


if __name__ == "__main__":
    run("E09", measure, globals().get("snakemake"))
