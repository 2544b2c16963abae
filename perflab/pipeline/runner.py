"""The experiment harness: one script = one fresh process = one experiment.

An experiment script defines ``measure(ctx)`` and ends with::

    if __name__ == "__main__":
        run("E01", measure, globals().get("snakemake"))

Under Snakemake's ``script:`` directive the job's contract, outputs and log
come from the injected ``snakemake`` object; run by hand
(``python scripts/e01_lying_benchmark.py --help``) they come from the command
line and ``config/config.yaml``. Either way the harness sets seeds and
threads, gives the process a private Inductor cache (compile caches never
leak between jobs), logs progress with elapsed time, and writes the three
outputs atomically — rows, raw samples, provenance — only if ``measure``
returns; an exception leaves no result behind.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from perflab.core import affinity, devicelock, env, forkserver, integrity, io
from perflab.core.io import log_to  # noqa: F401  (scripts import it from here too)
from perflab.core.names import STEP_LATENCY
from perflab.experiments.catalogue import EXPERIMENTS
from perflab.instruments import ab, compiler_watch, stats, steps, timing, workloads
from perflab.instruments.sequential import NO_CHANGE
from perflab.pipeline import config as cfgmod

#: the experiment scripts, whose code is part of each result's instrument code
SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


class Context:
    """What ``measure(ctx)`` works with: device, contract, instruments' sync, row sink."""

    def __init__(self, eid: str, contract: Mapping[str, Any], log: Callable[[str], None]):
        self.eid = eid
        self.experiment = EXPERIMENTS[eid]
        self.contract = dict(contract)
        self.params: dict[str, Any] = dict(contract.get("params", {}))
        self.timing: dict[str, int] = dict(contract["timing"])
        self.device = torch.device(contract["device"])
        self.is_cuda = self.device.type == "cuda"
        self.dtype = getattr(torch, contract["dtype"])
        self.sync = timing.synchronizer(self.device)
        self.device_name = env.device_name(self.device)
        self.log = log
        self.rows: list[dict[str, Any]] = []
        #: further output paths of this job (e.g. a profiler trace); written by measure()
        self.outputs: dict[str, str] = {}
        self.workloads_built: dict[str, dict[str, Any]] = {}
        self.samples: list[dict[str, Any]] = []
        #: the A/A noise floor (%) A/B judgements are held to in this job; None: not known
        self.noise_floor_pct: float | None = None
        #: the run's A/A floor (%) an adaptive A/B stops against (:meth:`interleaved`), as
        #: ``stop_floor(pairs)`` for an A/B of ``pairs`` of the fixed contract's block pairs
        #: (C00's narrows as pairs grow), read from C00's results where they were written
        #: before this job; None: not known. Only when to stop reads it: the judgement rows
        #: and the claims look the floor up themselves, at the same pair count.
        self.stop_floor: Callable[[float], float | None] | None = None
        self._defaults: dict[str, Any] = {
            "experiment": eid,
            "device": str(self.device),
            "device_name": self.device_name,
            "dtype": contract["dtype"],
            "mode": "train",
            "execution": "eager",
            "workload": contract.get("workload", ""),
            "model": "",
            "input_shape": "",
        }

    # ------------------------------------------------------------ workloads
    def workload(self, name: str | None = None, **overrides: Any) -> workloads.Workload:
        """Build a configured workload (the controlled one by default) on this device.

        Row defaults (workload, model, input shape, dtype) follow the most
        recently built workload.
        """
        name = name or self.contract["workload"]
        spec = self.contract["workloads"][name]
        params = {**spec["params"], **overrides}
        w = workloads.cast(workloads.build(spec["target"], self.device, **params), self.dtype)
        self.workloads_built[name] = {
            "target": spec["target"],
            "description": w.description,
            "optimizer": w.optimizer_name,
            "parameters": w.parameter_count(),
            "batch_size": w.batch_size,
            "input_shape": w.input_shape(),
            "dtype": str(w.dtype).removeprefix("torch."),
            "loader": type(w.loader).__name__ if w.loader is not None else "make_batch",
            "train_step": getattr(w.train_step, "__qualname__", "own") if w.train_step
            else "default (zero_grad, forward, loss, backward, step)",
        }
        self.set_defaults(
            workload=name,
            model=w.description,
            input_shape=w.input_shape(),
            dtype=str(w.dtype).removeprefix("torch."),
        )
        return w

    def trainable(
        self, name: str | None = None, *, variants: tuple[str, ...] = ("all",),
        metric: str = STEP_LATENCY, unit: str = "ms", **overrides: Any,
    ) -> tuple[workloads.Workload, torch.optim.Optimizer] | None:
        """A configured workload and a fresh optimizer for it, or None if it has none.

        A workload without an optimizer has no training step: an ``unsupported``
        row per name in ``variants`` says so (under ``metric``), and None is returned.
        """
        w = self.workload(name, **overrides)
        if w.make_optimizer is None:
            self._no_step(w, variants, metric, unit)
            return None
        return w, w.make_optimizer(w.model.parameters())

    def _no_step(self, w: workloads.Workload, variants, metric: str, unit: str) -> None:
        for variant in variants:
            self.unsupported(variant=variant, metric=metric, unit=unit,
                             reason=f"workload {w.name!r} has no optimizer: no training step")

    def step(
        self, name: str | None = None, *, resident: bool = True, batch_size: int | None = None,
        variants: tuple[str, ...] = ("all",), metric: str = STEP_LATENCY, unit: str = "ms",
        **overrides: Any,
    ) -> steps.Step | None:
        """The training step every experiment times (:func:`perflab.instruments.steps.build`).

        The configured workload's own ``train_step`` fed from its own ``loader``
        where it gives them, else the chapter's step on ``make_batch``'s batch
        (``resident``: on the device once; else on the host, copied every step;
        ``batch_size`` examples, default the workload's).
        None, with an ``unsupported`` row per name in ``variants``, for a
        workload with neither an optimizer nor a train_step of its own.
        """
        w = self.workload(name, **overrides)
        if w.make_optimizer is None and w.train_step is None:
            self._no_step(w, variants, metric, unit)
            return None
        return steps.build(w, self.device, resident=resident, batch_size=batch_size)

    def training_step(self, name: str | None = None) -> steps.Step | None:
        """The controlled training step, :meth:`step` with the chapter's resident batch."""
        return self.step(name)

    def set_defaults(self, **kw: Any) -> None:
        unknown = set(kw) - set(io.COLUMNS)
        if unknown:
            raise KeyError(f"not contract columns: {sorted(unknown)}")
        self._defaults.update(kw)

    # ------------------------------------------------------------ rows
    def row(
        self,
        *,
        variant: str,
        metric: str,
        value: float | None,
        unit: str,
        window: str,
        sync_boundary: str,
        statistic: str = "value",
        n: int = 1,
        status: str = "ok",
        reason: str = "",
        **kw: Any,
    ) -> None:
        r = {
            **self._defaults,
            **kw,
            "variant": variant,
            "metric": metric,
            "statistic": statistic,
            "value": value if status == "ok" else None,
            "unit": unit,
            "n": n,
            "window": window,
            "sync_boundary": sync_boundary,
            "status": status,
            "reason": reason,
        }
        self.rows.append(r)

    def summary(
        self,
        samples: Iterable[float],
        *,
        variant: str,
        metric: str,
        unit: str = "ms",
        window: str,
        sync_boundary: str,
        statistics: Iterable[str] = ("median", "iqr", "p25", "p75", "mean", "std", "min", "max"),
        block: int | Iterable[int] = 0,
        **kw: Any,
    ) -> dict[str, float]:
        """Summary rows for a sample series, and the raw samples for the samples file."""
        samples = list(samples)
        s = stats.summarize(samples)
        for name in statistics:
            self.row(
                variant=variant,
                metric=metric,
                value=s[name],
                unit="count" if name in ("count", "tail_count") else unit,
                window=window,
                sync_boundary=sync_boundary,
                statistic=name,
                n=len(samples),
                **kw,
            )
        blocks = [block] * len(samples) if isinstance(block, int) else list(block)
        for i, (v, b) in enumerate(zip(samples, blocks)):
            self.samples.append(
                {"experiment": self.eid, "variant": variant,
                 "execution": kw.get("execution", self._defaults["execution"]),
                 "metric": metric, "unit": unit, "block": b, "index": i, "value": v}
            )
        return s

    def ab(
        self,
        res: timing.ABResult,
        *,
        a: str,
        b: str,
        window: str,
        sync_boundary: str = "synchronized at both ends of each call; blocks interleaved AB/BA",
        metric: str = STEP_LATENCY,
        batch_size: int | None = None,
        noise_floor_pct: float | None = None,
        **kw: Any,
    ) -> dict[str, float]:
        """The rows of an interleaved A/B (:func:`perflab.instruments.ab.record`), difference ``<b>_minus_<a>``.

        The difference is judged by :func:`perflab.instruments.stats.judge` on the paired per-block
        medians against the A/A floor ``noise_floor_pct`` (default ``ctx.noise_floor_pct``);
        with ``batch_size``, each side's throughput too.
        """
        inner = len(res.a_samples) // max(len(res.a_blocks), 1)
        block_of = [i // inner for i in range(len(res.a_samples))]
        pc = ab.record(self, ab.Side(a, res.a_samples, block_of, res.a_blocks, sync_boundary),
                       ab.Side(b, res.b_samples, block_of, res.b_blocks, sync_boundary),
                       metric=metric, window=window, diff_variant=f"{b}_minus_{a}",
                       noise_floor_pct=noise_floor_pct, **kw)
        if batch_size:
            for variant, med in ((a, pc.a_median), (b, pc.b_median)):
                self.row(variant=variant, metric="throughput", value=batch_size / med * 1e3,
                         unit="examples/s", statistic="median", n=len(res.a_samples),
                         window=window, sync_boundary=timing.DRAINED_THROUGHPUT, **kw)
        return {"a": pc.a_median, "b": pc.b_median, "diff": pc.diff, "p": pc.judgement.p,
                "resolved": pc.resolved}

    def interleaved(self, fa: timing.Step, fb: timing.Step, *, blocks: int, inner: int,
                    warmup: int, variant: str, stop_at: Sequence[float] = NO_CHANGE,
                    **kw: Any) -> timing.ABResult:
        """The run's sampling contract applied to an interleaved A/B of ``blocks`` pairs of
        ``inner`` calls: under the fixed rule exactly that (:func:`timing.interleaved_ab`);
        under the adaptive one (the default) its twin (:func:`timing.sequential_ab`: blocks
        of :func:`timing.adaptive_sizes`, stopped when the per-block change is decided
        against each of ``stop_at`` and :attr:`stop_floor`), plus a ``sampling_decision`` row
        for the difference ``variant`` ("decided: ..." or "undecided within budget ...",
        which the claims read) and a ``sampling_fixed_pairs`` row (the floor's pair count).

        ``stop_at``: the thresholds (change of B vs A, % of A) the claims set this change
        against, as the experiment declares them (0: "faster"/"slower"; 5: "costs under 5 %";
        both edges of a band). The floor is the one the claim will use: for the fixed
        contract's pairs the short blocks fill so far, and, for "within the floor", for the
        most the budget allows. ``kw``: the rows' further columns (mode, execution)."""
        from perflab.kit import sampling

        if sampling.rule(self.contract) == sampling.FIXED:
            return timing.interleaved_ab(fa, fb, blocks=blocks, inner=inner, warmup=warmup,
                                         sync=self.sync)
        most, small = timing.adaptive_sizes(blocks, inner)
        at = self.stop_floor

        def floor(n: int) -> float | None:  # n short pairs: the floor of the pairs they fill
            return None if at is None else at(ab.fixed_pairs(n, small, inner))

        res, d = timing.sequential_ab(fa, fb, max_blocks=most, inner=small, warmup=warmup,
                                      sync=self.sync, floor_pct=floor, thresholds=stop_at)
        line = ab.decision_row(self, variant, d, floor, most,
                               f" of {small} calls (the fixed contract: {blocks} of {inner})",
                               **kw)
        ab.fixed_pairs_row(self, variant, d.n, small, inner, **kw)
        self.log(f"{variant}: {line}")
        return res

    def judgement(self, j: stats.Judgement, *, variant: str, window: str, unit: str = "ms",
                  **kw: Any) -> None:
        """The rows of a :class:`perflab.instruments.stats.Judgement` under an A/B's difference variant."""
        for metric, value, u, how in stats.judgement_rows(j, unit):
            self.row(variant=variant, metric=metric, value=value, unit=u, n=j.n, window=window,
                     sync_boundary=how, **kw)

    def unsupported(
        self, *, variant: str, metric: str, unit: str, reason: str, window: str = "n/a",
        sync_boundary: str = "n/a", status: str = "unsupported", **kw: Any
    ) -> None:
        self.row(variant=variant, metric=metric, value=None, unit=unit, window=window,
                 sync_boundary=sync_boundary, status=status, reason=reason, **kw)

    @property
    def sync_name(self) -> str:
        """How the chapter's sync boundary is realised on this device."""
        return "torch.cuda.synchronize()" if self.is_cuda else "a no-op: the CPU runs synchronously"


# ---------------------------------------------------------------- process set-up


class _Tee:
    def __init__(self, *streams):
        self.streams = streams

    def write(self, s):
        for st in self.streams:
            st.write(s)
            st.flush()
        return len(s)

    def flush(self):
        for st in self.streams:
            st.flush()


@contextmanager
def _logging(log_path: str | None):
    """stderr also to the job's log; a SIGTERM (Snakemake cancelling, a scheduler's limit)
    leaves "killed (signal 15, SIGTERM)" as the log's last line, then ends the process as
    the signal would (a SIGKILL cannot be caught: the fork server says that one)."""
    import signal
    import threading

    fh = None
    saved = sys.stderr
    if log_path:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        fh = open(log_path, "w")
        sys.stderr = _Tee(saved, fh)

    def terminated(signum, _frame):
        print(f"perflab: the job was {forkserver.ended(-signum)}; no result written",
              file=sys.stderr, flush=True)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    main = threading.current_thread() is threading.main_thread()
    before = signal.signal(signal.SIGTERM, terminated) if main else None
    try:
        yield
    finally:
        if main:
            signal.signal(signal.SIGTERM, before)
        sys.stderr = saved
        if fh:
            fh.close()


@contextmanager
def private_compile_cache(contract: Mapping[str, Any]):
    """A fresh Inductor/Triton cache per job unless the contract names one."""
    given = contract.get("params", {}).get("inductor_cache_dir")
    saved = {k: os.environ.get(k) for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    tmp = None
    if given:
        cache = Path(given).resolve()
    else:
        tmp = cache = Path(tempfile.mkdtemp(prefix="perflab-inductor-"))
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)
    os.environ["TRITON_CACHE_DIR"] = str(cache / "triton")
    try:
        yield str(cache)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _run_floor(csv: str | None) -> Callable[[float], float | None] | None:
    """The run's A/A floor (%) as ``floor(pairs)`` (C00's bound for an A/B of that many
    block pairs, :func:`perflab.experiments.floors.noise_floor_pct`) where C00's results lie
    beside this job's, or one folder up (a job of several, such as E20's cold one, writes
    into its experiment's own folder; the pipeline runs C00 first); None without them (the
    adaptive A/B then stops only when each threshold is excluded)."""
    from perflab.experiments import floors

    if csv is None:
        return None
    name = f"{EXPERIMENTS[floors.EID].slug}.csv"
    here = Path(csv)
    c00 = next((d / name for d in (here.parent, here.parent.parent) if (d / name).is_file()),
               None)
    if c00 is None or c00 == here:
        return None
    import pandas as pd

    frame = pd.read_csv(c00)
    if floors.noise_floor_pct(frame) is None:
        return None
    return lambda pairs: floors.noise_floor_pct(frame, pairs)


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


#: experiments whose measurement is how many losses stay finite (E15: fp16 overflow is a row)
COUNTS_NONFINITE = ("E15",)


def execute(eid: str, measure: Callable[[Context], None], contract: Mapping[str, Any],
            outputs: Mapping[str, str], log_path: str | None = None) -> Context:
    """Run ``measure`` under ``contract`` and write ``outputs`` (csv, samples, provenance)."""
    t_start = time.perf_counter()
    started_after_s = env.process_age_s()  # the process's start-up before this job's work

    def log(msg: str) -> None:
        print(f"[{eid} +{time.perf_counter() - t_start:7.1f}s] {msg}", file=sys.stderr, flush=True)

    what = f"{eid} of {contract.get('tag', '?')}"
    with _logging(log_path), private_compile_cache(contract) as cache_dir, \
            devicelock.held(contract["device"], what, log) as lock:
        torch.manual_seed(contract["seed"])
        # the cores first: every thread and worker started from here on inherits them
        cores = affinity.choose(contract.get("host_cores", "all"), contract["device"])
        if contract["threads"] != "auto":
            torch.set_num_threads(int(contract["threads"]))
        elif cores["pinned"]:  # no more intra-op threads than the cores they may run on
            torch.set_num_threads(min(torch.get_num_threads(), len(cores["kept"])))
        # subnormal floats take a slow path on x86 cores: the step time drifts upward as
        # training produces them, unless the contract says to flush them (CPU default)
        torch.set_flush_denormal(bool(contract.get("flush_denormal", False)))
        ctx = Context(eid, contract, log)
        ctx.stop_floor = _run_floor(outputs.get("csv"))
        ctx.outputs = {k: v for k, v in outputs.items() if k not in ("csv", "samples", "provenance")}
        gpu_index = ctx.device.index or 0
        started = _now()
        gpu_before = env.gpu_state(gpu_index) if ctx.is_cuda else None
        host_before = env.host_cpu_times()
        log(f"{EXPERIMENTS[eid].title} on {ctx.device} ({ctx.device_name}), "
            f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
            f"flush denormals {bool(contract.get('flush_denormal', False))}")
        log(affinity.describe(cores))
        steps.LAST_LOSS[0] = None
        watch = compiler_watch.CompilerWatch().start()
        try:
            measure(ctx)
            # a diverged step (its last loss NaN or inf) measured nothing of training
            last, steps.LAST_LOSS[0] = steps.LAST_LOSS[0], None
            if eid not in COUNTS_NONFINITE:
                # named after the workload built last (the step that ran last is its)
                name = next(reversed(ctx.workloads_built), contract.get("workload", "?"))
                target = contract.get("workloads", {}).get(name, {}).get("target", name)
                workloads.check_finite(target, last, f"the last step {eid} ran")
        except workloads.NotApplicable as exc:  # the rows so far stand; the rest cannot run
            log(f"not applicable to this workload: {exc}")
            ctx.unsupported(variant="experiment", metric="applicable", unit="bool",
                            reason=str(exc))
        except Exception:
            log("FAILED; no result written:\n" + traceback.format_exc())
            raise
        finally:
            compiled = watch.stop()
        if eid not in compiler_watch.DELIBERATE:  # the compiler on the user's step
            compiler_watch.write_rows(ctx, compiled, time.perf_counter() - t_start)
        if compiled.compiled:
            log(f"compiler: {compiled.graphs} graph(s), {compiled.recompiles} recompile(s), "
                f"{compiled.compile_s:.1f} s compiling"
                + (", EAGER after the recompile limit" if compiled.eager_fallback else "")
                + (f"; {compiled.cause()}" if compiled.cause() else ""))
        gpu_after = env.gpu_state(gpu_index) if ctx.is_cuda else None
        host_cpu = env.host_contention(host_before, env.host_cpu_times())
        lock["load_average_after"] = devicelock.loadavg()
        provenance = {
            "experiment": eid,
            "title": EXPERIMENTS[eid].title,
            "contract": dict(contract),
            "environment": env.environment_report(ctx.device, cfg_hash=env.config_hash(contract)),
            "started": started,
            "finished": _now(),
            "wall_s": round(time.perf_counter() - t_start, 3),
            "process_start_s": None if started_after_s is None else round(started_after_s, 3),
            "gpu_state_before": gpu_before,
            "gpu_state_after": gpu_after,
            "gpu_validity": env.judge_gpu_state({"gpu_state_before": gpu_before,
                                                 "gpu_state_after": gpu_after}),
            "host_cpu": host_cpu,
            "host_cores": cores,
            "inductor_cache_dir": env.portable_path(cache_dir),
            "workloads": ctx.workloads_built,
            "compiler": compiled.as_dict(),
            "argv": [env.portable_path(a) for a in sys.argv],
            "process_start": forkserver.process_start(),
            "rows": len(ctx.rows),
            "samples": len(ctx.samples),
            # the code it was measured with (the report flags results of other code) and
            # who else was measuring on the device
            "instrument_code": env.instrument_code(SCRIPTS / f"{EXPERIMENTS[eid].slug}.py"),
            "device_lock": lock,
        }
        # rows are validated before anything is written: a contract violation writes nothing
        frame = io.rows_to_frame(ctx.rows)
        if frame.empty:
            raise io.ContractError(f"{eid} measured nothing")
        io.validate_rows(frame)
        io.write_samples(outputs["samples"], ctx.samples)
        io.atomic_write_json(outputs["provenance"], provenance)
        io.write_results(outputs["csv"], ctx.rows)
        # the bytes written, so a file changed or corrupted since is measured again
        provenance["files_sha256"] = integrity.record(outputs)
        io.atomic_write_json(outputs["provenance"], provenance)
        log(f"wrote {len(ctx.rows)} rows, {len(ctx.samples)} samples -> {outputs['csv']}")
        _stop_compile_workers(log)
    return ctx


def _stop_compile_workers(log: Callable[[str], None]) -> None:
    """After the outputs: kill Inductor's compile workers rather than wait at exit for their
    polite shutdown (up to 10 s a compiling job, outside its measurement)."""
    if "torch._inductor.async_compile" not in sys.modules:
        return
    from perflab.instruments import compiling

    t0 = time.perf_counter()
    if n := compiling.stop_compile_workers():
        log(f"stopped {n} compile-worker processes in {time.perf_counter() - t0:.2f} s")


def base_parser(eid: str, description: str | None = None) -> argparse.ArgumentParser:
    """The command line every experiment script accepts when run by hand."""
    e = EXPERIMENTS[eid]
    p = argparse.ArgumentParser(
        prog=f"scripts/{e.slug}.py",
        description=description or f"{eid}: {e.title}. Runs one experiment in this process and "
        "writes its CSV, samples CSV and provenance JSON (the same files the Snakemake rule "
        "writes).",
    )
    p.add_argument("--configfile", action="append", default=[],
                   help="YAML merged over config/config.yaml (repeatable)")
    p.add_argument("--device", help="auto, cpu, cuda or cuda:N (overrides the config)")
    p.add_argument("--scale", help="auto, chapter or a name under `scales` (overrides the config)")
    p.add_argument("--outdir", help="result root (default: the config's results_dir)")
    p.add_argument("--log", help="also write the progress log here")
    return p


def config_from_args(args: argparse.Namespace) -> dict:
    """The resolved config a command line asks for; a bad value exits with its message."""
    overrides = {k: v for k, v in (("device", args.device), ("scale", args.scale)) if v}
    if args.outdir:
        overrides["results_dir"] = args.outdir
    try:
        return cfgmod.load(args.configfile, overrides)
    except cfgmod.ConfigError as exc:
        sys.exit(str(exc))


def _parse_args(eid: str, argv: list[str] | None) -> argparse.Namespace:
    return base_parser(eid).parse_args(argv)


def run(eid: str, measure: Callable[[Context], None], snakemake: Any = None,
        argv: list[str] | None = None) -> Context:
    """Entry point of every experiment script (Snakemake job or command line)."""
    if snakemake is not None:
        return execute(
            eid,
            measure,
            snakemake.params.contract,
            dict(snakemake.output.items()),
            snakemake.log[0] if snakemake.log else None,
        )
    args = _parse_args(eid, argv)
    cfg = config_from_args(args)
    return execute(eid, measure, cfgmod.contract(cfg, eid), cfgmod.experiment_outputs(cfg, eid),
                   args.log)
