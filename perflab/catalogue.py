"""The experiments this pipeline runs, with the IDs of shared/catalogue.md.

One entry per implemented experiment. The Snakefile, the scripts, the ledger
and the report all take names from here, so an experiment is added by one
entry, one script and one rule.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Experiment:
    eid: str
    name: str
    title: str
    section: str  # the workflow/rules/<section>.smk that holds its rule
    #: workloads it builds; "controlled" means the configured `workload`
    workloads: tuple[str, ...] = ("controlled",)
    #: one-line statement of what it does on a machine without CUDA
    cpu_behaviour: str = "same"

    @property
    def slug(self) -> str:
        return f"{self.eid.lower()}_{self.name}"


EXPERIMENTS: dict[str, Experiment] = {
    e.eid: e
    for e in [
        Experiment(
            "E01",
            "lying_benchmark",
            "The lying benchmark: unsynchronized loops vs the synchronized step",
            "hygiene",
            cpu_behaviour="no asynchrony: backlog ~0; cold first call vs unwarmed vs warmed",
        ),
        Experiment(
            "E02",
            "four_questions",
            "How fast is the model? Four questions, eager and compiled",
            "hygiene",
        ),
        Experiment("E03", "warmup_spread", "Warmup and spread", "hygiene"),
        Experiment(
            "E04",
            "timer_vs_helper",
            "torch.utils.benchmark Timer vs the project's helper",
            "hygiene",
        ),
        Experiment(
            "E06",
            "events_vs_wall",
            "Two instruments: synchronized wall clock vs CUDA events",
            "localize",
            cpu_behaviour="wall clock only; CUDA events and host submission rows unsupported",
        ),
    ]
}
