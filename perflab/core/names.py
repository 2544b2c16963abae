"""Names that instruments write and readers look up, importable without torch.

The experiment modules (perflab/experiments/) are imported by the report, the figures and
the aggregation jobs, which must not pay for importing torch; the instruments that own
these names (perflab.instruments.steps, perflab.instruments.memory) re-export them from here.
"""

from __future__ import annotations

#: the chapter's seven phases of one training step, in order
PHASES = ("input_wait", "host_to_device", "forward", "loss", "backward", "optimizer", "logging")
#: what a phase's name alone does not say: an attached script's "logging" is everything the
#: other six phases do not hold (gradient clipping, the scheduler, zero_grad, its logs)
PHASE_NOTES = {"logging": "and the rest: clipping, scheduler, zero_grad"}
#: the phases of the training step itself, forward to optimizer (the input arrives before
#: them, the logging read after): what a profiler range or a memory boundary brackets
STEP_PHASES = PHASES[PHASES.index("forward"):PHASES.index("optimizer") + 1]

#: the chapter's four OOM branches, in the order the decision procedure tests them
OOM_BRANCHES = ("accumulating", "persistent", "shape_dependent", "allocator")
#: what perflab.instruments.memory.diagnose_oom returns: one of the branches, or inconclusive when none fits
OOM_INCONCLUSIVE = "inconclusive"
OOM_VERDICTS = (*OOM_BRANCHES, OOM_INCONCLUSIVE)

#: the roofline's rates and fractions (%) of the ceilings (perflab.instruments.roofline.fractions)
ACHIEVED_FLOPS, ACHIEVED_BANDWIDTH = "achieved_flops", "achieved_bandwidth"
ARITHMETIC_INTENSITY = "arithmetic_intensity"
FLOPS_FRACTION, BANDWIDTH_FRACTION = "flops_fraction", "bandwidth_fraction"
ROOFLINE_FRACTION = "roofline_fraction"

# ------------------------------------------------------------------ quantities and boundaries
#: the one name of each quantity most experiments write (one owner: import it from here)
STEP_LATENCY = "step_latency"  # ms per training step (the row's statistic says which)
THROUGHPUT = "throughput"  # examples per second
#: an adaptive A/B's calls counted in block pairs of the fixed contract's length: the pair
#: count its A/A floor is looked up at (shorter blocks are noisier: counting them as pairs of
#: the floor's own length would hold the A/B to too narrow a floor)
SAMPLING_FIXED_PAIRS = "sampling_fixed_pairs"
PHASE_SHARE = "phase_share"  # a phase's share of the step (%)
#: a quantity sampled in rounds until decided (sampling.rule adaptive): the row's reason is
#: its one line, "decided: ..." or "undecided within budget (...)"
#: (perflab.instruments.sequential.Decision.line); its value and unit say what was sampled:
#: an A/B's block pairs run (unit "blocks", the line also leads its window), a share's or the
#: A/A floor's estimate (unit "%")
SAMPLING_DECISION = "sampling_decision"
#: the sync boundaries a timed row names (its ``sync_boundary`` column)
SYNCED_CALL = "synchronized at both ends of each call"
SYNCED_PHASES = "device synchronized at each phase boundary"
