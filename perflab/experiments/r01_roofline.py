"""R01: the read side of scripts/r01_roofline.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from perflab.experiments import Experiment
from perflab.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "R01",
        "roofline",
        "Roofline: this device's measured ceilings and each phase's achieved fraction",
        "diagnose",
        cpu_behaviour="host memcpy is the bandwidth ceiling; host-device copies unsupported",
    report_section='24 · Diagnosis: the roofline and the verdict',
)


#: why this experiment has no claim of its own
NO_CLAIMS = ""


#: R01's phases and phase groups, in table order
R01_PHASES = ("host_to_device", "forward", "loss", "backward", "optimizer", "forward_backward",
              "step")


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Measured ceilings, then each phase's work, time and achieved fraction of them."""
    r = rows_of("R01", frame)
    records = []
    for v in sorted(x for x in r.variant.unique() if x.startswith("ceiling/matmul/")):
        records.append({"item": v.removeprefix("ceiling/"),
                        "TFLOP_per_s": _scaled(pick(r, v, "peak_flops", "value"), 1e12)})
    records.append({"item": "memory bandwidth",
                    "GB_per_s": _scaled(pick(r, "ceiling/memory_bandwidth", "bandwidth",
                                             "value"), 1e9)})
    for kind in ("host_to_device", "device_to_host"):
        cell = pick(r, f"copy/{kind}", "bandwidth")
        records.append({"item": f"copy {kind}", "GB_per_s": _scaled(cell, 1e9)})
    records.append({"item": "ridge point (FLOP/B)",
                    "intensity_FLOP_per_B": pick(r, "ceiling/ridge_point",
                                                 "arithmetic_intensity", "value")})
    for ph in R01_PHASES:
        v = f"phase/{ph}"
        records.append({
            "item": f"phase {ph}",
            "median_ms": pick(r, v, "phase_time"),
            "GFLOP": _scaled(pick(r, v, "flops", "value"), 1e9),
            "MB": _scaled(pick(r, v, "bytes", "value"), 1e6),
            "TFLOP_per_s": _scaled(pick(r, v, "achieved_flops"), 1e12),
            "pct_of_peak_flops": pick(r, v, "flops_fraction"),
            "GB_per_s": _scaled(pick(r, v, "achieved_bandwidth"), 1e9),
            "pct_of_bandwidth": pick(r, v, "bandwidth_fraction"),
            "intensity_FLOP_per_B": pick(r, v, "arithmetic_intensity"),
            "pct_of_roofline": pick(r, v, "roofline_fraction"),
        })
    return make_table(records, ["item", "median_ms", "GFLOP", "MB", "TFLOP_per_s",
                            "pct_of_peak_flops", "GB_per_s", "pct_of_bandwidth",
                            "intensity_FLOP_per_B", "pct_of_roofline"])


def _scaled(cell: Any, unit: float) -> Any:
    """A picked number divided by ``unit``; a Missing passes through."""
    return cell if isinstance(cell, Missing) else float(cell) / unit


def pct_cell(r: pd.DataFrame, phase: str, metric: str):
    cell = pick(r, f"phase/{phase}", metric)
    return cell if isinstance(cell, Missing) else (float(cell), 0.0, 0.0)


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """The measured roofline with the step's phases on it; each phase's fraction of the ceilings."""
    # plotting is imported here, not above: timing jobs import this module
    import seaborn as sns

    from perflab.figures import add_note, draw_bars, new_figure, num
    r = rows[rows.experiment == "R01"]
    phase_rows = r[r.variant.str.startswith("phase/")]  # their contract line names the model
    fig, (ax, ax2) = new_figure("R01", phase_rows if not phase_rows.empty else r, ncols=2,
                                 width=12.0)
    notes = []
    dtype = r.dtype.iloc[0] if not r.empty else "float32"
    ridge = num(pick(r, "ceiling/ridge_point", "arithmetic_intensity", "value"))
    bw = num(pick(r, "ceiling/memory_bandwidth", "bandwidth", "value"))
    peaks = {v.removeprefix("ceiling/matmul/"): num(pick(r, v, "peak_flops", "value"))
             for v in r.variant.unique() if v.startswith("ceiling/matmul/")}
    phases = ["forward", "loss", "backward", "optimizer", "forward_backward", "step"]
    points = {ph: (num(pick(r, f"phase/{ph}", "arithmetic_intensity")),
                   num(pick(r, f"phase/{ph}", "achieved_flops"))) for ph in phases}
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
    groups = ["host_to_device", *phases]
    notes2 = draw_bars(ax2, groups, {
        "% of peak FLOP/s": [pct_cell(r, g, "flops_fraction") for g in groups],
        "% of bandwidth": [pct_cell(r, g, "bandwidth_fraction") for g in groups],
    })
    ax2.set_ylabel("% of the measured ceiling")
    ax2.set_title("achieved fraction per phase", fontsize=10)
    ax2.tick_params(axis="x", labelsize=7)
    add_note(ax2, notes2, loc="upper left")
    return fig
