"""What an experiment declares itself with: its :class:`Experiment` entry, and the types of
its optional configuration hook (``check_config(cfg, view)``, raising :class:`ConfigProblem`).

Machinery, like the rest of the kit: it knows no experiment. Each module of
:mod:`perflab.experiments` holds an ``ENTRY = Experiment(...)``; discovery finds them there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


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
    #: True: several jobs, whose rules it keeps in workflow/rules/<slug>.smk (the
    #: Snakefile includes each); False: one job, made by workflow/rules/experiments.smk
    own_rules: bool = False
    #: the device kinds ("cpu", "cuda") on which ``perflab diagnose`` runs it: the verdict
    #: reads its rows (perflab/views/diagnose.py)
    diagnosis: tuple[str, ...] = ()
    #: True: it builds the controlled workload at the contract's own sizes, so its
    #: provenance names the run's workload as built (the ledger's header reads it)
    builds_the_contract: bool = False
    #: the variant of its ``step_latency`` median that times the controlled step with the
    #: chapter's helper (synchronized at both ends of each call, after warmup) in a fresh
    #: process of its own: a peer of the run's between-process A/A
    #: (perflab.experiments.floors.run_process_floor); "" where it has none, or where its
    #: calls time another process state (E06's also record events, E25's are A/B blocks
    #: beside another optimizer, E14's follow profiling sessions, which leave the step slower
    #: in that process: scripts/probe_profiler_aftereffect.py)
    process_peer: str = ""
    #: True: a claim of its judges a statistic by its own interval over the raw samples
    #: (:func:`perflab.kit.claims.own_interval`), so a shipped reference run keeps its samples
    claims_read_samples: bool = False

    @property
    def slug(self) -> str:
        return f"{self.eid.lower()}_{self.name}"

    @property
    def section_number(self) -> int:
        head = self.report_section.split(" ", 1)[0]
        return int(head) if head.isdigit() else 10_000


class ConfigProblem(ValueError):
    """What an experiment's ``check_config`` hook raises: the config key and what is wrong
    (the configuration names it as one error, before any job starts)."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


@dataclass(frozen=True)
class ConfigView:
    """What the configuration hands an experiment's ``check_config(cfg, view)`` hook besides
    the validated config: the run's device, whether it was checked here (a cluster's submit
    host takes it on trust), the CUDA devices visible (None: not checked here), the
    experiments selected, and the contract of an experiment (``view.contract("D01")``)."""

    device: str
    check_device: bool
    visible_cuda: int | None
    selected: tuple[str, ...]
    contract: Callable[[str], dict]
