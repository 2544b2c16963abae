"""One module per experiment: what reads its rows, found by listing this package.

``perflab/experiments/<slug>.py`` (e.g. ``e05_phases.py``) is the read side of the job
``scripts/<slug>.py``. It holds:

- ``ENTRY``: its :class:`Experiment` (id, name, title, rule file, report section, CPU
  behaviour, extra outputs);
- ``table(frame)``: the chapter's table for it, from the long result frame;
- ``figure(rows, samples)``: its figure, whose docstring is the report's caption
  (plotting is imported inside, so a timing job that imports the module for its names
  never imports matplotlib);
- its claims (``@claim`` functions, registered on import), or ``NO_CLAIMS``, the reason
  it has none;
- optionally ``check_config(cfg, view)``: the checks of its own parameters a schema cannot
  make, raising :class:`ConfigProblem` (the configuration calls it; it knows no experiment);
- the names of the variants and metrics its script writes, and small accessors the
  cross-experiment views (ledger, diagnosis) call instead of re-typing those names.

Nothing registers an experiment: a module here whose name is ``<letter><two digits>_<name>``
and that defines ``ENTRY`` is one.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import textwrap
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

# what a slice declares itself with; re-exported, the names slices and readers import
from perflab.kit.experiment import ConfigProblem, ConfigView, Experiment  # noqa: F401

if TYPE_CHECKING:
    import pandas as pd

_MODULE_NAME = re.compile(r"^[a-z]\d\d_\w+$")


@cache
def modules() -> dict[str, ModuleType]:
    """Every experiment module of this package, by experiment id, in the chapter's order.

    The order is the report's: chapter section, then id (C00, the calibration, first).
    """
    found: dict[str, ModuleType] = {}
    for info in pkgutil.iter_modules(__path__):
        if not _MODULE_NAME.match(info.name):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        entry = getattr(mod, "ENTRY", None)
        if not isinstance(entry, Experiment):
            raise TypeError(f"{mod.__name__} defines no ENTRY = Experiment(...)")
        if entry.slug != info.name:
            raise ValueError(f"{mod.__name__}: ENTRY's slug is {entry.slug!r}, "
                             f"but the module is named {info.name!r}")
        if entry.eid in found:
            raise ValueError(f"{entry.eid} is defined by both {found[entry.eid].__name__} "
                             f"and {mod.__name__}")
        found[entry.eid] = mod
    return dict(sorted(found.items(), key=lambda kv: (kv[1].ENTRY.section_number, kv[0])))


def module(eid: str) -> ModuleType:
    """The module of experiment ``eid`` (e.g. "E05"); a KeyError names the known ones."""
    mods = modules()
    try:
        return mods[eid.upper()]
    except KeyError:
        raise KeyError(f"no experiment {eid!r}; known: {', '.join(mods)}") from None


# ------------------------------------------------------------------ dispatch by id
# The kit (tables, figures, claims) is machinery that knows no experiment; what one
# experiment's table, figure or claims are is answered here, by its module.


def table(eid: str, frame: pd.DataFrame) -> pd.DataFrame:
    """The table of experiment ``eid`` (e.g. "E01") from the result rows."""
    return module(eid).table(frame)


def make_figure(eid: str, csv_path: str | Path, samples_path: str | Path | None,
                out_png: str | Path) -> Path:
    """Draw experiment ``eid``'s figure and write it atomically to ``out_png``."""
    from perflab.core import io
    from perflab.kit import figures

    rows = io.read_results([csv_path])
    figures.apply_style()
    return figures.save(module(eid).figure(rows, figures.read_samples(samples_path)), out_png)


def caption(eid: str) -> str:
    """Experiment ``eid``'s figure caption: the docstring of its module's ``figure()``."""
    return inspect.getdoc(module(eid).figure) or ""


def caption_rst(eid: str, failure: str | None = None) -> str:
    """The caption as `snakemake --report` reads it: reStructuredText through Jinja.

    The docstring is kept verbatim (``{% raw %}``); a figure that failed says so first.
    """
    failed = (f"**The figure could not be drawn:**\n\n::\n\n{textwrap.indent(failure, '    ')}\n\n"
              if failure else "")
    return f"{{% raw %}}\n{failed}{caption(eid)}\n{{% endraw %}}\n"


def draw_figures(plan: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """Draw each figure of ``plan`` and write its caption; return {eid: why} of those that failed.

    ``plan``: one mapping per experiment with ``eid``, ``csv``, ``samples``, ``png`` and
    ``caption`` (paths). One failure does not stop the others: its traceback goes to
    stderr, its PNG and its caption say that it failed and why.
    """
    import matplotlib.pyplot as plt

    from perflab.core import io
    from perflab.kit import figures

    failed: dict[str, str] = {}
    for job in plan:
        eid = job["eid"]
        try:
            make_figure(eid, job["csv"], job["samples"], job["png"])
        except Exception as exc:
            traceback.print_exc()
            plt.close("all")  # whatever the failed drawing left open
            failed[eid] = f"{type(exc).__name__}: {exc}"
            entry = modules()[eid].ENTRY if eid in modules() else _Untitled(eid)
            figures.save(figures.failure_figure(entry, failed[eid]), job["png"])
        io.atomic_write_text(Path(job["caption"]), caption_rst(eid, failed.get(eid)))
    return failed


@dataclass(frozen=True)
class _Untitled:
    """An id this checkout has no module for, titled by its id."""
    eid: str

    @property
    def title(self) -> str:
        return self.eid


def claim_registry() -> dict:
    """Every claim, by id in numeric order: each experiment module registers its own on
    import (:func:`perflab.kit.claims.claim`), so every module is imported first."""
    from perflab.kit import claims

    modules()
    return claims.registered()


def process_peers() -> tuple[tuple[str, str], ...]:
    """(experiment, variant) of every job that times the controlled step with the helper in
    a fresh process of its own, as each experiment declares (``Experiment.process_peer``):
    the peers of the run's between-process floor (perflab.experiments.floors)."""
    return tuple((eid, m.ENTRY.process_peer) for eid, m in modules().items()
                 if m.ENTRY.process_peer)


def run_floors():
    """The run-wide floors the claims are judged by, handed to them as data."""
    from perflab.experiments import floors

    return floors.RunFloors(process_peers())


def evidence(rows: pd.DataFrame, samples: pd.DataFrame | None = None):
    """A run's rows (and raw samples) as the claims read them, with the run-wide floors of
    :mod:`perflab.experiments.floors` (:class:`perflab.kit.claims.Evidence`)."""
    from perflab.kit import claims

    return claims.Evidence(rows, samples, run_floors())


def evaluate_claims(rows: pd.DataFrame, claims: dict | None = None,
                    samples: pd.DataFrame | None = None,
                    processes: dict | None = None) -> pd.DataFrame:
    """claims.csv of a run (:func:`perflab.kit.claims.evaluate`), every claim judged with the
    run-wide noise floors of :mod:`perflab.experiments.floors` handed in as data."""
    from perflab.kit import claims as kit

    return kit.evaluate(rows, claims if claims is not None else claim_registry(),
                        samples=samples, processes=processes, floors=run_floors())
