"""E09: the read side of scripts/e09_memory_by_phase.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from perflab.claims import Unmeasured, claim, holds
from perflab.experiments import Experiment
from perflab.tables import NOT_RUN, Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E09",
        "memory_by_phase",
        "Where memory goes: allocated after each phase, cold and steady, and the hidden peak",
        "memory",
        cpu_behaviour="the phase table is n/a (no allocator counter); peak RSS (VmHWM) over "
        "the measured steps, and the persistent breakdown by tensor accounting",
    report_section='8 · Where memory goes',
)


#: E09's boundaries, in step order
E09_BOUNDARIES = ("start", "zero_grad", "forward", "loss", "backward", "optimizer")


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Memory by phase: allocated after each phase (cold, steady), peaks; the persistent parts.

    On CUDA the peak is max_memory_allocated and the hidden peak is the peak
    minus the largest boundary reading; on a CPU the phase cells are
    ``unsupported`` and the step's peak is the process's VmHWM. The breakdown
    rows give MiB and % (of allocated after the steady step on CUDA, of the
    counted tensors on a CPU, whose windows say so).
    """
    r = rows_of("E09", frame)
    rss = (r.metric == "peak_rss").any()
    records = []
    for label in ("cold", "steady"):
        win = pick(r, label, "peak_rss" if rss else "peak_allocated", "value", field="window")
        # the window starts "step N of M": the row says which step it was
        step = " ".join(str(win).split()[:2]) if not isinstance(win, Missing) else ""
        rec = {"row": f"{step} ({label})" if step.startswith("step") else label}
        rec.update({f"{b}_mib": pick(r, f"{label}/{b}", "allocated", "value")
                    for b in E09_BOUNDARIES})
        rec["peak_alloc_mib"] = pick(r, label, "peak_allocated", "value")
        rec["hidden_peak_mib"] = pick(r, label, "hidden_peak", "value")
        rec["peak_resv_mib"] = pick(r, label, "peak_reserved", "value")
        if rss:
            rec["peak_rss_mib"] = pick(r, label, "peak_rss", "value")
        records.append(rec)
    for part in ("parameters", "gradients", "optimizer_state", "other"):
        records.append({"row": f"persistent: {part.replace('_', ' ')}",
                        "mib": pick(r, f"persistent/{part}", "bytes", "value"),
                        "share_pct": pick(r, f"persistent/{part}", "share", "value")})
    share = pick(r, "persistent", "share", "value")  # CPU: no denominator beyond the parts
    records.append({"row": "persistent (parameters + gradients + optimizer state)",
                    "mib": pick(r, "persistent", "bytes", "value"),
                    "share_pct": "" if isinstance(share, Missing) and share.status == NOT_RUN
                    else share})
    records.append({"row": "activations (steady: after forward - after zero_grad)",
                    "mib": pick(r, "activations", "bytes", "value")})
    records.append({"row": "optimizer state before step 1",
                    "mib": pick(r, "optimizer_state", "state_before_first_step", "value")})
    records.append({"row": "optimizer state after step 1",
                    "mib": pick(r, "optimizer_state", "state_after_first_step", "value")})
    records.append({"row": "step 1 optimizer phase: allocated jump",
                    "mib": pick(r, "optimizer_state", "first_step_allocated_jump", "value")})
    columns = ["row", *(f"{b}_mib" for b in E09_BOUNDARIES), "peak_alloc_mib",
               "hidden_peak_mib", "peak_resv_mib", *(["peak_rss_mib"] if rss else []),
               "mib", "share_pct"]
    return make_table(records, columns)


E09_BOUNDARIES = ("start", "zero_grad", "forward", "loss", "backward", "optimizer")


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Allocated after each phase, cold and steady, with each step's peak; the persistent parts."""
    # plotting is imported here, not above: timing jobs import this module
    import seaborn as sns

    from perflab.figures import add_note, new_figure, num
    r = rows[rows.experiment == "E09"]
    fig, (ax, ax2) = new_figure("E09", r, ncols=2, width=12.5,
                                 gridspec_kw={"width_ratios": [1.6, 1]})
    notes = []
    colours = sns.color_palette(n_colors=2)
    xs = np.arange(len(E09_BOUNDARIES))
    for colour, label in zip(colours, ("cold", "steady")):
        ys = [num(pick(r, f"{label}/{b}", "allocated", "value")) for b in E09_BOUNDARIES]
        if any(y is None for y in ys):
            notes.append(f"{label} phases: {pick(r, f'{label}/start', 'allocated', 'value')}")
            continue
        win = pick(r, label, "peak_allocated", "value", field="window")
        step = " ".join(str(win).split()[:2]) if not isinstance(win, Missing) else label
        ax.plot(xs, ys, "o-", color=colour, label=f"{step} ({label}): after each phase")
        peak = pick(r, label, "peak_allocated", "value")
        hidden = pick(r, label, "hidden_peak", "value")
        if not isinstance(peak, Missing):
            ax.axhline(peak, color=colour, ls="--", lw=1,
                       label=f"{label} peak {peak:.1f} MiB"
                       + ("" if isinstance(hidden, Missing) else
                          f" ({hidden:+.1f} above every boundary)"))
    rss = [(label, pick(r, label, "peak_rss", "value")) for label in ("cold", "steady")]
    for label, v in rss:
        if not isinstance(v, Missing):
            notes.append(f"{label} step peak RSS (VmHWM, whole process): {v:.1f} MiB")
    ax.set_xticks(xs, E09_BOUNDARIES)
    ax.set_xlabel("after phase")
    ax.set_ylabel("allocated MiB")
    ax.set_title("allocated after each phase, and the step's peak")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=8)
    add_note(ax, notes, loc="lower right")

    parts = ("parameters", "gradients", "optimizer_state", "other")
    vals = [(p, pick(r, f"persistent/{p}", "bytes", "value"),
             pick(r, f"persistent/{p}", "share", "value")) for p in parts]
    bottom, notes2 = 0.0, []
    for colour, (part, mib, share) in zip(sns.color_palette(n_colors=len(parts)), vals):
        if isinstance(mib, Missing):
            notes2.append(f"{part}: {mib}")
            continue
        ax2.bar(0, mib, 0.5, bottom=bottom, color=colour,
                label=f"{part.replace('_', ' ')}: {mib:.4g} MiB"
                + ("" if isinstance(share, Missing) else f" ({share:.0f}%)"))
        bottom += mib
    ax2.set_xticks([0], ["after the steady step"])
    ax2.set_xlim(-0.6, 1.6)
    ax2.set_ylabel("MiB")
    ax2.set_title("persistent breakdown")
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(loc="upper right", fontsize=8)
    add_note(ax2, notes2, loc="lower right")
    return fig


@claim("C23", "E09", "persistent state dominates memory at batch 256",
       chapter="456 MiB persistent, 96% of allocated", tolerance="persistent share >= 50%")
def _persistent_dominates(ev):
    s = ev.value("E09", "persistent", "share", "value")
    return holds(s >= 50, f"{s:.0f}%", mechanism="activations or other state outweigh persistent state")


@claim("C24", "E09", "AdamW state appears on the first optimizer step",
       chapter="step 1: 247.6 -> 474.6 MiB across the optimizer (227 MiB, ~2x parameters)",
       tolerance="first-step optimizer jump >= 1.5x parameter bytes")
def _adamw_state_first_step(ev):
    params = ev.value("E09", "persistent/parameters", "bytes", "value")
    try:
        jump = ev.value("E09", "optimizer_state", "first_step_allocated_jump", "value")
    except Unmeasured:  # no allocator counter (CPU): the state's own bytes, before and after
        jump = (ev.value("E09", "optimizer_state", "state_after_first_step", "value")
                - ev.value("E09", "optimizer_state", "state_before_first_step", "value"))
    return holds(jump >= 1.5 * params, f"{jump:.1f} MiB on step 1 (parameters {params:.1f} MiB)",
                 mechanism="the optimizer allocated no per-parameter state on its first step")


@claim("C25", "E09", "the peak is hidden inside a phase, above every phase-boundary reading",
       chapter="peak 589 MiB vs at most 475 at a boundary",
       tolerance="steady peak > largest steady boundary reading by > 5%")
def _hidden_peak(ev):
    peak = ev.value("E09", "steady", "peak_allocated", "value")
    top = ev.value("E09", "steady", "max_boundary_allocated", "value")
    return holds(peak > 1.05 * top, f"peak {peak:.1f} vs boundary max {top:.1f} MiB",
                 mechanism="the peak is visible at a phase boundary")
