"""E22, a benchmark matrix (the companion article): what do eager/compiled x fp32/AMP do
to the training step's time, throughput, first step and peak memory, each cell from the same
initial state? Measured by scripts/e22_matrix.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.kit.experiment import Experiment
from perflab.kit.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ENTRY = Experiment(
    "E22",
    "matrix",
    "A benchmark matrix: eager/compiled x fp32/AMP on the training step",
    "interventions",
    cpu_behaviour="bfloat16 autocast; peak-memory rows unsupported",
    report_section="22 · Article: the benchmark matrix",
)

#: its parameters (config key ``experiments.E22``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
# autocast dtype; float16 adds a GradScaler on CUDA
amp_dtype:
  description: autocast dtype of the AMP cells (float16 adds a GradScaler on CUDA)
  type: string
  enum: [bfloat16, float16]
  default: bfloat16
repeats: {type: integer, minimum: 1, default: 100}
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'repeats': 3}}

#: why this experiment has no claim of its own
NO_CLAIMS = ("the article gives no testable finding for its matrix beyond recording all four "
             "cells (eager/compiled x fp32/AMP) beside one baseline; the table records them")

# ------------------------------------------------------------------ the names its script writes

#: the four cells, in the article's order: (variant, compiled?, under autocast?)
CELLS = (("eager_fp32", False, False), ("eager_amp", False, True),
         ("compiled_fp32", True, False), ("compiled_amp", True, True))
CELL_NAMES = tuple(name for name, *_ in CELLS)
#: the cell every other's first-step loss is compared with
REFERENCE_CELL = CELL_NAMES[0]

#: each cell: its first step (for a compiled cell, the compilation), the steady state's
#: step latency and throughput (generic names), its peaks, and its first loss against the
#: reference cell's
FIRST_STEP = "first_step"
LOSS_ABS_DIFF_VS_REFERENCE = f"loss_abs_diff_vs_{REFERENCE_CELL}"


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """The benchmark matrix: one row per cell."""
    r = rows_of(ENTRY.eid, frame)
    records = []
    for cell in CELL_NAMES:
        sel = r[r.variant == cell]
        records.append({
            "cell": cell,
            "dtype": sel.iloc[0]["dtype"] if not sel.empty else "",
            "ms_per_step": pick(r, cell),
            "iqr_ms": pick(r, cell, statistic="iqr"),
            "examples_per_s": pick(r, cell, "throughput"),
            "first_step_ms": pick(r, cell, FIRST_STEP, "value"),
            "peak_allocated_mib": pick(r, cell, "peak_allocated", "max"),
            "peak_reserved_mib": pick(r, cell, "peak_reserved", "max"),
            "loss_abs_diff_vs_eager_fp32": pick(r, cell, LOSS_ABS_DIFF_VS_REFERENCE, "value"),
        })
    return make_table(records)


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """The benchmark matrix: ms/step, examples/s and peak allocated for the four cells."""
    # plotting is imported here, not above: timing jobs import this module
    from perflab.kit.figures import add_note, bar_cell, draw_bars, new_figure

    r = rows_of(ENTRY.eid, rows)
    fig, axes = new_figure(ENTRY, r, ncols=3, width=14.0)
    cells = list(CELL_NAMES)
    notes = draw_bars(axes[0], cells, {"ms/step": [bar_cell(r, c) for c in cells]})
    axes[0].set_ylabel("ms per step, median (error bar: p25..p75)")
    thr = [pick(r, c, "throughput") for c in cells]
    notes += draw_bars(axes[1], cells, {"examples/s": [c if isinstance(c, Missing) else (c, 0, 0)
                                                   for c in thr]})
    axes[1].set_ylabel("examples/s (B / median step)")
    peaks = {m: [pick(r, c, m, "max") for c in cells] for m in ("peak_allocated", "peak_reserved")}
    missing = [c for v in peaks.values() for c in v if isinstance(c, Missing)]
    if len(missing) == 2 * len(cells):  # no peak measured: one note per reason, no empty bars
        axes[2].set_axis_off()
        add_note(axes[2], [f"peak memory not measured: {c}" for c in missing], loc="upper left")
    else:
        notes += draw_bars(axes[2], cells, {m: [c if isinstance(c, Missing) else (c, 0, 0)
                                            for c in v] for m, v in peaks.items()})
        axes[2].set_ylabel("peak MiB")
    add_note(axes[0], notes, loc="upper left")
    return fig
