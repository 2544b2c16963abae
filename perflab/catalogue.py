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
        # C00 first: the harness calibrates itself before any experiment (rule priority)
        Experiment(
            "C00",
            "calibration",
            "Calibration: the harness's own floors, the A/A noise floor, and peer timers",
            "calibration",
            cpu_behaviour="CUDA-event and do_bench rows unsupported; sync is a no-op, so its "
            "cost is a Python call",
        ),
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
            "E09",
            "memory_by_phase",
            "Where memory goes: allocated after each phase, cold and steady, and the hidden peak",
            "memory",
            cpu_behaviour="the phase table is n/a (no allocator counter); peak RSS (VmHWM) over "
            "the measured steps, and the persistent breakdown by tensor accounting",
        ),
        Experiment(
            "E10",
            "oom_decomposition",
            "An out-of-memory error decomposed: persistent, shape-dependent, accumulating, "
            "allocator",
            "memory",
            workloads=("oom_mlp",),
            cpu_behaviour="no per-process allocator cap: the OOM and its diagnosis are "
            "unsupported rows; the evidence (parameter, gradient and optimizer-state bytes by "
            "tensor accounting, RSS across repeated steps) is measured",
        ),
        Experiment(
            "E11",
            "retained_leak",
            "The accumulating branch: a retained reference grows memory linearly",
            "memory",
            cpu_behaviour="RSS instead of allocated (no allocator counter; empty_cache n/a); "
            "the retained graph's saved-tensor bytes are counted on both devices",
        ),
        Experiment(
            "E12",
            "alloc_reserved_smi",
            "Allocated, reserved, max reserved and NVML: four counters, four stories",
            "memory",
            cpu_behaviour="allocator and NVML counters are unsupported rows; the process RSS "
            "around the same large tensor is measured instead",
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
        # E19-E24
        Experiment(
            "E19",
            "compile_ab",
            "torch.compile on a GEMM-bound MLP vs a pointwise chain: interleaved A/B",
            "interventions",
            workloads=("controlled", "pointwise"),
            cpu_behaviour="same (Inductor's C++ backend); peak-memory rows unsupported",
        ),
        Experiment(
            "E20",
            "compile_cache",
            "Compile cost: a cold and a warm Inductor cache, and the break-even",
            "interventions",
            workloads=("pointwise",),
        ),
        Experiment(
            "E21",
            "recompile",
            "Recompilation: new shapes, dynamic=True, modes, and a graph break under fullgraph",
            "interventions",
            workloads=("pointwise",),
            cpu_behaviour="same; reduce-overhead and max-autotune without CUDA graphs",
        ),
        Experiment(
            "E22",
            "matrix",
            "A benchmark matrix: eager/compiled x fp32/AMP on the training step",
            "interventions",
            cpu_behaviour="bfloat16 autocast; peak-memory rows unsupported",
        ),
        Experiment(
            "E24",
            "input_pipeline",
            "Input pipeline: input-wait share vs num_workers, pageable vs pinned copies",
            "interventions",
            cpu_behaviour="num_workers sweep only; pinned and non_blocking rows unsupported",
        ),
        Experiment(
            "R01",
            "roofline",
            "Roofline: this device's measured ceilings and each phase's achieved fraction",
            "diagnose",
            cpu_behaviour="host memcpy is the bandwidth ceiling; host-device copies unsupported",
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
