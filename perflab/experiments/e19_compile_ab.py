"""E19: the read side of scripts/e19_compile_ab.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.claims import Evidence, claim, holds, resolved
from perflab.experiments import Experiment
from perflab.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E19",
        "compile_ab",
        "torch.compile on a GEMM-bound MLP vs a pointwise chain: interleaved A/B",
        "interventions",
        workloads=("controlled", "pointwise"),
        cpu_behaviour="same (Inductor's C++ backend); peak-memory rows unsupported",
    report_section='18 · torch.compile',
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Compile A/B: one row per workload, eager vs compiled steady state, correctness, peaks."""
    r = rows_of("E19", frame)
    records = []
    names = dict.fromkeys(v.split("/")[0] for v in r.variant if v.endswith("/eager"))
    for name in names:
        e, c, d = f"{name}/eager", f"{name}/compiled", f"{name}/compiled_vs_eager"
        m = "forward_latency"
        records.append({
            "workload": name,
            "model": r[r.variant == e].iloc[0]["model"] if (r.variant == e).any() else "",
            "eager_median_ms": pick(r, e, m),
            "eager_block_min_ms": pick(r, e, "block_median", "min"),
            "eager_block_max_ms": pick(r, e, "block_median", "max"),
            "compiled_median_ms": pick(r, c, m),
            "compiled_block_min_ms": pick(r, c, "block_median", "min"),
            "compiled_block_max_ms": pick(r, c, "block_median", "max"),
            "speedup_x": pick(r, d, "speedup"),
            "resolved": pick(r, f"{c}_minus_{e}", "difference_resolved", "value"),
            "compiled_first_call_ms": pick(r, c, "first_call", "value"),
            "max_abs_diff": pick(r, d, "max_abs_diff", "value"),
            "eager_peak_allocated_mib": pick(r, e, "peak_allocated", "max"),
            "compiled_peak_allocated_mib": pick(r, c, "peak_allocated", "max"),
        })
    return make_table(records)


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Compile A/B: eager vs compiled block medians, one panel per workload."""
    # plotting is imported here, not above: timing jobs import this module
    from perflab.figures import add_note, new_figure, num, pair_blocks
    r = rows[rows.experiment == "E19"]
    names = list(dict.fromkeys(v.split("/")[0] for v in r.variant if v.endswith("/eager")))
    fig, axes = new_figure("E19", r, ncols=max(len(names), 1), width=6.0 * max(len(names), 1))
    for ax, name in zip(axes, names):
        pair_blocks(ax, samples, "E19", f"{name}/eager", f"{name}/compiled",
                     ("eager", "compiled"))
        ax.set_ylabel("block median, ms per forward")
        speed = pick(r, f"{name}/compiled_vs_eager", "speedup")
        diff = pick(r, f"{name}/compiled_vs_eager", "max_abs_diff", "value")
        res = pick(r, f"{name}/compiled_minus_{name}/eager", "difference_resolved", "value")
        verdict = "resolved" if num(res) == 1.0 else "inside the noise"
        ok = not isinstance(speed, Missing) and not isinstance(diff, Missing)
        ax.set_title(f"{name}: compiled {speed:.2f}x ({verdict}), max |diff| {diff:.1e}" if ok
                     else f"{name}: {speed}", fontsize=9)
    if not names:
        add_note(axes[0], ["no eager/compiled pair in the rows"], loc="upper left")
    return fig


@claim("C40", "E19", "torch.compile is neutral on the GEMM-bound MLP and a large speedup on the pointwise chain",
       chapter="0.988x (inside the block spread) vs 12.399x",
       tolerance="MLP speedup within 0.9-1.1x or unresolved; pointwise speedup > 2x")
def _compile_split(ev):
    m = ev.value("E19", "mlp/compiled_vs_eager", "speedup")
    p = ev.value("E19", "pointwise/compiled_vs_eager", "speedup")
    m_res = resolved(ev, "E19", "mlp/compiled_minus_mlp/eager", m - 1.0,
                     noise=_spread_noise(ev, "E19", "mlp/eager", "mlp/compiled"))
    neutral = 0.9 <= m <= 1.1 or not m_res[0]
    return holds(neutral and p > 2, f"MLP {m:.3f}x ({m_res[1]}), pointwise {p:.2f}x",
                 mechanism="compile changes the GEMM-bound MLP beyond noise" if not neutral
                 else "Inductor's fusion does not pay on the pointwise chain here")


def _spread_noise(ev: Evidence, eid: str, a: str, b: str) -> float | None:
    """Relative block spread of two sides (max - min of block medians over the median)."""
    out = []
    for v in (a, b):
        lo, hi = ev.maybe(eid, v, "block_median", "min"), ev.maybe(eid, v, "block_median", "max")
        med = ev.maybe(eid, v, "forward_latency")
        if None in (lo, hi, med) or not med:
            return None
        out.append((hi - lo) / med)
    return max(out)
