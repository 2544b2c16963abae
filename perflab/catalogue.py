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
    #: further files the job writes beside csv/samples/provenance: name -> file suffix
    extra_outputs: tuple[tuple[str, str], ...] = ()

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
            "E05",
            "phases",
            "Localize: the seven phases of the step, with and without per-phase sync",
            "localize",
            cpu_behaviour="host-to-device is a no-op copy and sync is a no-op: no backlog to absorb",
        ),
        Experiment(
            "E06",
            "events_vs_wall",
            "Two instruments: synchronized wall clock vs CUDA events",
            "localize",
            cpu_behaviour="wall clock only; CUDA events and host submission rows unsupported",
        ),
        Experiment(
            "E07",
            "optimizers",
            "Intervene: the optimizer step in isolation, and fused vs foreach AdamW",
            "localize",
        ),
        Experiment(
            "E08",
            "batch_sweep",
            "Latency, throughput and peak memory across batch sizes",
            "localize",
            cpu_behaviour="peak RSS (VmHWM) of each batch size's fresh process instead of "
            "allocator counters; a scaled batch range",
        ),
        Experiment(
            "E13",
            "sync_tax",
            "The synchronization tax of a per-step host read",
            "localize",
            workloads=("controlled", "small_mlp"),
            cpu_behaviour="same (no device queue, so the tax is expected to be ~0)",
        ),
        Experiment(
            "E14",
            "profiler",
            "The profiler localizes; it does not measure",
            "localize",
            cpu_behaviour="CPU activity only: times per range and operator are host times",
            extra_outputs=(("trace", "_trace.json.gz"),),
        ),
        Experiment(
            "E23",
            "instrument_cost",
            "Forensic vs performance mode: what each instrument costs",
            "localize",
        ),
        Experiment(
            "E25",
            "worked_pass",
            "A worked pass: measure, localize, intervene (AdamW foreach to fused), remeasure",
            "localize",
        ),
        Experiment(
            "E15",
            "amp",
            "Mixed precision: numerics, time and memory of fp32, autocast fp16 and bf16",
            "interventions",
            cpu_behaviour="CPU autocast (bf16; fp16 where it runs, else unsupported rows); "
            "peak RSS (VmHWM) of a fresh process per variant",
        ),
        Experiment(
            "E16",
            "checkpointing",
            "Activation checkpointing at two batch sizes: peak memory, time, correctness",
            "interventions",
            cpu_behaviour="peak RSS (VmHWM) of a fresh process per variant; scaled batches",
        ),
        Experiment(
            "E17",
            "accumulation",
            "Gradient accumulation: gradient equivalence, time and peak memory against K",
            "interventions",
            cpu_behaviour="same with a smaller full batch; peak RSS (VmHWM) of a fresh process "
            "per K",
        ),
        Experiment(
            "E18",
            "attention_seq",
            "Attention against sequence length: manual vs scaled_dot_product_attention",
            "interventions",
            workloads=("attention",),
            cpu_behaviour="a smaller T range; no memory cap (CUDA allocator only): peak RSS "
            "(VmHWM) of a fresh process per variant",
        ),
    ]
}
