"""E02: the read side of scripts/e02_four_questions.py (its entry, table, figure and claims)."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

import pandas as pd

from perflab.claims import against_floor, claim, holds, judge, pct
from perflab.experiments import Experiment
from perflab.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E02",
        "four_questions",
        "How fast is the model? Four questions, eager and compiled",
        "hygiene",
    report_section='2 · How fast is the model?',
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Four questions: one row per question, eager and compiled side by side."""
    r = rows_of("E02", frame)
    records = []
    for v in r.variant.unique():  # the order the experiment measured them in
        records.append({
            "question": v,
            "mode": r[r.variant == v].iloc[0]["mode"],
            "eager_median_ms": pick(r, v, execution="eager"),
            "eager_iqr_ms": pick(r, v, statistic="iqr", execution="eager"),
            "compiled_median_ms": pick(r, v, execution="compiled"),
            "compiled_iqr_ms": pick(r, v, statistic="iqr", execution="compiled"),
            "compiled_first_call_ms": pick(r, v, "first_call", "value", execution="compiled"),
        })
    return make_table(records)


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Median time per call of the four questions (forward under ``inference_mode``, forward
    with grad, forward + backward, full training step), eager vs ``torch.compile`` steady
    state, with p25..p75 error bars; the first compiled call of each is printed above the
    bars.
    """
    # plotting is imported here, not above: timing jobs import this module
    from perflab.figures import add_note, bar_cell, draw_bars, new_figure
    r = rows[rows.experiment == "E02"]
    fig, (ax,) = new_figure("E02", r, width=8.0)
    questions = list(r.variant.unique())
    executions = [e for e in ("eager", "compiled") if (r.execution == e).any()]
    series = {ex: [bar_cell(r, q, ex) for q in questions] for ex in executions}
    notes = draw_bars(ax, questions, series)
    if "compiled" in executions:
        # the first compiled call is compilation: printed, not drawn (it dwarfs the bars)
        firsts = [pick(r, q, "first_call", "value", execution="compiled") for q in questions]
        text = ", ".join(f"{q} {v / 1e3:.2f} s" for q, v in zip(questions, firsts)
                         if not isinstance(v, Missing))
        if text:
            ax.set_title(textwrap.fill(f"first compiled call (not drawn): {text}", 95),
                         fontsize=9)
    ax.set_ylabel("median ms per call (error bar: p25..p75)")
    ax.set_xlabel("")
    add_note(ax, notes, loc="upper right")
    return fig


@claim("C05", "E02", "forward under inference_mode costs about what forward with grad costs",
       chapter="2.968 vs 2.967 ms",
       tolerance="within 10% of each other; undecided inside the A/A floor (C00)")
def _inference_vs_grad(ev):
    inf = ev.value("E02", "forward_inference", "step_latency")
    grad = ev.value("E02", "forward_grad", "step_latency")
    rel = (inf - grad) / grad
    return judge(abs(rel) <= 0.10, f"{inf:.3f} vs {grad:.3f} ms ({pct(100 * rel)})",
                 is_resolved=against_floor(ev, 100 * rel, 10, agree=True),
                 mechanism="saving activations for backward costs measurable time here"
                 if rel < 0 else "inference_mode is slower here")


@claim("C06", "E02", "the four questions have four answers: forward < forward+backward < full step",
       chapter="2.97 < 8.09 < 16.45 ms", tolerance="each at least 20% above the previous")
def _four_answers(ev):
    f = ev.value("E02", "forward_grad", "step_latency")
    fb = ev.value("E02", "forward_backward", "step_latency")
    t = ev.value("E02", "train_step", "step_latency")
    return holds(fb > 1.2 * f and t > 1.2 * fb, f"{f:.3f} < {fb:.3f} < {t:.3f} ms",
                 mechanism="the optimizer adds little to forward + backward here"
                 if fb > 1.2 * f else "backward adds little to forward here")
