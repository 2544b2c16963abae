"""Where a step synchronizes the host with the device: torch's sync debug mode, with frames.

``torch.cuda.set_sync_debug_mode("warn")`` makes every operation that makes
the host wait for the device (``.item()``, a boolean-mask select's
``nonzero``, a device-to-host copy) raise a ``UserWarning`` ("called a
synchronizing CUDA operation") at the Python line that called it.
:func:`located` runs a few steps in that mode and records, for each warning,
the phase the step was in (the hooks of :mod:`perflab.instruments.phases`) and the frame
that made the call: the innermost one outside torch and outside perflab's
harness, so the user's line (or, for the chapter's own step, its loss).

It counts and locates; it does not time (the profiler's trace does:
:mod:`perflab.instruments.trace`). A CUDA-only instrument: a CPU has no device queue to
synchronize with.
"""

from __future__ import annotations

import linecache
import os
import sys
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path

from perflab.instruments import phases as ph
from perflab.instruments.trace import BETWEEN

#: the text of torch's warning (c10's warn_or_error_on_sync)
SYNC_WARNING = "called a synchronizing CUDA operation"
#: perflab's own harness files: a frame in them is never the step's
_HARNESS = {Path(ph.__file__).resolve().parent / name
            for name in ("phases.py", "steps.py", "syncs.py", "runner.py")}


@dataclass(frozen=True)
class Hit:
    """One synchronizing call: the step it happened in, its phase and the frame that made it."""

    step: int
    phase: str
    frame: str


def _torch_dir() -> Path:
    import torch

    return Path(torch.__file__).resolve().parent


def _short(path: str) -> str:
    """``path`` as importable from ``sys.path`` (e.g. ``mypkg/losses.py``), never a machine path."""
    p = Path(path).resolve()
    best = p.name
    for entry in sys.path:
        try:
            rel = p.relative_to(Path(entry or os.getcwd()).resolve())
        except (ValueError, OSError):
            continue
        if len(str(rel)) < len(best) or best == p.name:
            best = str(rel)
    return best.replace(os.sep, "/")


def user_frame(stack: list[traceback.FrameSummary], torch_dir: Path) -> str:
    """The innermost frame outside torch, the warnings machinery and perflab's harness:
    ``file.py:line in function: source``; "" when every frame is theirs."""
    for fr in reversed(stack):
        path = Path(fr.filename).resolve() if fr.filename and not fr.filename.startswith("<") \
            else None
        if path is None or path in _HARNESS or path.name == "warnings.py" \
                or torch_dir in path.parents:
            continue
        line = (fr.line or linecache.getline(fr.filename, fr.lineno or 0)).strip()
        return f"{_short(fr.filename)}:{fr.lineno} in {fr.name}" + (f": {line}" if line else "")
    return ""


class _Tracker:
    """A phase listener (:func:`perflab.instruments.phases.observe`) that remembers the current phase."""

    def __init__(self) -> None:
        self.phase: str | None = None

    def enter(self, phase: str | None) -> None:
        self.phase = phase


def located(step, steps: int) -> list[Hit]:
    """Run ``steps`` calls of ``step`` (a :class:`perflab.instruments.steps.Step`) in the sync debug mode's
    ``warn`` setting; one :class:`Hit` per synchronizing call. The mode is restored after."""
    import torch

    torch_dir = _torch_dir()
    tracker, hits, current = _Tracker(), [], [0]

    def record(message, category, filename, lineno, file=None, line=None):
        if SYNC_WARNING in str(message):
            hits.append(Hit(current[0], tracker.phase or BETWEEN,
                            user_frame(traceback.extract_stack(), torch_dir)))

    before = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = record
        try:
            torch.cuda.set_sync_debug_mode("warn")
            for i in range(steps):
                current[0] = i
                ph.observe(step, tracker)
        finally:
            torch.cuda.set_sync_debug_mode(before)
    return hits
