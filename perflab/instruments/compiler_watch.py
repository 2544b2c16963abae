"""The compiler seen on a step: what torch.compile did while perflab ran the user's code.

An instrument with a small API, for every place perflab times a step (the pre-flight, an
experiment's job, ``perflab run``'s attach)::

    watch = CompilerWatch().start()
    ...                      # run the step
    report = watch.stop()    # a CompilerReport

or ``with CompilerWatch() as watch: ...`` then ``watch.report``. The report has, between
start and stop: the graphs Dynamo compiled (``graphs``; each recompile is one more),
``recompiles`` with Dynamo's own reason for each (the guard that failed), ``graph_breaks``
with their reasons, the seconds spent compiling (``compile_s``), and the frames that hit
the recompile (cache) limit and from then on run eager (``limit_hits``: a compiled step
timed after that is eager code). :meth:`CompilerReport.cause` names the cause in the
user's terms and :meth:`CompilerReport.fix` the fix.

Read from torch._dynamo's counters, its compile-time metrics, the guard-failure reasons it
computes for each recompile, and the warning it logs at the recompile limit. Nothing is
printed; nothing is changed in how the step compiles.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

#: the rows a job writes where the compiler ran on the step it times (perflab.pipeline.runner):
#: one variant, these metrics; ``execution`` says "eager" after a recompile-limit hit
VARIANT = "compiler/job"
GRAPHS, RECOMPILES, BREAKS = "graphs_compiled", "recompiles", "graph_breaks"
COMPILE_TIME, COMPILE_SHARE, EAGER_FALLBACK = "compile_time", "compile_share", "eager_fallback"
#: the experiments that compile on purpose (their compiles are the measurement, not the step's)
DELIBERATE = ("E02", "E19", "E20", "E21", "E22", "W01")


def counters() -> dict[str, int]:
    """A flat snapshot of torch._dynamo's counters ("section.key" -> count).

    ``stats.unique_graphs`` counts graphs Dynamo handed to the backend (one per
    compile or recompile); ``inductor.fxgraph_cache_hit/miss`` and
    ``aot_autograd.autograd_cache_hit/miss`` say whether the on-disk caches served them.
    """
    from torch._dynamo.utils import counters as c

    return {f"{section}.{key}": int(v) for section, d in c.items() for key, v in d.items()}


def _compile_seconds() -> float:
    """Seconds Dynamo has spent in its outer compile entry point, in this process."""
    from torch._dynamo.utils import compilation_time_metrics as m

    return float(sum(m.get("_compile.compile_inner", [])))


def _breaks() -> dict[str, int]:
    from torch._dynamo.utils import counters as c

    return {str(k): int(v) for k, v in c["graph_break"].items()}


@dataclass
class CompilerReport:
    """What the compiler did between a watch's start and stop."""

    graphs: int = 0  # graphs compiled (a recompile is one more)
    frames: int = 0  # frames Dynamo was asked to compile
    recompiles: int = 0
    reasons: list[str] = field(default_factory=list)  # the failed guard, per recompile
    graph_breaks: int = 0
    break_reasons: list[str] = field(default_factory=list)
    compile_s: float = 0.0
    limit_hits: list[str] = field(default_factory=list)  # Dynamo's warning, per frame

    @property
    def compiled(self) -> bool:
        return bool(self.frames or self.graphs)

    @property
    def eager_fallback(self) -> bool:
        """A frame hit the recompile limit: from then on it runs eager, uncompiled."""
        return bool(self.limit_hits)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "eager_fallback": self.eager_fallback,
                "cause": self.cause(), "fix": self.fix()}

    def cause(self) -> str:
        """Why it recompiled, in the user's terms ("" where it did not)."""
        texts = self.reasons + self.limit_hits
        sizes: dict[tuple[str, str], list[str]] = {}
        for r in texts:
            for name, dim, was, now in _SIZE.findall(r):
                seen = sizes.setdefault((name, dim), [])
                seen += [s for s in (was, now) if s not in seen]
        found = [(f"the batch size of {name} (its dimension 0) changed: {', '.join(seen)} "
                  "(a ragged last batch?)" if dim == "0" else
                  f"the sequence length of {name} (its dimension {dim}) changed: "
                  f"{', '.join(seen)} (padded to each batch's own length?)")
                 + (" and torch.compile(dynamic=False) specializes on every size"
                    if len(seen) > 2 else "")
                 for (name, dim), seen in sizes.items()]
        found += [c for r in texts if (c := _cause_of(r))]
        if not found:
            return self.reasons[0] if self.reasons else ""
        return "; ".join(dict.fromkeys(found))

    def fix(self) -> str:
        text = self.cause()
        fixes = [f for key, f in _FIXES if key in text]
        return "; ".join(dict.fromkeys(fixes)) or (
            "see the recompile reasons (TORCH_LOGS=recompiles)" if self.recompiles else "")


#: Dynamo's guard-failure texts, and the cause each names in the user's terms
_SIZE = re.compile(r"tensor '(.+?)' (?:size|stride) mismatch at index (\d+)\. "
                   r"expected (\d+), actual (\d+)")
_VALUE = re.compile(r"(L\['[^']+'\](?:\[[^\]]+\])*) == ([-\d.e]+)")
_TRAINING = re.compile(r"\.training")


def _cause_of(reason: str) -> str:
    """The causes other than a size (those :meth:`CompilerReport.cause` groups)."""
    if _SIZE.search(reason):
        return ""
    if _TRAINING.search(reason):
        return "the module's train/eval mode toggled"
    if m := _VALUE.search(reason):
        return f"a Python scalar changed value ({m.group(1)} was {m.group(2)})"
    return ""


_FIXES = (
    ("batch size", "drop_last=True in the DataLoader, or torch._dynamo.mark_dynamic(x, 0)"),
    ("sequence length", "torch.compile(dynamic=True) or torch._dynamo.mark_dynamic on that "
                        "dimension, or pad to a few fixed lengths (bucketed padding)"),
    ("train/eval", "compile the train and the eval step separately, or toggle less often"),
    ("Python scalar", "pass the scalar as a tensor, or mark it dynamic"),
)


class _LimitLog(logging.Handler):
    """Collects Dynamo's warning that a frame hit the recompile limit."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.hits: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "hit config." in msg:
            self.hits.append(" ".join(msg.split())[:400])


_CF = "torch._dynamo.convert_frame"
#: the watches waiting for Dynamo to be imported (each hooks it once it is)
_WAITING: list = []


class _AfterImport(importlib.abc.MetaPathFinder):
    """Calls the waiting watches once torch._dynamo.convert_frame has been imported: a job
    does not import Dynamo (seconds) to watch a step that never compiles."""

    def find_spec(self, name, path=None, target=None):
        if name != _CF or not _WAITING:
            return None
        sys.meta_path.remove(self)  # the real finders find it
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            for hook in list(_WAITING):
                hook(module)

        spec.loader.exec_module = exec_module
        return spec


_FINDER = _AfterImport()


class CompilerWatch:
    """start() / stop() -> :class:`CompilerReport`; also a context manager (``.report``).

    Where Dynamo is not imported yet at start, the watch hooks it when it is (its counters
    then start at 0 in this process: the whole of it is the watch's)."""

    def __init__(self) -> None:
        self.report: CompilerReport | None = None
        self._on = False

    def start(self) -> CompilerWatch:
        self._reasons: list[str] = []
        self._limit = _LimitLog()
        logging.getLogger(_CF).addHandler(self._limit)  # the same logger once imported
        self._cf = self._orig = None
        if _CF in sys.modules:
            self._counters, self._breaks = counters(), _breaks()
            self._compile_s = _compile_seconds()
            self._hook(sys.modules[_CF])
        else:
            self._counters, self._breaks, self._compile_s = {}, {}, 0.0
            _WAITING.append(self._hook)
            if _FINDER not in sys.meta_path:
                sys.meta_path.insert(0, _FINDER)
        self._on = True
        return self

    def _hook(self, cf: Any) -> None:
        """Each recompile's reasons as Dynamo computes them (it logs them only when asked)."""
        if self._hook in _WAITING:
            _WAITING.remove(self._hook)
        self._cf, self._orig = cf, getattr(cf, "get_and_maybe_log_recompilation_reasons", None)
        if self._orig is None:
            return

        def reasons(*a, **k):
            got = self._orig(*a, **k)
            self._reasons.append(got[0] if got else "unable to find the reason")
            return got

        cf.get_and_maybe_log_recompilation_reasons = reasons

    def stop(self) -> CompilerReport:
        if not self._on:
            raise RuntimeError("CompilerWatch.stop() without start()")
        self._on = False
        logging.getLogger(_CF).removeHandler(self._limit)
        if self._hook in _WAITING:
            _WAITING.remove(self._hook)
        if not _WAITING and _FINDER in sys.meta_path:
            sys.meta_path.remove(_FINDER)
        if self._orig is not None:
            self._cf.get_and_maybe_log_recompilation_reasons = self._orig
        if _CF not in sys.modules:  # Dynamo never loaded: nothing compiled
            self.report = CompilerReport()
            return self.report
        now, breaks = counters(), _breaks()

        def d(key: str) -> int:
            return now.get(key, 0) - self._counters.get(key, 0)

        new_breaks = {k: v - self._breaks.get(k, 0) for k, v in breaks.items()
                      if v > self._breaks.get(k, 0)}
        self.report = CompilerReport(
            graphs=d("stats.unique_graphs"), frames=d("frames.total"),
            recompiles=len(self._reasons), reasons=list(self._reasons),
            graph_breaks=sum(new_breaks.values()), break_reasons=list(new_breaks),
            compile_s=round(_compile_seconds() - self._compile_s, 3),
            limit_hits=list(self._limit.hits))
        return self.report

    def __enter__(self) -> CompilerWatch:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def write_rows(ctx: Any, report: CompilerReport, wall_s: float) -> None:
    """The compiler's rows of one job (``ctx``: a perflab.pipeline.runner.Context) that ran for
    ``wall_s`` seconds; none where nothing was compiled."""
    if not report.compiled:
        return
    execution = ("eager: a frame hit Dynamo's recompile limit and runs uncompiled"
                 if report.eager_fallback else "compiled")
    kw = dict(variant=VARIANT, execution=execution, n=1, sync_boundary="torch._dynamo's "
              "counters, compile-time metrics and recompile reasons (perflab.instruments.compiler_watch)")
    whole = "the whole job, every step it ran (warm-up and timed)"
    why = f"; cause: {report.cause()}; fix: {report.fix()}" if report.cause() else ""
    ctx.row(metric=GRAPHS, value=float(report.graphs), unit="count", window=whole, **kw)
    ctx.row(metric=RECOMPILES, value=float(report.recompiles), unit="count",
            window=whole + why, **kw)
    ctx.row(metric=BREAKS, value=float(report.graph_breaks), unit="count",
            window=whole + ("; " + "; ".join(report.break_reasons[:3])
                            if report.break_reasons else ""), **kw)
    ctx.row(metric=COMPILE_TIME, value=report.compile_s, unit="s", window=whole, **kw)
    ctx.row(metric=COMPILE_SHARE, value=100 * report.compile_s / wall_s if wall_s else 0.0,
            unit="%", window=whole + f": compile seconds over the job's {wall_s:.1f} s", **kw)
    ctx.row(metric=EAGER_FALLBACK, value=float(report.eager_fallback), unit="bool",
            window=whole + ("; " + report.limit_hits[0][:200] if report.limit_hits else ""),
            **kw)
