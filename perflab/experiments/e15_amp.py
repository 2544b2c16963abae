"""E15, mixed precision: what do autocast fp16 and bf16 change against fp32 — the one-step
numerics, the step time and the peak memory, at a small and a large batch — and does fp16
help more at the large one? Measured by scripts/e15_amp.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.kit.claims import Absent, Evidence, Part, against_floor, claim, judge, judge_parts
from perflab.kit.experiment import Experiment
from perflab.kit.tables import largest, make_table, peak_metric, pick, prefixed_numbers, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ENTRY = Experiment(
    "E15",
    "amp",
    "Mixed precision: numerics, time and memory of fp32, autocast fp16 and bf16",
    "interventions",
    cpu_behaviour="CPU autocast (bf16; fp16 where it runs, else unsupported rows); "
    "peak RSS (VmHWM) of a fresh process per variant",
    report_section="14 · Mixed precision",
)

#: its parameters (config key ``experiments.E15``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
batches:
  description: batch sizes at which every precision is timed and its peak measured
  type: array
  items: {type: integer, minimum: 1}
  minItems: 1
  default: [256, 2048]
precisions:
  description: fp32 (no autocast), fp16 (autocast + GradScaler), bf16 (autocast)
  type: array
  items: {type: string, enum: [fp32, fp16, bf16]}
  minItems: 1
  uniqueItems: true
  default: [fp32, fp16, bf16]
# training steps whose losses must all be finite
finite_steps: {type: integer, minimum: 1, default: 100}
# round-robin blocks (every precision once per block, rotating order)
blocks: {type: integer, minimum: 1, default: 6}
# synchronized calls per variant per block
inner: {type: integer, minimum: 1, default: 20}
# untimed calls of each precision before the blocks; null: timing.warmup
warmup:
  description: "untimed calls of each precision before the round robin; null: timing.warmup"
  oneOf: [{type: "null"}, {type: integer, minimum: 0}]
  default: null
# steps of one variant alone for its peak memory (optimizer state included)
peak_calls: {type: integer, minimum: 1, default: 3}
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'batches': [8, 32], 'finite_steps': 10, 'blocks': 2, 'inner': 3, 'peak_calls': 2}}

# ------------------------------------------------------------------ the names its script writes

#: the precisions compared; fp32 (no autocast) is the baseline every % is of
FP32, FP16, BF16 = "fp32", "fp16", "bf16"
PRECISIONS = (FP32, FP16, BF16)
#: each batch size's variants are b<batch>/<precision>
BATCH_PREFIX = "b"

#: one step from identical state (numerics/<precision>): its loss and gradient norm, and
#: against fp32 the loss difference, the relative gradient-norm difference and the largest
#: parameter difference after the optimizer step (fp32 alone: the parameter scale)
LOSS, GRAD_NORM = "loss", "grad_norm"
LOSS_ABS_DIFF, GRAD_NORM_REL_DIFF = "loss_abs_diff", "grad_norm_rel_diff"
PARAM_MAX_ABS_DIFF, PARAMETER_SCALE = "param_max_abs_diff", "parameter_scale"
#: training steps from the initial state (finite/<precision>): how many losses were finite
FINITE_LOSSES, FINAL_LOSS = "finite_losses", "final_loss"
#: b<batch>/<precision>, beside perflab.instruments.interventions' round-robin and peak rows: the
#: median step and the peak alone as % of fp32's at that batch
TIME_PCT_OF_FP32, MEMORY_PCT_OF_FP32 = "time_pct_of_fp32", "memory_pct_of_fp32"


def numerics_variant(precision: str) -> str:
    return f"numerics/{precision}"


def finite_variant(precision: str) -> str:
    return f"finite/{precision}"


def batch_variant(batch: int, precision: str) -> str:
    return f"{BATCH_PREFIX}{batch}/{precision}"


# ------------------------------------------------------------------ accessors


def precisions_run(rows: pd.DataFrame) -> list[str]:
    """The precisions E15's rows have a variant of, in the order of :data:`PRECISIONS`."""
    r = rows_of(ENTRY.eid, rows)
    return [p for p in PRECISIONS if (r.variant.str.endswith("/" + p)).any()]


def correctness(rows: pd.DataFrame) -> list[tuple[str, float, str]]:
    """The ledger's E15 lines: each autocast precision's largest one-step loss difference
    from fp32, as (ledger field, value, source row); a precision not measured has none."""
    lines = []
    for precision in (FP16, BF16):
        worst = largest(rows, ENTRY.eid, LOSS_ABS_DIFF, suffix=precision)
        if worst is not None:
            lines.append((f"amp_{precision}_{LOSS_ABS_DIFF}", worst,
                          f"{ENTRY.eid} */{precision} {LOSS_ABS_DIFF} (max)"))
    return lines


# ------------------------------------------------------------------ table and figure


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Mixed precision: the one-step numerics against fp32, then time and memory per batch size.

    Three separate answers, never merged: numerics (loss and gradient-norm
    deviation, all losses finite), time (ms/step, examples/s, % of fp32) and
    peak memory (% of fp32), each batch size on its own lines.
    """
    r = rows_of(ENTRY.eid, frame)
    peak = peak_metric(r)
    precisions = precisions_run(r)
    records = []
    for prec in precisions:
        v, against_fp32 = numerics_variant(prec), prec != FP32
        records.append({
            "measurement": "one step vs fp32", "config": prec,
            "loss": pick(r, v, LOSS, "value"),
            "loss_abs_diff": pick(r, v, LOSS_ABS_DIFF, "value") if against_fp32 else "",
            "grad_norm": pick(r, v, GRAD_NORM, "value"),
            "grad_norm_rel_diff": pick(r, v, GRAD_NORM_REL_DIFF, "value") if against_fp32 else "",
            "finite_steps": pick(r, finite_variant(prec), FINITE_LOSSES, "value"),
        })
    for b in prefixed_numbers(r, BATCH_PREFIX):
        for prec in precisions:
            v = batch_variant(b, prec)
            records.append({
                "measurement": f"batch {b}", "config": prec,
                "median_ms": pick(r, v), "examples_per_s": pick(r, v, "throughput"),
                "peak_mib": pick(r, v, peak, "max"),
                "time_pct": pick(r, v, TIME_PCT_OF_FP32, "value"),
                "mem_pct": pick(r, v, MEMORY_PCT_OF_FP32, "value"),
            })
    return make_table(records, ["measurement", "config", "median_ms", "examples_per_s",
                                "peak_mib", "time_pct", "mem_pct", "loss", "loss_abs_diff",
                                "grad_norm", "grad_norm_rel_diff", "finite_steps"])


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """AMP bars at each batch size: time and peak memory of fp16 and bf16 as % of fp32."""
    # plotting is imported here, not above: timing jobs import this module
    from perflab.kit.figures import pct_panels

    precisions = precisions_run(rows)
    groups = [(f"batch {b}", [batch_variant(b, p) for p in precisions], list(precisions),
               batch_variant(b, FP32))
              for b in prefixed_numbers(rows_of(ENTRY.eid, rows), BATCH_PREFIX)]
    return pct_panels(ENTRY, rows, groups)


# ------------------------------------------------------------------ claims

#: C35: fp16's time (% of fp32) at the large batch must be lower than at the small by this
FP16_GAIN_POINTS = 10
#: C36: bf16 is slower than fp32 when its time is above fp32's own (100% of fp32)
FP32_PCT = 100


def _time_pct(ev: Evidence, precision: str) -> dict[str, float]:
    """{"b<batch>": the precision's median step as % of fp32's} over the batches measured."""
    got = ev.variants(ENTRY.eid, BATCH_PREFIX, TIME_PCT_OF_FP32, "value")
    return {v.split("/")[0]: x for v, x in got.items() if v.endswith("/" + precision)}


def _not_run() -> str:
    return f" ({ENTRY.eid} not run)"


@claim("C35", "E15", "fp16 autocast helps more at large batch than at small",
       chapter="95.5% of fp32 time at batch 256, 40.1% at 2048",
       tolerance=f"fp16 time_rel at the large batch < at the small batch by > "
       f"{FP16_GAIN_POINTS} points, beyond the A/A floor (C00)")
def _fp16_large_batch(ev):
    time_pct = _time_pct(ev, FP16)
    if len(time_pct) < 2:
        raise Absent("fewer than two fp16 batch sizes" + ("" if ev.has(ENTRY.eid) else _not_run()))
    sizes = sorted(time_pct, key=lambda b: int(b.removeprefix(BATCH_PREFIX)))
    small, large = time_pct[sizes[0]], time_pct[sizes[-1]]
    return judge(small - large > FP16_GAIN_POINTS,
                 f"{small:.1f}% at {sizes[0]}, {large:.1f}% at {sizes[-1]}",
                 is_resolved=against_floor(ev, small - large, FP16_GAIN_POINTS, agree=False),
                 mechanism="fp16 changes the step time about equally at both batch sizes")


@claim("C36", "E15", "bf16 autocast is slower than fp32 (hardware-dependent: no bf16 tensor cores on cc 7.5)",
       chapter="135.4% and 142.1% of fp32 time",
       tolerance=f"bf16 time_rel > {FP32_PCT}% at every batch, each beyond the A/A floor (C00)")
def _bf16_slower(ev):
    time_pct = _time_pct(ev, BF16)
    if not time_pct:
        raise Absent("no bf16 rows" + ("" if ev.has(ENTRY.eid) else _not_run()))
    # one part per batch: the round robin's medians of one process, set against the floor
    return judge_parts(*(
        Part(x > FP32_PCT, f"{b} {x:.1f}%", against_floor(ev, x, FP32_PCT), name=b,
             mechanism="this device has a native bf16 path: bf16 is not slower than fp32")
        for b, x in sorted(time_pct.items(), key=lambda bx: int(bx[0].removeprefix(BATCH_PREFIX)))))
