"""E16, activation checkpointing: at a small and a large batch, what does recomputing each
block's activations in backward cost in step time, and how much peak memory does it save —
with the gradients unchanged? Measured by scripts/e16_checkpointing.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.kit.claims import Absent, Part, against_floor, claim, judge_parts, pct
from perflab.kit.experiment import Experiment
from perflab.kit.tables import largest, make_table, peak_metric, pick, prefixed_numbers, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ENTRY = Experiment(
    "E16",
    "checkpointing",
    "Activation checkpointing at two batch sizes: peak memory, time, correctness",
    "interventions",
    cpu_behaviour="peak RSS (VmHWM) of a fresh process per variant; scaled batches",
    report_section="15 · Activation checkpointing",
)

#: its parameters (config key ``experiments.E16``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
batches:
  type: array
  items: {type: integer, minimum: 1}
  minItems: 1
  default: [256, 4096]
blocks: {type: integer, minimum: 1, default: 6}
inner: {type: integer, minimum: 1, default: 20}
# untimed calls of each variant before the blocks; null: timing.warmup
warmup:
  description: "untimed calls of each variant before the round robin; null: timing.warmup"
  oneOf: [{type: "null"}, {type: integer, minimum: 0}]
  default: null
peak_calls: {type: integer, minimum: 1, default: 3}
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'batches': [8, 64], 'blocks': 2, 'inner': 3, 'peak_calls': 2}}

# ------------------------------------------------------------------ the names its script writes

#: the two variants of the step; normal is the baseline every % is of
NORMAL, CHECKPOINTED = "normal", "checkpointed"
VARIANTS = (NORMAL, CHECKPOINTED)
#: each batch size's variants are b<batch>/<variant>, their comparison
#: b<batch>/checkpointed_vs_normal
BATCH_PREFIX = "b"
COMPARISON = f"{CHECKPOINTED}_vs_{NORMAL}"

#: one forward + backward from identical state: each variant's loss and gradient norm
LOSS, GRAD_NORM = "loss", "grad_norm"
#: ... and under the comparison: their differences, the largest gradient difference and the
#: gradient scale (mean |g|) it is set against
LOSS_ABS_DIFF, GRAD_NORM_ABS_DIFF = "loss_abs_diff", "grad_norm_abs_diff"
GRAD_MAX_ABS_DIFF, GRAD_SCALE = "grad_max_abs_diff", "grad_scale"
#: beside perflab.instruments.interventions' round-robin and peak rows: the median step as % of
#: normal's, and (checkpointed) the peak memory saved and the peak as % of normal's
TIME_PCT_OF_NORMAL = "time_pct_of_normal"
MEMORY_SAVED, MEMORY_PCT_OF_NORMAL = "memory_saved", "memory_pct_of_normal"


def batch_variant(batch: int, variant: str) -> str:
    return f"{BATCH_PREFIX}{batch}/{variant}"


def comparison_variant(batch: int) -> str:
    return batch_variant(batch, COMPARISON)


# ------------------------------------------------------------------ accessors


def correctness(rows: pd.DataFrame) -> list[tuple[str, float, str]]:
    """The ledger's E16 line: the largest gradient difference checkpointed vs normal over
    the batch sizes, as (ledger field, value, source row); none when not measured."""
    worst = largest(rows, ENTRY.eid, GRAD_MAX_ABS_DIFF, suffix=COMPARISON)
    if worst is None:
        return []
    return [(f"{CHECKPOINTED}_{GRAD_MAX_ABS_DIFF}", worst,
             f"{ENTRY.eid} */{COMPARISON} {GRAD_MAX_ABS_DIFF} (max)")]


# ------------------------------------------------------------------ table and figure


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Checkpointing at each batch size: time, peak memory and the correctness column."""
    r = rows_of(ENTRY.eid, frame)
    peak = peak_metric(r)
    records = []
    for b in prefixed_numbers(r, BATCH_PREFIX):
        d = comparison_variant(b)
        for variant in VARIANTS:
            v = batch_variant(b, variant)
            ck = variant == CHECKPOINTED
            records.append({
                "batch": b, "config": variant, "median_ms": pick(r, v),
                "examples_per_s": pick(r, v, "throughput"),
                "time_pct": pick(r, v, TIME_PCT_OF_NORMAL, "value"),
                "peak_mib": pick(r, v, peak, "max"),
                "saved_mib": pick(r, v, MEMORY_SAVED, "value") if ck else "",
                "mem_pct": pick(r, v, MEMORY_PCT_OF_NORMAL, "value") if ck else "",
                "loss": pick(r, v, LOSS, "value"),
                "grad_norm": pick(r, v, GRAD_NORM, "value"),
                "grad_max_abs_diff": pick(r, d, GRAD_MAX_ABS_DIFF, "value") if ck else "",
            })
    return make_table(records, ["batch", "config", "median_ms", "examples_per_s", "time_pct",
                                "peak_mib", "saved_mib", "mem_pct", "loss", "grad_norm",
                                "grad_max_abs_diff"])


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Checkpointing at each batch size: time and peak memory as % of the normal step."""
    # plotting is imported here, not above: timing jobs import this module
    from perflab.kit.figures import pct_panels

    groups = [(f"batch {b}", [batch_variant(b, v) for v in VARIANTS], list(VARIANTS),
               batch_variant(b, NORMAL))
              for b in prefixed_numbers(rows_of(ENTRY.eid, rows), BATCH_PREFIX)]
    return pct_panels(ENTRY, rows, groups, width=10.0)


# ------------------------------------------------------------------ claims

#: C37: at the small batch the parameters set the peak: checkpointing saves less than this %
SMALL_BATCH_SAVES_BELOW_PCT = 5
#: C37: at the large batch activations set it: checkpointing saves more than this %
LARGE_BATCH_SAVES_ABOVE_PCT = 10


@claim("C37", "E16", "checkpointing costs time at every batch and saves memory only when activations dominate",
       chapter="+33% time, nothing saved at 256; +31% time, 288 MiB (28%) saved at 4096",
       tolerance=f"time_rel > 0 at both, beyond the A/A floor (C00); saved < "
       f"{SMALL_BATCH_SAVES_BELOW_PCT}% at the small batch and > {LARGE_BATCH_SAVES_ABOVE_PCT}% "
       "at the large (bytes: no noise question)")
def _checkpointing(ev):
    eid = ENTRY.eid
    time_pct = ev.variants(eid, BATCH_PREFIX, TIME_PCT_OF_NORMAL, "value")
    sizes = sorted({v.split("/")[0] for v in time_pct if v.endswith("/" + CHECKPOINTED)},
                   key=lambda b: int(b.removeprefix(BATCH_PREFIX)))
    if len(sizes) < 2:
        raise Absent("fewer than two batch sizes" + ("" if ev.has(eid) else f" ({eid} not run)"))
    parts = []
    for size, saves_below in ((sizes[0], True), (sizes[-1], False)):
        v = f"{size}/{CHECKPOINTED}"
        # extra time and memory saved, each in % of the normal step at that batch; the time
        # from the round robin of one process (the floor's kind), the memory counted
        t = ev.value(eid, v, TIME_PCT_OF_NORMAL, "value")
        saved = 100 - ev.value(eid, v, MEMORY_PCT_OF_NORMAL, "value")
        parts.append(Part(t > 100, f"{size}: {pct(t - 100)} time", against_floor(ev, t, 100),
                          name=f"costs time at {size}",
                          mechanism="the recomputed forward is hidden by other costs here"))
        if saves_below:
            parts.append(Part(saved < SMALL_BATCH_SAVES_BELOW_PCT, f"{saved:.0f}% saved",
                              name=f"saves little at {size}",
                              mechanism="activations set the peak even at the small batch"))
        else:
            parts.append(Part(saved > LARGE_BATCH_SAVES_ABOVE_PCT, f"{saved:.0f}% saved",
                              name=f"saves memory at {size}",
                              mechanism="checkpointing saved little even at the large batch"))
    return judge_parts(*parts)
