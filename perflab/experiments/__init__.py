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
- the names of the variants and metrics its script writes, and small accessors the
  cross-experiment views (ledger, diagnosis) call instead of re-typing those names.

Nothing registers an experiment: a module here whose name is ``<letter><two digits>_<name>``
and that defines ``ENTRY`` is one.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass
from functools import cache
from types import ModuleType

_MODULE_NAME = re.compile(r"^[a-z]\d\d_\w+$")


@dataclass(frozen=True)
class Experiment:
    eid: str
    name: str
    title: str
    #: the part of the chapter it belongs to (hygiene, localize, memory, ...); its rule,
    #: named after its slug, is made by workflow/rules/experiments.smk (or multi_job.smk)
    rules: str
    #: workloads it builds; "controlled" means the configured `workload`
    workloads: tuple[str, ...] = ("controlled",)
    #: one-line statement of what it does on a machine without CUDA
    cpu_behaviour: str = "same"
    #: further files the job writes beside csv/samples/provenance: name -> file suffix
    extra_outputs: tuple[tuple[str, str], ...] = ()
    #: the report's heading for it: "<chapter section number> · <title>"
    report_section: str = ""
    #: the devices it needs to run under ``run: all``: with more than one, it runs there only
    #: on a machine with that many CUDA devices, else only when named (``run: all,D01``)
    devices: int = 1
    #: False: left out of ``run: all`` (the default chapter run) on any machine, run only
    #: when named (``run: all,W01``, its rule as a target) or by the command that owns it
    #: (W01: ``perflab whatif``, the last step of ``perflab diagnose``)
    in_all: bool = True
    #: True: a claim of its judges a statistic by its own interval over the raw samples
    #: (:func:`perflab.claims.own_interval`), so a shipped reference run keeps its samples
    claims_read_samples: bool = False

    @property
    def slug(self) -> str:
        return f"{self.eid.lower()}_{self.name}"

    @property
    def section_number(self) -> int:
        head = self.report_section.split(" ", 1)[0]
        return int(head) if head.isdigit() else 10_000


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
