"""Before the pipeline's first job: the workload pre-flight and the run's time estimate.

The workflow's ``onstart`` (workflow/rules/common.smk) calls
:func:`before_first_job` once Snakemake knows which jobs will run, before it
starts any (never in a dry run). When an experiment job is among them it

1. removes the hidden temp files that jobs killed mid-write left in the result
   directory (:func:`perflab.core.io.clean_stale_temps`);
2. builds the controlled workload and runs one training step in a child process
   (:func:`perflab.instruments.workloads.check`, what ``perflab check`` runs: a builder that
   raises, a wrong return type, a forward/loss/backward/optimizer step that raises
   or a loss that is not a scalar stops the run here, naming the target), then
   times a few full-batch steps there (a child, so no CUDA context or model
   outlives it into the measured jobs);
3. estimates the measurement time, from the contracts of the jobs about to run, as
   step calls × that step time (:func:`step_calls`), and stops a run estimated
   above ``long_run_hours`` unless ``allow_long`` is set.

Any stop is one message naming the target or the keys, and no job has started.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: contract params that count calls of a step (added up)
CALL_COUNTS = ("repeats", "spread_repeats", "host_return_repeats", "steps", "iterations",
               "finite_steps", "running_mean_steps", "profiler_steps",
               "peak_calls", "snapshot_steps", "steady_step", "warmup",
               "wait", "active", "sync_steps")
#: C00's fresh processes (interpreter, torch import, device init: three kinds): seconds each,
#: not step calls. (C00's ``floor_repeats`` time empty calls and the clock: no step at all)
PROCESS_S, PROCESS_KINDS = 3.0, 3
#: list params whose sum counts calls (loop lengths, warmup counts)
CALL_LISTS = ("loops", "warmups")
#: prefixes of interleaved A/B params: ``<p>blocks`` x ``<p>inner`` calls per side (E08's
#: interleaved job: that many synchronized calls and as many free-running steps per size)
PAIRS = ("", "pair_", "aa_", "copy_", "interleaved_")
#: list params that repeat the whole measurement once per entry (a sweep)
SWEEPS = ("batches", "seqs", "precisions", "ks", "modes", "workers", "optimizers")
#: list params of a ceiling sweep (R01's matmuls): they repeat its timed ops (``*_ms`` x
#: repeats), never the step, which R01 runs once after them
CEILING_SWEEPS = ("dtypes", "matmul_sizes")
#: int params that add that many further runs of the whole measurement (E08's replicates)
REPEATS_OF_RUN = ("replicates",)
#: jobs that never run the helper at timing.repeats: R01 times its ceilings and then the
#: step once, R02 traces its own few steps (``wait``, ``warmup``, ``active``, ``sync_steps``)
NO_HELPER = ("R01", "R02")
#: full-batch steps the pre-flight times (after one untimed); under --budget, a step that
#: compiles on each is stepped on, at most EXTRA_STEPS more or until EXTRA_S s of stepping,
#: until that many steady steps come (the recompiling example reaches the recompile limit,
#: then runs eager, after 9 of its 12 lengths)
TIMED_STEPS, EXTRA_STEPS, EXTRA_S = 5, 15, 30.0
#: under --budget, on a host of this many cores or fewer, the pre-flight times its steps once the run's
#: fork server is ready (waiting at most SERVER_WAIT_S): its imports took a core of the 2-core
#: CPU while the steps were timed, which read 122 ms for a 20 ms step and put the estimate at
#: 40-60 s for a 23 s run
SMALL_HOST_CORES, SERVER_WAIT_S = 4, 30.0
#: set by ``perflab diagnose`` to the spec and answer of the pre-flight child it ran itself,
#: so the workflow does not build and step the same workload a second time
DONE_ENV = "PERFLAB_PREFLIGHT_DONE"


def step_calls(contract: Mapping[str, Any]) -> tuple[float, float]:
    """(step calls, extra seconds) one job's contract asks for — an upper-leaning estimate.

    Every job is counted as running the helper once (``timing.warmup + repeats``), plus
    each count, loop and interleaved pair its params name, times each sweep's length, and
    scaled by its largest batch over the controlled workload's. Params in seconds
    (``min_run_time_s``...) are added as time. Compiling and process start-up are not
    counted. A C00 that runs only some ``parts`` is counted for those, and the jobs in
    ``NO_HELPER`` for their own counts only.
    """
    p, t = _running(contract.get("params", {})), contract.get("timing", {})
    helper = "parts" not in p or "peers" in p["parts"]  # C00 without peers: no helper run
    calls = float(t.get("warmup", 0) + t.get("repeats", 0)) if helper else 0.0
    if contract.get("experiment") in NO_HELPER:
        calls = 0.0
    elif not helper and _int(p.get("aa_blocks")):
        calls = 2.0 * t.get("warmup", 0)  # the A/A's warmup, each side
    calls += sum(p[k] for k in CALL_COUNTS if _int(p.get(k)))
    calls += sum(sum(p[k]) for k in CALL_LISTS if isinstance(p.get(k), list))
    if isinstance(p.get("loops"), list) and _int(p.get("loop_rounds")):
        calls += (p["loop_rounds"] - 1) * sum(p["loops"])  # E01 runs its loops in rounds
    if isinstance(p.get("warmups"), list) and _int(p.get("repeats")):
        calls += len(p["warmups"]) * p["repeats"]  # one series per warmup count
    calls += sum(2 * p[f"{x}blocks"] * p[f"{x}inner"] for x in PAIRS
                 if _int(p.get(f"{x}blocks")) and _int(p.get(f"{x}inner")))
    sweep = math.prod(len(p[k]) for k in SWEEPS if isinstance(p.get(k), list) and p[k])
    sweep *= _planned(p)
    sweep += sum(p[k] for k in REPEATS_OF_RUN if _int(p.get(k)))
    batches = [b for b in (p.get("batches") or []) + [p.get("batch")] if _int(b)]
    base = _controlled_batch(contract)
    scale = max(1.0, max(batches, default=0) / base) if base else 1.0
    ceilings = math.prod(len(p[k]) for k in CEILING_SWEEPS if isinstance(p.get(k), list)
                         and p[k])
    seconds = sum(float(v) for k, v in p.items() if k.endswith("_s") and _num(v))
    seconds += sum(float(v) / 1e3 for k, v in p.items() if k.endswith("_ms") and _num(v)) \
        * max(1, p.get("repeats", 1) if _int(p.get("repeats")) else 1) * sweep * ceilings
    if _int(p.get("process_repeats")):
        seconds += p["process_repeats"] * PROCESS_KINDS * PROCESS_S
    return calls * sweep * scale, seconds


def _running(p: Mapping[str, Any]) -> dict[str, Any]:
    """``p`` without the params of C00's parts that do not run (its ``parts``)."""
    if "parts" not in p:
        return dict(p)
    from perflab.experiments.c00_calibration import PART_PARAMS

    idle = {k for part, keys in PART_PARAMS.items() if part not in p["parts"] for k in keys}
    return {k: v for k, v in p.items() if k not in idle}


def _planned(p: Mapping[str, Any]) -> int:
    """W01's plan job stands for the interventions it plans (their jobs are known only once
    it has run): one A/B per intervention named, each of them under ``all``."""
    if "interventions" not in p:
        return 1
    from perflab.experiments.w01_whatif import whatif

    try:
        return max(1, len(whatif.selected(p["interventions"])))
    except (TypeError, ValueError):
        return 1


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _controlled_batch(contract: Mapping[str, Any]) -> int | None:
    spec = contract.get("workloads", {}).get(contract.get("workload", ""), {})
    b = spec.get("params", {}).get("batch")
    return b if _int(b) and b else None


def estimate_s(contracts: Iterable[Mapping[str, Any]], step_ms: float,
               probes: Mapping[str, float] | None = None) -> dict[str, float]:
    """{experiment: estimated seconds} over the jobs' contracts, at ``step_ms`` a step call.
    ``probes`` (:func:`probe_instruments`): R01's and R02's instruments costed from what the
    pre-flight measured of them, not as step calls (on the 2-core CPU, 4.0 and 2.2 s against
    an estimate of 1 and 0 s: R01's ceilings run at matmul and copy speed whatever the step,
    R02's window at the profiler's)."""
    out: dict[str, float] = {}
    for c in contracts:
        calls, extra = step_calls(c)
        eid = str(c.get("experiment", "?"))
        probed = INSTRUMENT_COSTS.get(eid) if probes else None
        s = probed(_running(c.get("params", {})), c.get("timing", {}), step_ms, probes) \
            if probed else calls * step_ms / 1e3 + extra
        out[eid] = out.get(eid, 0.0) + s
    return out


#: set by ``perflab diagnose --budget``: the pre-flight child also probes what R01's and R02's
#: instruments cost on this step and machine (:func:`probe_instruments`)
PROBE_ENV = "PERFLAB_PREFLIGHT_PROBE"
#: the intra-op threads a job will run with (a local job takes the cores it is given: one
#: under --cores 1), under which the probes of host copies run: on an H100's 16-core host the
#: pre-flight's copy ran at 170 GB/s on every core where R01's, on one, ran at 11
PROBE_THREADS_ENV = "PERFLAB_PREFLIGHT_PROBE_THREADS"
#: the probe's profiled window (warm-up, active steps), matmul size and copy size; on CUDA
#: a matmul of 512 ran far below the rate of R01's 8192 (an H100: R01 estimated at 27 s, run
#: in 10), so there the probe times 2048 (17 GFLOP, ~1 ms in float32), in bfloat16 too
PROBE_WINDOW, PROBE_MATMUL_N, PROBE_COPY_MIB = (1, 2), {"cpu": 512, "cuda": 2048}, 64
#: R01's dtypes that run at the probed bfloat16 rate where it was probed
HALF_DTYPES = ("bfloat16", "float16")


def probe_instruments(step, device, sync) -> dict[str, float]:
    """What the estimate of R01 and R02 needs, measured on the pre-flight's step: the wall of
    a short profiled window with its trace exported, read and attributed
    (``profile_window_s``), a step with its FLOPs and bytes counted (``counted_step_s``), on
    CUDA a step under the sync debug mode (``sync_locate_s``), a
    float32 matmul's rate (``matmul_flops``, and bfloat16's on CUDA), each copy's ms per MiB
    (``<kind>_ms_per_mib``) and a buffer's fill (``host_fill_ms_per_mib``; pinned on CUDA,
    ``pinned_fill_ms_per_mib``)."""
    import tempfile

    import torch

    from perflab.core.names import PHASES
    from perflab.instruments import profiling, roofline, syncs, timing, trace

    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="perflab-probe-") as tmp:
        t0 = time.perf_counter()
        path = profiling.profile_window(step, device=device, sync=sync,
                                        warmup=PROBE_WINDOW[0], active=PROBE_WINDOW[1],
                                        trace_path=Path(tmp) / "probe.json.gz")
        # R02 reads and attributes its trace too: on a GPU step of ~1,000 kernels and ~100
        # syncs that was most of its job (its estimate 3 s, its job 10 s on an H100)
        trace.attribute(trace.read_chrome_trace(path, PHASES))
        out["profile_window_s"] = time.perf_counter() - t0
    # R01 counts one step's FLOPs and bytes first, every op through Python (on an H100 ~0.8 s
    # of a 15 ms step's R01, which a step call's time put at 15 ms)
    if hasattr(step, "next_batch"):  # a phased step (steps.Step), as R01 counts
        t0 = time.perf_counter()
        roofline.counted_step(step)
        out["counted_step_s"] = time.perf_counter() - t0
    cuda = torch.device(device).type == "cuda"
    if cuda:  # R02 locates its syncs under the sync debug mode: a stack per sync
        t0 = time.perf_counter()
        syncs.located(step, 1)
        out["sync_locate_s"] = time.perf_counter() - t0
    n = PROBE_MATMUL_N["cuda" if cuda else "cpu"]
    with _job_threads():  # a CPU's matmul and every host copy run on R01's threads
        for key, dtype in (("matmul_flops", torch.float32),
                           *((("matmul_flops_bf16", torch.bfloat16),) if cuda else ())):
            mm = roofline.matmul_op(n, dtype, device)
            out[key] = 2 * n ** 3 / (min(timing.time_calls(mm, warmup=1, repeats=3,
                                                           sync=sync)) / 1e3)
        out.update(_copy_probes(device, sync))
    return out


@contextlib.contextmanager
def _job_threads():
    """torch's intra-op threads set to a job's (:data:`PROBE_THREADS_ENV`) for the block."""
    import torch

    want, before = int(os.environ.get(PROBE_THREADS_ENV) or 0), torch.get_num_threads()
    if want > 0:
        torch.set_num_threads(want)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _copy_probes(device, sync) -> dict[str, float]:
    """Each copy's ms per MiB (``<kind>_ms_per_mib``) and a buffer's fill
    (``host_fill_ms_per_mib``, pinned on CUDA: ``pinned_fill_ms_per_mib``)."""
    import torch

    from perflab.instruments import roofline, timing

    out: dict[str, float] = {}
    cuda = torch.device(device).type == "cuda"
    for kind in ["host_memcpy"] + (["device_to_device", "host_to_device"] if cuda else []):
        fn, _ = roofline.copy_op(kind, PROBE_COPY_MIB * 2 ** 20, torch.device(device))
        ms = min(timing.time_calls(fn, warmup=1, repeats=3, sync=sync))
        out[f"{kind}_ms_per_mib"] = ms / PROBE_COPY_MIB
    # R01 builds each copy's buffers before timing it: a host buffer filled, and on CUDA
    # pinned ones (page-locking 1 GiB twice and filling one: ~1.5 s of its 5 s on an H100,
    # where its timed copies were ~0.5 s)
    n = PROBE_COPY_MIB * 2 ** 18  # float32 elements
    for key, pinned in (("host_fill_ms_per_mib", False),
                        *((("pinned_fill_ms_per_mib", True),) if cuda else ())):
        t0 = time.perf_counter()
        buffer = torch.ones(n, pin_memory=pinned)
        out[key] = (time.perf_counter() - t0) * 1e3 / PROBE_COPY_MIB
        del buffer
    return out


def _samples_s(per_call_ms: float, target_ms: float, repeats: int) -> float:
    """One calibrated measurement of roofline.per_call_ms: its repeats, a warm-up and the
    inner count's calibration, each sample at least ``target_ms`` long."""
    return (repeats + 2) * max(target_ms, per_call_ms) / 1e3


def _r01_s(p: Mapping[str, Any], t: Mapping[str, Any], step_ms: float,
           probes: Mapping[str, float]) -> float:
    """R01: its matmul ceilings (each size, each dtype and the contract's, at the probed
    float32 rate: upper-leaning where a lower precision is faster), its copies (host memcpy;
    on CUDA device-to-device and both ways over the link), a cache-resident copy, and the
    step's phases at ``repeats`` + warm-up calls plus one counted step."""
    target, reps = float(p["target_ms"]), int(p["repeats"])
    # each dtype at its probed rate (a half precision at bfloat16's where probed), and the
    # contract's dtype once more at float32's
    rates = [probes.get("matmul_flops_bf16", probes["matmul_flops"]) if d in HALF_DTYPES
             else probes["matmul_flops"] for d in sorted(set(p["dtypes"]))]
    rates.append(probes["matmul_flops"])
    s = sum(_samples_s(2 * n ** 3 / rate * 1e3, target, reps)
            for n in p["matmul_sizes"] for rate in rates)
    host_mib, copy_mib = float(p["host_copy_mib"]), float(p["copy_mib"])
    s += _samples_s(host_mib * probes["host_memcpy_ms_per_mib"], target, reps)
    s += host_mib * probes.get("host_fill_ms_per_mib", 0.0) / 1e3  # its source, filled
    for kind, times in (("device_to_device", 1), ("host_to_device", 2)):
        if f"{kind}_ms_per_mib" in probes:
            s += times * _samples_s(copy_mib * probes[f"{kind}_ms_per_mib"], target, reps)
    # each way over the link has its pinned buffer (one filled, one empty: both at the
    # fill's rate, the page-locking dominates)
    s += 2 * copy_mib * probes.get("pinned_fill_ms_per_mib", 0.0) / 1e3
    s += _samples_s(0.0, target, reps)  # the cache-resident copy
    counted = probes.get("counted_step_s", step_ms / 1e3)  # its counted step, where probed
    return s + (reps + int(t.get("warmup", 0))) * step_ms / 1e3 + counted


def _r02_s(p: Mapping[str, Any], t: Mapping[str, Any], step_ms: float,
           probes: Mapping[str, float]) -> float:
    """R02: its profiled window (warm-up + active steps) at the probe window's cost per step
    (the profiler's overhead and the trace's export and reading all grow with the steps), its
    warm-up steps, the free-running stretches (FREE_STRETCHES of ``active`` steps) and the
    sync-locating steps."""
    from perflab.experiments.r02_step_trace import FREE_STRETCHES

    window = int(p["warmup"]) + int(p["active"])
    per = probes["profile_window_s"] / sum(PROBE_WINDOW)
    # a located step: its stacks where the probe timed one (CUDA), else a step call
    locate_s = probes.get("sync_locate_s", step_ms / 1e3)
    # its warm-up (timing.warmup steps, 30) and free-running stretches at the step's time:
    # the warm-up was left out where an H100's R02 ran 6.2 s against an estimate of 3.6 s
    free = (int(t.get("warmup", 0)) + FREE_STRETCHES * int(p["active"])) * step_ms / 1e3
    return window * per + free + int(p["sync_steps"]) * locate_s


#: the jobs whose instruments, not step calls, set their time, costed from the probes
INSTRUMENT_COSTS = {"R01": _r01_s, "R02": _r02_s}


def _duration(s: float) -> str:
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:.1f} {unit}"
    return f"{s:.0f} s"


def check_estimate(cfg: Mapping[str, Any], contracts: list[Mapping[str, Any]],
                   step_ms: float, probes: Mapping[str, float] | None = None) -> str:
    """The estimate as a log line; raises SystemExit above the limit without ``allow_long``."""
    per = estimate_s(contracts, step_ms, probes)
    total = sum(per.values())
    top = ", ".join(f"{e} {_duration(s)}" for e, s in sorted(per.items(), key=lambda x: -x[1])[:3])
    limit_h = float(cfg.get("long_run_hours", 4))
    line = (f"estimated measurement time {_duration(total)} for {len(contracts)} job(s) "
            f"(longest: {top}), from the contracts' step calls x {step_ms:.2f} ms, the "
            "controlled step timed just now" + (", R01 and R02 from probes of their "
                                                "instruments" if probes else "")
            + "; compiling and start-up not counted")
    if total > limit_h * 3600 and str(cfg.get("allow_long", False)).lower() != "true":
        sys.exit(f"perflab: {line}. That is above the limit of {limit_h:g} h "
                 "(long_run_hours): pass --config allow_long=true to run it anyway, or lower "
                 "the repeats and sizes. No job has started.")
    return line


# ---------------------------------------------------------------- the child process


def workload_spec(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """What the child builds: the controlled workload on the resolved device and dtype."""
    from perflab.pipeline import config as cfgmod

    target, params = cfgmod.workload_spec(cfg)
    return {"target": target, "params": params, "device": cfg["resolved_device"],
            "dtype": cfg["dtype"], "tag": cfg["resolved_tag"]}


def _key(spec: Mapping[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True, default=str)


def done_env(spec: Mapping[str, Any], answer: Mapping[str, Any]) -> dict[str, str]:
    """The environment entry telling the workflow this spec was pre-flighted with this answer."""
    return {DONE_ENV: json.dumps({"spec": _key(spec), "answer": dict(answer)})}


def _done_already(spec: Mapping[str, Any]) -> dict[str, Any] | None:
    """The answer of a pre-flight of this very spec that ran before Snakemake (``DONE_ENV``)."""
    try:
        done = json.loads(os.environ.get(DONE_ENV, "") or "{}")
    except ValueError:
        return None
    ok = isinstance(done, dict) and done.get("spec") == _key(spec)
    return done.get("answer") if ok and isinstance(done.get("answer"), dict) else None


#: seconds the pre-flight child may take (build, check, a few steps) before it is stopped
TIMEOUT_S = 1800


def _ended(returncode: int) -> str:
    from perflab.core.forkserver import ended

    return ended(returncode)


def run_child(spec: Mapping[str, Any], timeout_s: float | None = None,
              env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run :func:`main` in a fresh interpreter on ``spec`` (in ``env``, default this
    process's); its answer.

    The answer travels in a file of its own, never on stdout: a workload (or its libraries)
    may print anything there, a JSON line included. A child that blocks past ``timeout_s``
    (:data:`TIMEOUT_S`) is stopped, and one that ends without an answer is named with how it
    ended; both name the target."""
    import tempfile

    timeout_s = TIMEOUT_S if timeout_s is None else timeout_s
    target = spec.get("target", "?")
    with tempfile.TemporaryDirectory(prefix="perflab-preflight-") as tmp:
        answer_path = Path(tmp) / "answer.json"
        # PERFLAB_PREFLIGHT tells a workload it is being checked, not measured
        try:
            proc = subprocess.run([sys.executable, "-m", "perflab.pipeline.preflight", str(answer_path)],
                                  input=json.dumps(spec), capture_output=True, text=True,
                                  timeout=timeout_s,
                                  env={**(os.environ if env is None else env),
                                       "PERFLAB_PREFLIGHT": "1"})
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": f"workload {target!r}: the pre-flight (build, check "
                                          f"and {1 + TIMED_STEPS} steps) did not finish within "
                                          f"{timeout_s:g} s and was stopped: does the builder "
                                          "or the step block (a lock, input(), a network wait)?"}
        try:
            answer = json.loads(answer_path.read_text())
        except (OSError, ValueError):
            answer = None
    if isinstance(answer, dict) and "ok" in answer:
        return answer
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {"ok": False, "error": f"workload {target!r}: the pre-flight process ended "
                                  f"({_ended(proc.returncode)}) without an answer"
                                  + (": " + " | ".join(tail) if tail else "")}


def measure_step(spec: Mapping[str, Any]) -> dict[str, Any]:
    """Check the workload (:func:`perflab.instruments.workloads.check`), then time the step every
    experiment times (:func:`perflab.instruments.steps.build`: the workload's own ``train_step`` on its
    own ``loader`` where it gives them), a few calls after one untimed."""
    import torch

    from perflab.core import devicelock
    from perflab.instruments import steps, timing, workloads
    from perflab.instruments.compiler_watch import CompilerWatch

    device = torch.device(spec["device"])
    if device.type == "cuda" and not torch.cuda.is_available():
        device = torch.device("cpu")  # a cluster's submit host: check the builder here
    # the device's start (a CUDA context, its libraries read from disk) timed apart from the
    # build and first step: a job forked from the run's server pays the build and first step
    # again but starts its device as the server's probe fork did (forkserver.probe_s)
    t_init = time.perf_counter()
    if device.type == "cuda":
        torch.zeros(1, device=device).add_(1).item()
    init_s = round(time.perf_counter() - t_init, 2)
    t_check = time.perf_counter()
    imported_before = set(sys.modules)
    w = workloads.check(spec["target"], device, **dict(spec["params"]))
    out = {"ok": True, "device": str(device), "description": w.description,
           "batch": w.batch_size, "step_ms": None, "input_shape": w.input_shape(),
           "parameters": w.parameter_count(), "optimizer": w.optimizer_name,
           "device_init_s": init_s, "check_s": round(time.perf_counter() - t_check, 2)}
    if w.make_optimizer is None and w.train_step is None:
        return out  # no training step (the experiments write unsupported rows)
    out["server_wait_s"] = round(_wait_for_server(), 2)
    t_lock = time.perf_counter()
    with devicelock.held(device, f"pre-flight of {spec.get('tag', '?')}",
                         lambda m: print(f"perflab: {m}", file=sys.stderr, flush=True)):
        t_steps = time.perf_counter()
        out["lock_wait_s"] = round(t_steps - t_lock, 2)
        w = workloads.cast(w, getattr(torch, spec.get("dtype", "float32")))
        step = steps.build(w, device)
        sync = timing.synchronizer(device)
        times, compiling = [], []
        whole = CompilerWatch().start()
        # under --budget a step that compiles again and again (a recompile per shape, until
        # the recompile limit makes it eager) is stepped on until steady steps come: the
        # split needs a step time and is never made from compile time
        more = bool(os.environ.get(PROBE_ENV))
        i = 0
        while i < 1 + TIMED_STEPS or (more and len(times) < TIMED_STEPS
                                      and i < 1 + TIMED_STEPS + EXTRA_STEPS
                                      and time.perf_counter() - t_steps < EXTRA_S):
            watch = CompilerWatch().start()
            sync()
            t0 = time.perf_counter()
            loss = step()
            sync()
            ms = (time.perf_counter() - t0) * 1e3
            got = watch.stop()
            if i:  # a step that compiled (or met the recompile limit) is not a steady step
                (compiling if got.graphs or got.limit_hits else times).append(ms)
            i += 1
        seen = whole.stop()
        out["stepped"] = i
        workloads.check_finite(spec["target"], loss, f"after {i} full-batch steps")
        if os.environ.get(PROBE_ENV) and out.get("ok"):
            t_probe = time.perf_counter()
            try:
                out["probes"] = probe_instruments(step, device, sync)
            except Exception as exc:  # an estimate's input: R01/R02 fall back to step calls
                out["probe_error"] = f"{type(exc).__name__}: {exc}"
            out["probe_s"] = round(time.perf_counter() - t_probe, 2)
    out.update(_steady(times, compiling, seen))
    out["steps_s"] = round(time.perf_counter() - t_steps, 2)  # with the probes: no start-up
    out[LIBRARY_MODULES] = library_modules(imported_before, spec["target"])
    if os.environ.get(PROBE_ENV):
        del w, step, loss  # the first build's memory, before the second
        try:
            out["check_warm_s"] = _check_again(spec, device)
        except Exception as exc:  # an estimate's input: the first check stands for it
            out["probe_error"] = f"second check: {type(exc).__name__}: {exc}"
    return out


#: the answer's key for :func:`library_modules` (taken out of it before it travels in the
#: environment: thousands of names)
LIBRARY_MODULES = "library_modules"


def library_modules(before: set[str], target: str = "") -> list[str]:
    """The modules imported since ``before`` from outside the working directory (installed
    libraries, wherever they are installed), in import order, leaves only (importing
    ``a.b.c`` imports ``a`` and ``a.b``): what building and stepping the workload imported,
    which a job forked from the run's server would import again unless the server has
    (perflab.core.forkserver.preload). Never perflab's modules, the target's own package nor
    code under the working directory: a job imports those fresh."""
    here = os.path.join(os.path.realpath(os.getcwd()), "")
    own = {"perflab", target.split(":")[0].split(".")[0], "__main__"}
    names = []
    for name, module in list(sys.modules.items()):
        if name in before or name.split(".")[0] in own or module is None:
            continue
        path = getattr(module, "__file__", None)
        if path and not os.path.realpath(path).startswith(here):
            names.append(name)
    parents = {n.rsplit(".", i)[0] for n in names for i in range(1, n.count(".") + 1)}
    return [n for n in names if n not in parents]


def _check_again(spec: Mapping[str, Any], device) -> float:
    """Seconds of a second build and first step, the first one's memory freed. The first
    check paid the libraries' first use in a process (on CUDA 4.3-6.5 s on an H100, where a
    job's whole start was 2-3 s; on the 2-core CPU it put the estimate 29-38 % over two
    walls, -8 % and +12 % with this), which a job forked after the server's probe pays in the probe's
    time (:func:`perflab.core.forkserver.probe_s`), not in its check."""
    import gc

    import torch

    from perflab.instruments import workloads

    gc.collect()
    torch.cuda.empty_cache()
    t0 = time.perf_counter()
    workloads.check(spec["target"], device, **dict(spec["params"]))
    return round(time.perf_counter() - t0, 2)


def _wait_for_server() -> float:
    """On a small host under --budget, wait for the run's fork server to be ready (its imports
    done) before the steps are timed; the seconds waited (0 where there is no server, no
    budget or cores to spare)."""
    from perflab.core import forkserver

    sock = os.environ.get(forkserver.ENV_SOCKET)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    # only a --budget's split reads the step time closely enough to wait for it
    if not sock or not os.environ.get(PROBE_ENV) or (cores or 1) > SMALL_HOST_CORES:
        return 0.0
    return forkserver.wait_ready(sock, SERVER_WAIT_S)


def _steady(times: list[float], compiling: list[float], seen) -> dict[str, Any]:
    """The steady step (the median of the timed steps that compiled nothing) and what the
    compiler did; no step time where every timed step compiled: an estimate is never made
    from compile time."""
    out: dict[str, Any] = {"compile_steps": len(compiling),
                           "compiler": seen.as_dict() if seen.compiled else None}
    out["step_ms"] = sorted(times)[len(times) // 2] if times else None
    # the fastest timed step: closest to the warmed, steady step the jobs time (on a loaded
    # CPU the pre-flight's few early steps read 5-9x the jobs' median); --budget splits by it
    out["step_min_ms"] = min(times) if times else None
    if not times:
        out["no_steady_step"] = (f"every one of the {len(compiling)} timed steps compiled "
                                 f"({seen.cause() or 'see the compiler'}): no steady step to "
                                 "estimate from (never from compile time)")
    elif seen.eager_fallback:
        out["eager_note"] = ("the steady steps ran after torch.compile's recompile limit: "
                             "they are eager, not compiled")
    return out


def main(answer_path: str) -> int:
    """The child: check and time ``stdin``'s spec; the answer goes to ``answer_path`` only.
    Under --budget it compiles into a fresh cache, as each job does (runner's
    private_compile_cache): a warm one read 0.8 s for 7 graphs that took a job 24.8 s."""
    import contextlib

    from perflab.instruments.workloads import WorkloadError
    from perflab.pipeline.runner import private_compile_cache

    spec = json.loads(sys.stdin.read())
    try:
        with (private_compile_cache({}) if os.environ.get(PROBE_ENV)
              else contextlib.nullcontext()):
            answer = measure_step(spec)
    except WorkloadError as exc:
        answer = {"ok": False, "error": str(exc)}
    except SystemExit as exc:  # the builder or step called sys.exit: say so, not silence
        answer = {"ok": False, "error": f"workload {spec['target']!r} called sys.exit("
                                        f"{exc.code!r}) while being built or stepped"}
    except Exception as exc:  # the step at full batch raised (e.g. out of memory)
        answer = {"ok": False, "error": f"workload {spec['target']!r}: a full-batch training "
                                        f"step raised ({type(exc).__name__}: {exc})"}
    Path(answer_path).write_text(json.dumps(answer))
    return 0 if answer["ok"] else 1


# ---------------------------------------------------------------- onstart


def clean_result_temps(result_dir: str | Path, log) -> list[Path]:
    """Remove the temps that jobs killed mid-write left anywhere under ``result_dir``."""
    from perflab.core import io

    root = Path(result_dir)
    removed = []
    for d in [root, *(p for p in root.rglob("*") if p.is_dir())] if root.is_dir() else []:
        for tmp in io.clean_stale_temps(d):
            log(f"removed {tmp}, left by a job killed while writing")
            removed.append(tmp)
    return removed


def child_split(answer: Mapping[str, Any], wall_s: float) -> str:
    """Where the child's time went: its start (interpreter, imports, device), the check, the
    timed steps — so a slow pre-flight says which part was slow."""
    probe = float(answer.get("probe_s") or 0.0)  # steps_s holds the probes' time too
    parts = {"device start": answer.get("device_init_s", 0.0),
             "check": answer.get("check_s", 0.0),
             "a second check": answer.get("check_warm_s", 0.0),
             "waiting for the fork server's imports": answer.get("server_wait_s", 0.0),
             "waiting for the device lock":
             answer.get("lock_wait_s", 0.0),
             f"{answer.get('stepped', 1 + TIMED_STEPS)} full-batch steps":
             max(float(answer.get("steps_s") or 0.0) - probe, 0.0),
             "R01/R02 probes": probe}
    start = max(wall_s - sum(parts.values()), 0.0)
    return ", ".join(f"{k} {v:.1f} s" for k, v in {"start": start, **parts}.items()
                     if v >= 0.05 or k not in ("R01/R02 probes", "device start",
                                               "a second check")
                     and "waiting" not in k)


def before_first_job(cfg: Mapping[str, Any], contracts: list[Mapping[str, Any]],
                     result_dir: str, log=None) -> None:
    """The checks of the module doc, for the experiment jobs about to run (``contracts``)."""
    from perflab.kit import sampling

    log = log or (lambda m: print(f"perflab: {m}", file=sys.stderr, flush=True))
    if not contracts:
        return
    clean_result_temps(result_dir, log)
    spec = workload_spec(cfg)
    t0 = time.perf_counter()
    done = _done_already(spec)
    answer = done or run_child(spec)
    wall_s = time.perf_counter() - t0
    if not answer["ok"]:
        sys.exit(f"perflab: pre-flight failed, no job has started: {answer['error']}")
    # a pre-flight perflab diagnose ran before Snakemake: its answer, not a second child
    how = ("(the answer of perflab diagnose's pre-flight)" if done else
           f"in {wall_s:.1f} s: " + child_split(answer, wall_s))
    log(f"pre-flight: {spec['target']} builds and steps on {answer['device']} "
        f"({answer['description']}, batch {answer['batch']}) {how}")
    if answer.get("compiler"):
        c = answer["compiler"]
        log(f"pre-flight: torch.compile compiled {c['graphs']} graph(s) in "
            f"{c['compile_s']:.1f} s over {answer.get('compile_steps', 0)} of the timed steps "
            "(set apart from the steady step)"
            + (f"; {c['cause']}; fix: {c['fix']}" if c.get("cause") else "")
            + ("; " + answer["eager_note"] if answer.get("eager_note") else ""))
    if answer["step_ms"] is None and answer.get("no_steady_step"):
        log(f"{answer['no_steady_step']}: no time estimate")
    elif answer["step_ms"] is None:
        log("no training step (the workload has no optimizer): no time estimate")
    elif answer["device"] != spec["device"]:
        log(f"checked on {answer['device']}, not {spec['device']} (not visible here): "
            "no time estimate")
    elif sampling.budget_s(cfg) is None:
        log(check_estimate(cfg, contracts, float(answer["step_ms"]), answer.get("probes")))
    # under a budget its split, printed before Snakemake, is the run's estimate: the fixed
    # counts' (C00 8 s where its share was 29 s) read to a newcomer as a second, contrary one


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
