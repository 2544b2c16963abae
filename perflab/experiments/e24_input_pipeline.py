"""E24: the read side of scripts/e24_input_pipeline.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from perflab.claims import Absent, against_floor, claim, judge, pct, resolved
from perflab.experiments import Experiment
from perflab.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E24",
        "input_pipeline",
        "Input pipeline: input-wait share vs num_workers, pageable vs pinned copies",
        "interventions",
        cpu_behaviour="num_workers sweep only; pinned and non_blocking rows unsupported",
    report_section='23 · Article: the input pipeline',
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Input pipeline: one row per loader configuration, then the pageable/pinned copy pair."""
    r = rows_of("E24", frame)
    records = []
    for v in dict.fromkeys(r.variant):
        if not v.startswith("workers_"):
            continue
        records.append({
            "configuration": v,
            "step_median_ms": pick(r, v),
            "input_wait_median_ms": pick(r, v, "input_wait"),
            "host_to_device_median_ms": pick(r, v, "host_to_device"),
            "compute_median_ms": pick(r, v, "compute"),
            # summed wait / summed step: a few long waits weigh in full, unlike the medians
            "input_wait_share_of_summed_steps_pct": pick(r, v, "input_wait_share", "value"),
            "examples_per_s": pick(r, v, "throughput"),
            "first_batch_wait_ms": pick(r, v, "first_batch_wait", "value"),
            "loss_max_abs_diff": pick(r, v, "loss_max_abs_diff_vs_workers_0", "value"),
        })
    for v in ("copy/pageable", "copy/pinned"):
        records.append({"configuration": f"bare {v}",
                        "host_to_device_median_ms": pick(r, v, "host_to_device"),
                        "bandwidth_gb_per_s": pick(r, v, "bandwidth")})
    return make_table(records)


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Where each DataLoader-fed step goes: input wait, host-to-device, compute."""
    # plotting is imported here, not above: timing jobs import this module
    import seaborn as sns

    from perflab.figures import add_note, new_figure, num
    r = rows[rows.experiment == "E24"]
    fig, (ax,) = new_figure("E24", r, width=9.0)
    configs = [v for v in dict.fromkeys(r.variant) if v.startswith("workers_")]
    parts = ("input_wait", "host_to_device", "compute")
    bottom = np.zeros(len(configs))
    notes = []
    for i, part in enumerate(parts):
        vals = []
        for c in configs:
            cell = pick(r, c, part)
            if isinstance(cell, Missing):
                notes.append(f"{c}: {cell}")
            vals.append(num(cell) or 0.0)
        ax.bar(configs, vals, bottom=bottom, label=part.replace("_", " "),
               color=sns.color_palette()[i])
        bottom += np.asarray(vals)
    for x, c in enumerate(configs):
        share = pick(r, c, "input_wait_share", "value")
        if not isinstance(share, Missing):
            ax.text(x, bottom[x], f"wait {share:.0f}%", ha="center", va="bottom", fontsize=8)
        else:  # not run: say so at its place instead of an empty slot
            ax.text(x, 0.02, share.status, transform=ax.get_xaxis_transform(), rotation=90,
                    ha="center", va="bottom", fontsize=8, color="#a35f00")
    if bottom.size and bottom.max() > 0:
        ax.set_ylim(0, bottom.max() * 1.6)  # room for the labels and the note above the bars
    ax.set_ylabel("median ms per step, by part\n(synchronized at each boundary)")
    ax.set_xticks(range(len(configs)), [c.replace("_", "\n", 1) for c in configs])
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    add_note(ax, notes, loc="upper left")
    return fig


@claim("C46", "E24", "when input wait dominates the step, DataLoader workers shorten it",
       chapter="article: check input wait first; workers help only when it is the largest part",
       tolerance="input wait >= 25% of the step with 0 workers; the most workers' step shorter "
                 "by more than the A/A floor (C00)")
def _workers(ev):
    steps = {int(v.removeprefix("workers_")): x for v, x in
             ev.variants("E24", "workers_", "step_latency").items() if "/" not in v}
    if len(steps) < 2 or 0 not in steps:
        raise Absent("fewer than two worker counts" + ("" if ev.has("E24") else " (E24 not run)"))
    share = ev.value("E24", "workers_0", "input_wait_share", "value")
    most = max(steps)
    rel = (steps[most] - steps[0]) / steps[0]
    return judge(share >= 25 and rel < 0,
                 f"input wait {share:.0f}% of the step with 0 workers; step {steps[0]:.2f} -> "
                 f"{steps[most]:.2f} ms with {most} ({pct(100 * rel)})",
                 is_resolved=against_floor(ev, 100 * rel, 0, agree=False),
                 mechanism="input wait is not where the step's time goes" if share < 25
                 else "more workers did not shorten the step")


@claim("C47", "E24", "pinned host memory makes the host-to-device copy faster",
       chapter="article: test pin_memory + non_blocking for the transfer",
       tolerance="pinned copy median below pageable, resolved by the pair's significance test")
def _pinned(ev):
    d = "copy/pinned_minus_copy/pageable"
    pinned = ev.value("E24", "copy/pinned", "host_to_device")
    pageable = ev.value("E24", "copy/pageable", "host_to_device")
    return judge(pinned < pageable, f"pinned {pinned:.3f} vs pageable {pageable:.3f} ms "
                 f"({pct(100 * (pinned - pageable) / pageable)})",
                 is_resolved=resolved(ev, "E24", d, pinned - pageable),
                 mechanism="the pinned copy is not faster here")
