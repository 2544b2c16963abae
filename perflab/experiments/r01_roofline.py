"""R01, the roofline: what are this device's measured ceilings (matmul FLOP/s per dtype, copy
bandwidth), and how close does each phase of the controlled training step come to them, given
the work it does? Measured by scripts/r01_roofline.py; the diagnosis reads its forward +
backward against the ridge point.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from perflab.core.names import PHASES
from perflab.kit.experiment import Experiment
from perflab.kit.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ENTRY = Experiment(
    "R01",
    "roofline",
    "Roofline: this device's measured ceilings and each phase's achieved fraction",
    "diagnose",
    cpu_behaviour="host memcpy is the bandwidth ceiling; host-device copies unsupported",
    report_section="24 · Diagnosis: the roofline and the verdict",
    diagnosis=("cpu", "cuda"),
)

#: its parameters (config key ``experiments.R01``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
matmul_sizes:
  description: square matmul sizes n (n x n @ n x n) whose FLOP/s calibrate the compute ceiling
  type: array
  items: {type: integer, minimum: 1}
  minItems: 1
  default: [1024, 4096, 8192]
dtypes:
  description: matmul dtypes calibrated (the contract's dtype is always added)
  type: array
  items: {type: string, enum: [float32, bfloat16, float16]}
  minItems: 1
  default: [float32, bfloat16, float16]
# where the step convolves: its heaviest convolution timed at these multiples of its batch
conv_batch_scales:
  description: where the step convolves, its heaviest convolution (forward and backward) is timed at these multiples of the step's batch; the best rate is the convolution ceiling
  type: array
  items: {type: integer, minimum: 1}
  minItems: 1
  default: [1, 4]
# device to device and pinned host <-> device copies
copy_mib: {description: buffer size of the device's copy-bandwidth measurements (device to device, pinned host to and from the device), type: number, exclusiveMinimum: 0, default: 1024}
# host memcpy: source + destination 512 MiB, beyond any cache
host_copy_mib: {description: buffer size of the host memcpy (source and destination each; far above any last-level cache), type: number, exclusiveMinimum: 0, default: 256}
# each timed sample repeats the op until it lasts about this long
target_ms: {description: each timed sample repeats the op until it lasts about this long, type: number, exclusiveMinimum: 0, default: 5.0}
repeats: {type: integer, minimum: 2, default: 30}
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'matmul_sizes': [32, 64], 'dtypes': ['float32'], 'copy_mib': 1, 'host_copy_mib': 1, 'target_ms': 0.5, 'repeats': 5}}

#: why this experiment has no claim of its own
NO_CLAIMS = ("the roofline's ceilings and achieved fractions feed the diagnosis, whose verdict "
             "(device compute or memory bandwidth) is tested as a verdict, not as a claim")

# ------------------------------------------------------------------ the names its script writes

#: the phases of the step that do device work, in step order: perflab.instruments.steps.PHASES without
#: waiting for input and logging (neither does device work to count)
WORK_PHASES = tuple(ph for ph in PHASES if ph not in ("input_wait", "logging"))
#: the groups R01 adds, each its members' work and medians summed
FORWARD_BACKWARD, STEP = "forward_backward", "step"
PHASE_GROUPS = {**{ph: (ph,) for ph in WORK_PHASES},
                FORWARD_BACKWARD: ("forward", "backward"), STEP: WORK_PHASES}
#: every phase and group in table order
PHASES_AND_GROUPS = tuple(PHASE_GROUPS)

#: calibration: matmul/<dtype>/n<n> per size, copy/<kind> per copy, then the ceilings
MATMUL_CEILING_PREFIX = "ceiling/matmul/"
#: where the step convolves: conv/<precision>/<direction>_x<scale> per timed call, then this
CONV_CEILING_PREFIX = "ceiling/conv/"
MEMORY_BANDWIDTH = "ceiling/memory_bandwidth"
RIDGE_POINT = "ceiling/ridge_point"
#: the copies timed; host memcpy and device to device read and write the buffer
COPY_KINDS = ("host_memcpy", "device_to_device", "host_to_device", "device_to_host")

#: per timed call (matmul, copy): its time; the matmul's achieved FLOP/s; a ceiling's value
CALL_TIME, PEAK_FLOPS, BANDWIDTH = "call_time", "peak_flops", "bandwidth"
#: per phase/<phase>: its counted work (FLOPs, bytes, ATen ops) and median time
FLOPS, BYTES, ATEN_OPS, PHASE_TIME = "flops", "bytes", "aten_ops", "phase_time"
#: per phase (and the ridge point's intensity): perflab.instruments.roofline.fractions' rates and
#: fractions (%) of the ceilings, named by the instrument
from perflab.core.names import (  # noqa: E402
    ACHIEVED_BANDWIDTH,
    ACHIEVED_FLOPS,
    ARITHMETIC_INTENSITY,
    BANDWIDTH_FRACTION,
    FLOPS_FRACTION,
    ROOFLINE_FRACTION,
)

#: per phase: the FLOP-weighted blend of the ceilings of the precisions it ran (FLOP/s), its
#: own ridge point (that blend / memory bandwidth, FLOP/B), and its FLOPs by precision
BLENDED_PEAK, RIDGE = "blended_peak_flops", "ridge_point"
#: the memory roof of tensors that stay in the last-level cache (a small buffer's copy)
CACHE_BANDWIDTH = "ceiling/cache_bandwidth"
#: per phase: its bytes/s as % of that cache-resident roof
CACHE_FRACTION = "cache_bandwidth_fraction"
#: the TF32 mode of matmuls and convolutions as the step ran (1: TF32 applies)
TF32_MODE = "precision/tf32"
#: the most of a measured ceiling a phase can reach: above it the instrument is wrong
CEILING_MAX_PCT = 100.0


def precision_flops(precision: str) -> str:
    """The metric of a phase's FLOPs that ran in ``precision``."""
    return f"flops_{precision}"


def matmul_variant(dtype: str, n: int) -> str:
    return f"matmul/{dtype}/n{n}"


def matmul_ceiling(dtype: str) -> str:
    return f"{MATMUL_CEILING_PREFIX}{dtype}"


def conv_variant(precision: str, direction: str, scale: int) -> str:
    """A timed convolution: the step's heaviest, ``direction``, at ``scale`` x its batch."""
    return f"conv/{precision}/{direction}_x{scale}"


def conv_ceiling(precision: str) -> str:
    return f"{CONV_CEILING_PREFIX}{precision}"


def copy_variant(kind: str) -> str:
    return f"copy/{kind}"


def phase_variant(phase: str) -> str:
    return f"phase/{phase}"


# ------------------------------------------------------------------ accessors


def peak_flops(rows: pd.DataFrame) -> dict[str, float | None]:
    """{dtype: the measured matmul ceiling, FLOP/s (None if not measured)} in ``rows``."""
    r = rows_of(ENTRY.eid, rows)
    return {v.removeprefix(MATMUL_CEILING_PREFIX): _number(pick(r, v, PEAK_FLOPS, "value"))
            for v in r.variant.unique() if v.startswith(MATMUL_CEILING_PREFIX)}


def ceilings_measured(rows: pd.DataFrame) -> bool:
    """Did R01 measure a matmul ceiling in ``rows`` (so the fractions mean something)?"""
    sel = rows_of(ENTRY.eid, rows)
    return bool(((sel.metric == PEAK_FLOPS) & (sel.status == "ok")).any())


def achieved_fractions(rows: pd.DataFrame, phase: str) -> list[tuple[str, float, str]]:
    """The phase's achieved % of the FLOP and the bandwidth ceiling, as (metric, %, source
    row) for each one measured: the ledger's roofline line."""
    r = rows_of(ENTRY.eid, rows)
    out = []
    for metric in (FLOPS_FRACTION, BANDWIDTH_FRACTION):
        cell = pick(r, phase_variant(phase), metric)
        if not isinstance(cell, Missing):
            out.append((metric, float(cell), f"{ENTRY.eid} {phase_variant(phase)} {metric}"))
    return out


def forward_backward_row(metric: str) -> tuple[str, str, str, str]:
    """Where forward + backward's ``metric`` is: (experiment, variant, metric, statistic).
    The diagnosis reads these rows and cites them."""
    return ENTRY.eid, phase_variant(FORWARD_BACKWARD), metric, "median"


#: where the ridge point (matmul ceiling / memory bandwidth, FLOP/B) is
RIDGE_POINT_ROW = (ENTRY.eid, RIDGE_POINT, ARITHMETIC_INTENSITY, "value")
#: forward + backward's own ridge point, from the precisions it ran (the diagnosis reads it
#: before the contract dtype's RIDGE_POINT_ROW, which a run from before it lacks)
FORWARD_BACKWARD_RIDGE_ROW = (ENTRY.eid, phase_variant(FORWARD_BACKWARD), RIDGE, "value")


def _number(cell: Any) -> float | None:
    return None if isinstance(cell, Missing) else float(cell)


# ------------------------------------------------------------------ table and figure


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Measured ceilings, then each phase's work, time and achieved fraction of them."""
    r = rows_of(ENTRY.eid, frame)
    records = []
    for v in sorted(x for x in r.variant.unique()
                    if x.startswith((MATMUL_CEILING_PREFIX, CONV_CEILING_PREFIX))):
        records.append({"item": v.removeprefix("ceiling/"),
                        "TFLOP_per_s": _scaled(pick(r, v, PEAK_FLOPS, "value"), 1e12)})
    records.append({"item": "memory bandwidth",
                    "GB_per_s": _scaled(pick(r, MEMORY_BANDWIDTH, BANDWIDTH, "value"), 1e9)})
    for kind in ("host_to_device", "device_to_host"):
        cell = pick(r, copy_variant(kind), BANDWIDTH)
        records.append({"item": f"copy {kind}", "GB_per_s": _scaled(cell, 1e9)})
    records.append({"item": "ridge point (FLOP/B)",
                    "intensity_FLOP_per_B": pick(r, RIDGE_POINT, ARITHMETIC_INTENSITY, "value")})
    for ph in PHASES_AND_GROUPS:
        v = phase_variant(ph)
        records.append({
            "item": f"phase {ph}",
            "median_ms": pick(r, v, PHASE_TIME),
            "GFLOP": _scaled(pick(r, v, FLOPS, "value"), 1e9),
            "MB": _scaled(pick(r, v, BYTES, "value"), 1e6),
            "TFLOP_per_s": _scaled(pick(r, v, ACHIEVED_FLOPS), 1e12),
            "pct_of_peak_flops": pick(r, v, FLOPS_FRACTION),
            "GB_per_s": _scaled(pick(r, v, ACHIEVED_BANDWIDTH), 1e9),
            "pct_of_bandwidth": pick(r, v, BANDWIDTH_FRACTION),
            "intensity_FLOP_per_B": pick(r, v, ARITHMETIC_INTENSITY),
            "pct_of_roofline": pick(r, v, ROOFLINE_FRACTION),
        })
    return make_table(records, ["item", "median_ms", "GFLOP", "MB", "TFLOP_per_s",
                                "pct_of_peak_flops", "GB_per_s", "pct_of_bandwidth",
                                "intensity_FLOP_per_B", "pct_of_roofline"])


def _scaled(cell: Any, unit: float) -> Any:
    """A picked number divided by ``unit``; a Missing passes through."""
    return cell if isinstance(cell, Missing) else float(cell) / unit


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """The measured roofline with the step's phases on it; each phase's fraction of the ceilings."""
    # plotting is imported here, not above: timing jobs import this module
    from perflab.kit.figures import new_figure

    r = rows_of(ENTRY.eid, rows)
    phase_rows = r[r.variant.str.startswith("phase/")]  # their contract line names the model
    fig, (ax, ax2) = new_figure(ENTRY, phase_rows if not phase_rows.empty else r, ncols=2,
                                width=12.0)
    # the host-to-device copy does no FLOPs: it has no point on the roofline
    on_roof = [ph for ph in PHASES_AND_GROUPS if ph != "host_to_device"]
    _roofline_panel(ax, r, on_roof)
    _fractions_panel(ax2, r, ["host_to_device", *on_roof])
    return fig


def _roofline_panel(ax: "Axes", r: pd.DataFrame, phases: list[str]) -> None:
    """The roof of each dtype's matmul ceiling over the memory bandwidth, and the phases with
    counted FLOPs as points at their intensity."""
    import seaborn as sns

    from perflab.kit.figures import add_note, num

    notes = []
    dtype = r.dtype.iloc[0] if not r.empty else "float32"
    ridge = num(pick(r, RIDGE_POINT, ARITHMETIC_INTENSITY, "value"))
    bw = num(pick(r, MEMORY_BANDWIDTH, BANDWIDTH, "value"))
    peaks = peak_flops(r)
    points = {ph: (num(pick(r, phase_variant(ph), ARITHMETIC_INTENSITY)),
                   num(pick(r, phase_variant(ph), ACHIEVED_FLOPS))) for ph in phases}
    xs = [x for x, y in points.values() if x and y]
    if bw and peaks and xs:
        lo, hi = min(xs + [ridge or 1.0]) / 10, max(xs + [ridge or 1.0]) * 10
        grid = np.geomspace(lo, hi, 200)
        for name, peak in peaks.items():
            if peak:
                ax.plot(grid, np.minimum(peak, grid * bw), lw=2 if name == dtype else 1,
                        ls="-" if name == dtype else "--", label=f"roof ({name} matmul)")
        for (ph, (x, y)), colour in zip(points.items(), sns.color_palette("tab10", len(phases))):
            if x and y:
                ax.scatter([x], [y], s=40, color=colour, zorder=3, label=ph)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=7, loc="lower right")
    else:
        notes.append("no phase with counted FLOPs, or a ceiling was not measured")
    ax.set_xlabel("arithmetic intensity (FLOP / byte moved)")
    ax.set_ylabel("FLOP/s")
    ax.set_title("measured roofline; phases with counted FLOPs", fontsize=10)
    add_note(ax, notes, loc="upper left")


def _fractions_panel(ax: "Axes", r: pd.DataFrame, phases: list[str]) -> None:
    """Each phase's achieved % of the FLOP and the bandwidth ceiling, as bars."""
    from perflab.kit.figures import add_note, draw_bars

    def bar(phase, metric):
        cell = pick(r, phase_variant(phase), metric)
        return cell if isinstance(cell, Missing) else (float(cell), 0.0, 0.0)

    notes = draw_bars(ax, phases, {
        "% of peak FLOP/s": [bar(ph, FLOPS_FRACTION) for ph in phases],
        "% of bandwidth": [bar(ph, BANDWIDTH_FRACTION) for ph in phases],
    })
    ax.set_ylabel("% of the measured ceiling")
    ax.set_title("achieved fraction per phase", fontsize=10)
    ax.tick_params(axis="x", labelsize=7)
    add_note(ax, notes, loc="upper left")
