"""The observed child: ``python -m perflab.attach.bootstrap SCRIPT [ARGS]`` (or ``-m MODULE``).

Installs the observers, then runs the script as ``__main__`` — its own ``sys.argv``, its
directory first on ``sys.path`` (as ``python SCRIPT`` would), the working directory and
environment it was started with — and writes the evidence to the file named by
``PERFLAB_ATTACH_EVIDENCE`` however the script ends: returned, stopped by the budget
(:class:`~perflab.attach.observers.StopObserved`), ``sys.exit``, or an exception (its
traceback printed as the script's, to stderr). The exit status is the script's (0 when
the budget stopped it).
"""

from __future__ import annotations

import json
import os
import runpy
import signal
import sys
import traceback
from pathlib import Path

from perflab.attach import EVIDENCE_ENV, SETTINGS_ENV

_HERE = Path(__file__).resolve().parents[1]


def _script_traceback(exc: BaseException) -> str:
    """The traceback from the script's first frame on (the bootstrap's frames dropped)."""
    tb = exc.__traceback__
    while tb is not None and (_HERE in Path(tb.tb_frame.f_code.co_filename).resolve().parents
                              or tb.tb_frame.f_code.co_filename.endswith("runpy.py")):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _no_step_alarm(obs, seconds: float) -> None:
    """Stop a script that runs no step within ``seconds``: SIGALRM raises in the main thread
    (left alone when the script installs its own handler later)."""
    from perflab.attach.observers import StopObserved

    def fire(_sig, _frame):
        if not obs.steps:
            obs.status["stopped_by"] = (f"no step within {seconds:g} s: the script never "
                                        "completed an optimizer step (or a forward)")
            raise StopObserved(obs.status["stopped_by"])

    if seconds and hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, fire)
        signal.setitimer(signal.ITIMER_REAL, seconds)


def seed_everything(seed: int) -> None:
    """Every run's RNG starts alike: python's, numpy's (if importable) and torch's (a script
    that seeds itself overrides this)."""
    import random

    import torch
    random.seed(seed)
    try:
        import numpy
        numpy.random.seed(seed)
    except ImportError:
        pass
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def _apply_patch(spec: dict, obs) -> bool:
    """Apply the intervention (perflab/attach/patches.py) before the script runs; one that
    raises here is the intervention's failure, in the evidence with its traceback."""
    from perflab.attach import patches
    try:
        patches.apply(spec, obs)
        return True
    except Exception as exc:
        text = traceback.format_exc()
        sys.stderr.write(text)
        obs.patch = {"name": spec.get("name"), "applied": False, "where": [], "detail": "",
                     "error": f"the patch raised before the script ran: {type(exc).__name__}: "
                              f"{exc}", "traceback": text[-4000:]}
        obs.status.update(exit="raised", code=1, traceback=text[-4000:],
                          exception=traceback.format_exception_only(type(exc), exc)[-1].strip())
        return False


def main(argv: list[str]) -> int:
    from perflab.attach.observers import Observer, StopObserved

    settings = json.loads(os.environ.get(SETTINGS_ENV, "{}"))
    out = os.environ[EVIDENCE_ENV]
    obs = Observer(settings, out)
    if settings.get("budget_s"):
        from perflab.attach import stopping
        obs.stop_rule = stopping
    obs.install()
    if settings.get("seed") is not None:
        seed_everything(int(settings["seed"]))
    code, status = 0, obs.status
    if settings.get("patch") and not _apply_patch(settings["patch"], obs):
        obs.close()  # the script is not run unpatched under the patch's name
        obs.flush()
        return 1
    _no_step_alarm(obs, settings.get("no_step_s", 0))
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            script = str(Path(argv[0]).resolve())
            sys.argv = [argv[0], *argv[1:]]
            sys.path[0] = str(Path(script).parent)
            runpy.run_path(script, run_name="__main__")
        status["exit"] = "returned"
    except StopObserved:
        status["exit"] = "stopped"
    except SystemExit as exc:
        c = exc.code
        code = c if isinstance(c, int) else (0 if c is None else 1)
        if not isinstance(c, (int, type(None))):
            print(c, file=sys.stderr)
        status["exit"], status["code"] = "exited", code
    except BaseException as exc:  # the script's own error: shown as the script's
        text = _script_traceback(exc)
        sys.stderr.write(text)
        status["exit"], status["code"] = "raised", 1
        status["exception"] = traceback.format_exception_only(type(exc), exc)[-1].strip()
        status["traceback"] = text[-4000:]
        if obs.patch is not None:  # the parent reports it as this intervention's failure
            obs.patch["raised"] = status["exception"]
        code = 1
    finally:
        if hasattr(signal, "SIGALRM"):
            signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            obs.close()
            if obs.work and not settings.get("no_work"):
                import torch

                from perflab.attach.observers import measure_ceilings, roofline_fractions
                obs.ceilings = measure_ceilings(obs.cuda, getattr(torch, obs.work["dtype"]))
                obs.roofline = roofline_fractions(obs)
        except Exception as exc:  # a ceiling not measured is evidence missing, said so
            obs.ceilings = {"error": f"{type(exc).__name__}: {exc}"}
        finally:
            sys.stdout.flush()
            obs.flush()
    return code


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m perflab.attach.bootstrap SCRIPT [ARGS] | -m MODULE [ARGS]")
    sys.exit(main(sys.argv[1:]))
