"""E20 — compile cost is not one number: a cold and a warm Inductor cache.

Two fresh processes compile the pointwise chain into one cache directory of
their own (``results/<tag>/e20_compile_cache/inductor_cache``):

- ``cold`` wipes the directory, then compiles (every graph and kernel built);
- ``warm``, a later process, compiles the same model reusing what cold left.

Each process: eager warmed first (so process and device start-up are not
charged to the compiler), then the first compiled call (seconds), the
compiler's own cache counters for it, the correctness column, the steady
state as an interleaved eager/compiled pair, and the break-even number of
calls: ``ceil((first - compiled) / (eager - compiled))``. The warm job writes
E20's outputs: cold's rows, its own, and warm vs cold first call.

Under Snakemake: rules ``e20_compile_cold`` then ``e20_compile_cache`` (the
warm job, which depends on the cold one). By hand::

    python scripts/e20_compile_cache.py                # cold, then warm, a fresh process each
    python scripts/e20_compile_cache.py --phase cold   # one phase in this process
"""

from perflab.core.forkserver import delegate

delegate(globals())  # a local Snakemake job runs as a fork of the run's server

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import torch

from perflab.core import io
from perflab.core.names import SYNCED_CALL as SYNCED
from perflab.experiments import e19_compile_ab as e19
from perflab.experiments import e20_compile_cache as e20
from perflab.experiments.e19_compile_ab import (
    COMPILED,
    FIRST_CALL,
    POINTWISE,
    comparison_variant,
    side_variant,
)
from perflab.instruments import compiling, timing
from perflab.pipeline import config as cfgmod
from perflab.pipeline.runner import base_parser, config_from_args, execute, run


def _cache_ready(ctx, phase: str) -> str | None:
    """Wipe the cache for the cold phase; None, or why the shared cache is not in use."""
    cache = Path(ctx.params["inductor_cache_dir"]).resolve()
    if Path(os.environ.get("TORCHINDUCTOR_CACHE_DIR", "")).resolve() != cache:
        return (f"TORCHINDUCTOR_CACHE_DIR is {os.environ.get('TORCHINDUCTOR_CACHE_DIR')!r}, "
                f"not the shared {str(cache)!r}")
    if phase == e20.COLD:
        shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    return None


def _timed_first_call(ctx, make, variant: str, phase: str, what: str, window: str,
                      counters_window: str):
    """Build a compiled forward with ``make()`` and time its first call, the compiler's
    counters around it; (the forward, first call ms, the counters' deltas), or None when
    compiling failed (an error row under ``variant``, logged under ``phase``). ``window``
    and ``counters_window`` say what the first call's and the counters' rows cover.

    One recipe for both of E20's compiles: the first compile of a phase and the cold
    job's second compile, whose rows differ only in their variant and windows.
    """
    kw = dict(mode="inference", execution="compiled")
    before = compiling.counters()
    try:
        fn = make()
        first = timing.time_first_call(fn, ctx.sync)
    except Exception as exc:
        msg = f"{what} failed: {compiling.failure(exc)}"
        ctx.log(f"{phase}: {msg}")
        ctx.unsupported(variant=variant, metric=FIRST_CALL, unit="s", status="error",
                        reason=msg, **kw)
        return None
    after = compiling.counters()
    ctx.row(variant=variant, metric=FIRST_CALL, value=first / 1e3, unit="s",
            sync_boundary=SYNCED, window=window, **kw)
    deltas = {key: compiling.delta(before, after, key) for key in e20.COMPILER_COUNTERS}
    for key, n in deltas.items():
        ctx.row(variant=variant, metric=e20.counter_metric(key), value=n, unit="count",
                window=counters_window, sync_boundary="n/a", **kw)
    return fn, first, deltas


def _first_compiled_call(ctx, phase: str, model, x, where: str):
    """Compile ``model`` and time its first call; (the compiled forward, first call ms), or
    None when compiling failed (an error row)."""
    got = _timed_first_call(
        ctx, lambda: compiling.no_grad_forward(torch.compile(model), x),
        side_variant(phase, COMPILED), phase, "torch.compile",
        f"first compiled call of the process, eager already warmed ({where})",
        "torch._dynamo.utils.counters during the first compiled call")
    return None if got is None else got[:2]


def _break_even(ctx, phase: str, first: float, d: dict) -> int | None:
    """The break-even row of one phase from its first call and the pair's medians."""
    n = compiling.break_even_calls(first, d["b"], d["a"])
    common = dict(variant=comparison_variant(phase), metric=e20.BREAK_EVEN_CALLS, unit="calls",
                  execution="compiled", n=ctx.params["blocks"], mode="inference",
                  window=f"ceil((first call - compiled steady) / (eager - compiled steady)); "
                         f"steady = medians of the pair ({d['window']})",
                  sync_boundary=SYNCED)
    if n is None:
        ctx.unsupported(reason=f"compiled steady state ({d['b']:.4f} ms) is not faster than "
                               f"eager ({d['a']:.4f} ms): compilation never pays for itself",
                        **common)
    else:
        ctx.row(value=n, **common)
    return n


def _cached_artifact_pair(ctx, model, x, fresh) -> None:
    """The cold job's second compile of a copy of the model, which Inductor serves from the
    cache the first compile wrote, timed against the first compile's own code as an
    interleaved pair in this one process: C41's steady state, like with like."""
    p, t = ctx.params, ctx.timing
    kw = dict(mode="inference", execution="compiled")
    got = _timed_first_call(
        ctx, lambda: compiling.compile_again(model, x), e20.CACHED_V, "cold",
        "the second torch.compile",
        "first call of a second compile (a copy of the model, a code object Dynamo had not "
        "seen), after the cold compile filled the cache",
        "torch._dynamo.utils.counters during the second compile's first call")
    if got is None:
        return
    loaded, first, deltas = got
    ctx.row(variant=e20.ARTIFACT_DIFF, metric=e20.MAX_ABS_DIFF,
            value=compiling.max_abs_diff(loaded(), fresh()), unit="abs", n=1,
            window="one forward of each on the same input and state",
            sync_boundary="outputs compared on the host", **kw)
    res = ctx.interleaved(fresh, loaded, blocks=p["blocks"], inner=p["inner"],
                          warmup=t["warmup"], variant=e20.ARTIFACT_DIFF,
                          stop_at=e20.STEADY_STOP_AT, **kw)
    window = (f"{timing.ab_window(res, t['warmup'])}: "
              "the cold compile's code vs the code its cache serves, one process")
    d = ctx.ab(res, a=e20.FRESH_V, b=e20.CACHED_V, window=window,
               metric=e20.FORWARD_LATENCY, mode="inference")
    for v in (e20.FRESH_V, e20.CACHED_V, e20.ARTIFACT_DIFF):
        compiling.mark_execution(ctx, v, "compiled")
    ctx.log(f"cold: second compile {first / 1e3:.2f} s (fxgraph cache hits "
            f"{deltas.get('inductor.fxgraph_cache_hit')}), steady fresh "
            f"{d['a']:.3f} ms vs cache-loaded {d['b']:.3f} ms")


def measure_phase(ctx, phase: str) -> None:
    t = ctx.timing
    kw = dict(mode="inference")
    where = ("Inductor cache wiped, then compiled into" if phase == e20.COLD
             else "fresh process reusing the cold job's Inductor cache")
    problem = _cache_ready(ctx, phase)
    cache = ctx.params["inductor_cache_dir"]
    w = ctx.workload(POINTWISE)
    w.model.eval()
    x, _ = w.batch_on(ctx.device)
    if problem:
        ctx.unsupported(variant=side_variant(phase, COMPILED), metric=FIRST_CALL, unit="s",
                        execution="compiled", status="error", reason=problem, **kw)
        return
    ctx.row(variant=e20.cache_variant(phase), metric=e20.CACHE_FILES_BEFORE,
            value=compiling.cache_files(cache), unit="count", sync_boundary="n/a",
            window=f"files in the shared cache before compiling ({where})", **kw)
    eager = compiling.no_grad_forward(w.model, x)
    timing.warm(eager, t["warmup"], ctx.sync)  # process/device start-up is not compile cost
    compiled = _first_compiled_call(ctx, phase, w.model, x, where)
    if compiled is None:
        return
    fn, first = compiled
    ctx.row(variant=e20.cache_variant(phase), metric=e20.CACHE_FILES_AFTER,
            value=compiling.cache_files(cache), unit="count", sync_boundary="n/a",
            window="files in the shared cache after the first compiled call", **kw)
    d = e19.compare_with_eager(ctx, phase, eager, fn, w.batch_size, **kw)
    n = _break_even(ctx, phase, first, d)
    if phase == e20.COLD:
        _cached_artifact_pair(ctx, w.model, x, fn)
    ctx.log(f"{phase}: first compiled call {first / 1e3:.2f} s, steady eager {d['a']:.3f} ms, "
            f"compiled {d['b']:.3f} ms, break-even {n} calls")


def _records(path: str) -> list[dict]:
    """Rows of a written CSV as dicts, a missing value as None."""
    frame = io.read_results([path])
    recs = frame.to_dict("records")
    for r in recs:
        if isinstance(r.get("value"), float) and math.isnan(r["value"]):
            r["value"] = None
    return recs


def _first_call(rows: list[dict], phase: str) -> float | None:
    for r in rows:
        if (r["variant"], r["metric"], r["status"]) == (side_variant(phase, COMPILED),
                                                        FIRST_CALL, "ok"):
            return float(r["value"])
    return None


def measure(ctx):
    phase = ctx.params["phase"]
    measure_phase(ctx, phase)
    if phase != e20.WARM:
        return
    # E20's outputs: the cold job's rows and samples, then the warm job's, then the comparison
    cold = ctx.params["cold_outputs"]
    ctx.rows[:0] = _records(cold["csv"])
    ctx.samples[:0] = pd.read_csv(cold["samples"], keep_default_na=False).to_dict("records")
    c, w = _first_call(ctx.rows, e20.COLD), _first_call(ctx.rows, e20.WARM)
    common = dict(variant=e20.WARM_VS_COLD, unit="x", execution="compiled", mode="inference",
                  window="first compiled call: warm process / cold process",
                  sync_boundary=SYNCED)
    if c is None or w is None:
        ctx.unsupported(metric=e20.FIRST_CALL_RATIO, status="error",
                        reason="a first compiled call is missing (see the cold/warm rows)",
                        **common)
        return
    ctx.row(metric=e20.FIRST_CALL_RATIO, value=w / c, **common)
    ctx.row(metric=e20.FIRST_CALL_SAVED, value=c - w, **{**common, "unit": "s",
            "window": "first compiled call: cold process - warm process"})
    ctx.log(f"first compiled call: cold {c:.2f} s, warm {w:.2f} s ({w / c:.2f}x)")


# ------------------------------------------------------------------ by hand


def run_phase(cfg: dict, phase: str, log_path: str | None = None):
    d = cfgmod.result_dir(cfg)
    contract = e20.e20_contract(cfgmod.contract(cfg, "E20"), phase, d)
    outputs = (e20.e20_cold_outputs(d) if phase == e20.COLD
               else cfgmod.experiment_outputs(cfg, "E20"))
    return execute("E20", measure, contract, outputs, log_path)


def main(argv=None) -> None:
    p = base_parser("E20", "E20: the pointwise chain compiled with a cold Inductor cache, then "
                    "with a warm one. Without --phase, runs cold then warm, each in a fresh "
                    "subprocess (a --log gets <log>.cold and <log>.warm).")
    p.add_argument("--phase", choices=e20.CACHE_PHASES,
                   help="run this one phase in this process")
    args = p.parse_args(argv)
    cfg = config_from_args(args)
    if args.phase:
        run_phase(cfg, args.phase, args.log)
        return
    passed = [a for f in args.configfile for a in ("--configfile", f)]
    for key in ("device", "scale", "outdir"):
        if getattr(args, key):
            passed += [f"--{key}", getattr(args, key)]
    for phase in e20.CACHE_PHASES:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--phase", phase, *passed]
        if args.log:
            cmd += ["--log", f"{args.log}.{phase}"]
        if subprocess.run(cmd, check=False).returncode != 0:
            sys.exit(f"E20: the {phase} phase failed")


if __name__ == "__main__":
    smk = globals().get("snakemake")
    if smk is None:
        main()
    else:
        run("E20", measure, smk)
