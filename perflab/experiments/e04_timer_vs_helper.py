"""E04: the read side of scripts/e04_timer_vs_helper.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.claims import against_floor, claim, judge, pct
from perflab.experiments import Experiment
from perflab.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E04",
        "timer_vs_helper",
        "torch.utils.benchmark Timer vs the project's helper",
        "hygiene",
    report_section='3 · Benchmark hygiene',
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Timer.blocked_autorange vs the helper: per-call median and IQR, and how each sampled."""
    r = rows_of("E04", frame)
    timer = "timer_blocked_autorange"
    records = [
        {
            "instrument": "Timer.blocked_autorange",
            "median_ms": pick(r, timer),
            "iqr_ms": pick(r, timer, statistic="iqr"),
            "number_per_run": pick(r, timer, "number_per_run", "value"),
            "runs": pick(r, timer, "runs", "value"),
        },
        {
            # the helper's own sampling (warmup, repeats) is in its window text
            "instrument": f"helper ({pick(r, 'helper', field='window')})",
            "median_ms": pick(r, "helper"),
            "iqr_ms": pick(r, "helper", statistic="iqr"),
        },
    ]
    return make_table(records, ["instrument", "median_ms", "iqr_ms", "number_per_run", "runs"])


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Per-call times of the same training step from
    ``torch.utils.benchmark.Timer.blocked_autorange`` (one value per block) next to the
    per-call samples of the project's synchronized helper.
    """
    # plotting is imported here, not above: timing jobs import this module
    from perflab.figures import add_note, box_strip, new_figure, samples_of
    r = rows[rows.experiment == "E04"]
    fig, (ax,) = new_figure("E04", r, width=7.5)
    timer = "timer_blocked_autorange"
    data = samples_of(samples, "E04", [timer, "helper"])
    per_run = pick(r, timer, "number_per_run", "value")
    labels = {
        timer: "Timer.blocked_autorange\n"
               + (f"(per-call time of each block of {int(per_run)})"
                  if not isinstance(per_run, Missing) else "(per-call time of each block)"),
        "helper": "helper\n(one synchronized call per sample)",
    }
    if data.empty:
        add_note(ax, [f"Timer: {pick(r, timer)}", f"helper: {pick(r, 'helper')}"], loc="upper left")
    else:
        data["variant"] = data.variant.cat.remove_unused_categories()
        box_strip(ax, data, labels)
    ax.set_ylabel("ms per call")
    return fig


@claim("C09", "E04", "Timer.blocked_autorange and the helper agree on the median; the Timer's IQR is tighter",
       chapter="16.169 vs 16.449 ms; IQR 0.036 vs 0.189",
       tolerance="medians within 5%; Timer IQR < helper IQR; undecided inside the A/A floor")
def _timer_agrees(ev):
    t, h = ev.value("E04", "timer_blocked_autorange", "step_latency"), ev.value("E04", "helper", "step_latency")
    ti = ev.value("E04", "timer_blocked_autorange", "step_latency", "iqr")
    hi = ev.value("E04", "helper", "step_latency", "iqr")
    rel = (t - h) / h
    ok = abs(rel) <= 0.05 and ti < hi
    return judge(ok, f"{t:.3f} vs {h:.3f} ms ({pct(100 * rel)}); IQR {ti:.3f} vs {hi:.3f}",
                 is_resolved=against_floor(ev, 100 * rel, 5, agree=True),
                 mechanism="medians disagree by more than 5%" if abs(rel) > 0.05
                 else "the Timer's per-block IQR is not tighter here")
