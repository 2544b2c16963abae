"""Names that instruments write and readers look up, importable without torch.

The experiment modules (perflab/experiments/) are imported by the report, the figures and
the aggregation jobs, which must not pay for importing torch; the instruments that own
these names (perflab.steps, perflab.memory) re-export them from here.
"""

from __future__ import annotations

#: the chapter's seven phases of one training step, in order
PHASES = ("input_wait", "host_to_device", "forward", "loss", "backward", "optimizer", "logging")
#: the phases of the training step itself, forward to optimizer (the input arrives before
#: them, the logging read after): what a profiler range or a memory boundary brackets
STEP_PHASES = PHASES[PHASES.index("forward"):PHASES.index("optimizer") + 1]

#: the chapter's four OOM branches, in the order the decision procedure tests them
OOM_BRANCHES = ("accumulating", "persistent", "shape_dependent", "allocator")
#: what perflab.memory.diagnose_oom returns: one of the branches, or inconclusive when none fits
OOM_INCONCLUSIVE = "inconclusive"
OOM_VERDICTS = (*OOM_BRANCHES, OOM_INCONCLUSIVE)
