"""E09, where memory goes: how much is allocated after each phase of the cold and the steady
training step, how far the step's peak rises above every boundary reading, and how much of
it is persistent state. Measured by scripts/e09_memory_by_phase.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from perflab.core.names import STEP_PHASES
from perflab.kit.claims import BYTES_EXACT, Unmeasured, claim, holds
from perflab.kit.experiment import Experiment
from perflab.kit.tables import NOT_RUN, Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ENTRY = Experiment(
    "E09",
    "memory_by_phase",
    "Where memory goes: allocated after each phase, cold and steady, and the hidden peak",
    "memory",
    cpu_behaviour="the phase table is n/a (no allocator counter); peak RSS (VmHWM) over "
    "the measured steps, and the persistent breakdown by tensor accounting",
    report_section="8 · Where memory goes",
)

#: its parameters (config key ``experiments.E09``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
steady_step:
  description: the steady step read beside step 1 (the chapter reads step 3)
  type: integer
  minimum: 2
  default: 3
# also the escalation job: a memory snapshot rendered to HTML (CUDA)
snapshot:
  description: also run the escalation job (a CUDA memory snapshot rendered to HTML)
  type: boolean
  default: true
snapshot_steps:
  description: training steps recorded by the memory snapshot
  type: integer
  minimum: 1
  default: 3
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'snapshot_steps': 2}}

# ------------------------------------------------------------------ the names its script writes

#: the two steps read: the process's first (cold) and step ``steady_step`` (steady)
COLD, STEADY = "cold", "steady"
STEPS_READ = (COLD, STEADY)
#: where allocated is read, in step order: before the step, after zero_grad, after each phase
BOUNDARIES = ("start", "zero_grad", *STEP_PHASES)
#: the persistent state after the steady step, and its parts ("other": allocated minus the
#: three counted parts, CUDA only)
PERSISTENT = "persistent"
PERSISTENT_PARTS = ("parameters", "gradients", "optimizer_state", "other")
ACTIVATIONS = "activations"
OPTIMIZER_STATE = "optimizer_state"

ALLOCATED = "allocated"  # at a boundary, variant "<step>/<boundary>"
PEAK_ALLOCATED, PEAK_RESERVED, PEAK_RSS = "peak_allocated", "peak_reserved", "peak_rss"
MAX_BOUNDARY_ALLOCATED = "max_boundary_allocated"
HIDDEN_PEAK = "hidden_peak"  # peak allocated minus the largest boundary reading
BYTES, SHARE = "bytes", "share"  # MiB and % of the persistent parts
STATE_BEFORE_FIRST_STEP = "state_before_first_step"
STATE_AFTER_FIRST_STEP = "state_after_first_step"
FIRST_STEP_ALLOCATED_JUMP = "first_step_allocated_jump"


def boundary_variant(step: str, boundary: str) -> str:
    """The variant of allocated read at ``boundary`` of the ``step`` (cold or steady) step."""
    return f"{step}/{boundary}"


def part_variant(part: str) -> str:
    """The variant of one persistent part (parameters, gradients, optimizer_state, other)."""
    return f"{PERSISTENT}/{part}"


# ------------------------------------------------------------------ accessors

#: the steady step's memory as the ledger shows it: (ledger field, variant, metric, label)
STEADY_MEMORY = (
    ("peak_allocated", STEADY, PEAK_ALLOCATED, "peak allocated"),
    ("peak_reserved", STEADY, PEAK_RESERVED, "peak reserved"),
    ("peak_rss", STEADY, PEAK_RSS, "peak RSS (VmHWM, whole process)"),
    ("persistent", PERSISTENT, BYTES, "persistent"),
    ("activations", ACTIVATIONS, BYTES, "activations"),
)


def steady_memory(rows: pd.DataFrame) -> list[tuple[str, float, str]]:
    """(ledger field, MiB, source row) of each steady-step memory field measured in ``rows``.

    The steady step, so the first step's one-off allocations (the optimizer state) are
    excluded; an empty list when E09 did not run or measured none of them.
    """
    r = rows_of("E09", rows)
    found = []
    for field, variant, metric, _ in STEADY_MEMORY:
        mib = pick(r, variant, metric, "value")
        if not isinstance(mib, Missing):
            found.append((field, float(mib), f"E09 {variant} {metric}"))
    return found


def _step_name(r: pd.DataFrame, step: str, metric: str, missing: str = "") -> str:
    """"step N" from the window of ``step``'s ``metric`` row ("step N of M: ..."), else
    ``missing``."""
    window = pick(r, step, metric, "value", field="window")
    return missing if isinstance(window, Missing) else " ".join(str(window).split()[:2])


# ------------------------------------------------------------------ table


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Memory by phase: allocated after each phase (cold, steady), peaks; the persistent parts.

    On CUDA the peak is max_memory_allocated and the hidden peak is the peak
    minus the largest boundary reading; on a CPU the phase cells are
    ``unsupported`` and the step's peak is the process's VmHWM. The breakdown
    rows give MiB and % (of allocated after the steady step on CUDA, of the
    counted tensors on a CPU, whose windows say so).
    """
    r = rows_of("E09", frame)
    rss = (r.metric == PEAK_RSS).any()
    records = [_step_record(r, step, rss) for step in STEPS_READ]
    for part in PERSISTENT_PARTS:
        records.append({"row": f"persistent: {part.replace('_', ' ')}",
                        "mib": pick(r, part_variant(part), BYTES, "value"),
                        "share_pct": pick(r, part_variant(part), SHARE, "value")})
    share = pick(r, PERSISTENT, SHARE, "value")  # CPU: no denominator beyond the parts
    records.append({"row": "persistent (parameters + gradients + optimizer state)",
                    "mib": pick(r, PERSISTENT, BYTES, "value"),
                    "share_pct": "" if isinstance(share, Missing) and share.status == NOT_RUN
                    else share})
    for label, variant, metric in (
        ("activations (steady: after forward - after zero_grad)", ACTIVATIONS, BYTES),
        ("optimizer state before step 1", OPTIMIZER_STATE, STATE_BEFORE_FIRST_STEP),
        ("optimizer state after step 1", OPTIMIZER_STATE, STATE_AFTER_FIRST_STEP),
        ("step 1 optimizer phase: allocated jump", OPTIMIZER_STATE, FIRST_STEP_ALLOCATED_JUMP),
    ):
        records.append({"row": label, "mib": pick(r, variant, metric, "value")})
    columns = ["row", *(f"{b}_mib" for b in BOUNDARIES), "peak_alloc_mib",
               "hidden_peak_mib", "peak_resv_mib", *(["peak_rss_mib"] if rss else []),
               "mib", "share_pct"]
    return make_table(records, columns)


def _step_record(r: pd.DataFrame, step: str, rss: bool) -> dict:
    """The table's line of one step: allocated at each boundary, its peaks."""
    name = _step_name(r, step, PEAK_RSS if rss else PEAK_ALLOCATED)
    rec = {"row": f"{name} ({step})" if name.startswith("step") else step}
    rec.update({f"{b}_mib": pick(r, boundary_variant(step, b), ALLOCATED, "value")
                for b in BOUNDARIES})
    rec["peak_alloc_mib"] = pick(r, step, PEAK_ALLOCATED, "value")
    rec["hidden_peak_mib"] = pick(r, step, HIDDEN_PEAK, "value")
    rec["peak_resv_mib"] = pick(r, step, PEAK_RESERVED, "value")
    if rss:
        rec["peak_rss_mib"] = pick(r, step, PEAK_RSS, "value")
    return rec


# ------------------------------------------------------------------ figure


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Allocated after each phase, cold and steady, with each step's peak; the persistent parts."""
    from perflab.kit.figures import new_figure  # plotting imported here: timing jobs import this

    r = rows[rows.experiment == "E09"]
    fig, (ax, ax2) = new_figure(ENTRY, r, ncols=2, width=12.5,
                                 gridspec_kw={"width_ratios": [1.6, 1]})
    _draw_boundaries(ax, r)
    _draw_persistent(ax2, r)
    return fig


def _draw_boundaries(ax, r: pd.DataFrame) -> None:
    """Left panel: allocated after each phase of each step, its peak as a dashed line."""
    import seaborn as sns

    from perflab.kit.figures import add_note, num

    notes = []
    xs = np.arange(len(BOUNDARIES))
    for colour, step in zip(sns.color_palette(n_colors=2), STEPS_READ):
        ys = [num(pick(r, boundary_variant(step, b), ALLOCATED, "value")) for b in BOUNDARIES]
        if any(y is None for y in ys):
            start = pick(r, boundary_variant(step, "start"), ALLOCATED, "value")
            notes.append(f"{step} phases: {start}")
            continue
        name = _step_name(r, step, PEAK_ALLOCATED, missing=step)
        ax.plot(xs, ys, "o-", color=colour, label=f"{name} ({step}): after each phase")
        peak = pick(r, step, PEAK_ALLOCATED, "value")
        hidden = pick(r, step, HIDDEN_PEAK, "value")
        if not isinstance(peak, Missing):
            ax.axhline(peak, color=colour, ls="--", lw=1,
                       label=f"{step} peak {peak:.1f} MiB"
                       + ("" if isinstance(hidden, Missing) else
                          f" ({hidden:+.1f} above every boundary)"))
    for step in STEPS_READ:
        rss = pick(r, step, PEAK_RSS, "value")
        if not isinstance(rss, Missing):
            notes.append(f"{step} step peak RSS (VmHWM, whole process): {rss:.1f} MiB")
    ax.set_xticks(xs, BOUNDARIES)
    ax.set_xlabel("after phase")
    ax.set_ylabel("allocated MiB")
    ax.set_title("allocated after each phase, and the step's peak")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=8)
    add_note(ax, notes, loc="lower right")


def _draw_persistent(ax, r: pd.DataFrame) -> None:
    """Right panel: the persistent parts after the steady step, stacked."""
    import seaborn as sns

    from perflab.kit.figures import add_note

    bottom, notes = 0.0, []
    colours = sns.color_palette(n_colors=len(PERSISTENT_PARTS))
    for colour, part in zip(colours, PERSISTENT_PARTS):
        mib = pick(r, part_variant(part), BYTES, "value")
        share = pick(r, part_variant(part), SHARE, "value")
        if isinstance(mib, Missing):
            notes.append(f"{part}: {mib}")
            continue
        ax.bar(0, mib, 0.5, bottom=bottom, color=colour,
               label=f"{part.replace('_', ' ')}: {mib:.4g} MiB"
               + ("" if isinstance(share, Missing) else f" ({share:.0f}%)"))
        bottom += mib
    ax.set_xticks([0], ["after the steady step"])
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylabel("MiB")
    ax.set_title("persistent breakdown")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper right", fontsize=8)
    add_note(ax, notes, loc="lower right")


# ------------------------------------------------------------------ claims

#: C23: persistent state is at least this share of the steady step's peak allocated
PERSISTENT_SHARE_MIN_PCT = 50
#: C24: step 1's optimizer phase allocates at least this many times the parameter bytes
OPTIMIZER_JUMP_MIN_X_PARAMETERS = 1.5
#: C25: the steady peak exceeds the largest boundary reading by more than this
HIDDEN_PEAK_MIN_PCT = 5


@claim("C23", "E09", "persistent state dominates memory at batch 256",
       chapter="456 MiB persistent of a 589 MiB peak (96% of allocated after the step)",
       tolerance=f"persistent bytes >= {PERSISTENT_SHARE_MIN_PCT}% of the steady step's "
                 "peak allocated", exact=BYTES_EXACT)
def _persistent_dominates(ev):
    # of the peak, not of allocated after the step: after the step the activations are
    # freed, so persistent state is nearly all of what is left by construction
    persistent = ev.value("E09", PERSISTENT, BYTES, "value")
    peak = ev.value("E09", STEADY, PEAK_ALLOCATED, "value")
    share = 100 * persistent / peak
    return holds(share >= PERSISTENT_SHARE_MIN_PCT,
                 f"persistent {persistent:.0f} of peak {peak:.0f} MiB ({share:.0f}%)",
                 mechanism="activations and temporaries, not persistent state, set the peak")


@claim("C24", "E09", "AdamW state appears on the first optimizer step",
       chapter="step 1: 247.6 -> 474.6 MiB across the optimizer (227 MiB, ~2x parameters)",
       tolerance=f"first-step optimizer jump >= {OPTIMIZER_JUMP_MIN_X_PARAMETERS:g}x "
                 "parameter bytes", exact=BYTES_EXACT)
def _adamw_state_first_step(ev):
    params = ev.value("E09", part_variant("parameters"), BYTES, "value")
    try:
        jump = ev.value("E09", OPTIMIZER_STATE, FIRST_STEP_ALLOCATED_JUMP, "value")
    except Unmeasured as exc:  # no allocator counter (CPU): the state's own bytes, before and after
        if exc.status != "unsupported":
            raise
        jump = (ev.value("E09", OPTIMIZER_STATE, STATE_AFTER_FIRST_STEP, "value")
                - ev.value("E09", OPTIMIZER_STATE, STATE_BEFORE_FIRST_STEP, "value"))
    return holds(jump >= OPTIMIZER_JUMP_MIN_X_PARAMETERS * params,
                 f"{jump:.1f} MiB on step 1 (parameters {params:.1f} MiB)",
                 mechanism="the optimizer allocated no per-parameter state on its first step")


@claim("C25", "E09", "the peak is hidden inside a phase, above every phase-boundary reading",
       chapter="peak 589 MiB vs at most 475 at a boundary",
       tolerance=f"steady peak > largest steady boundary reading by > {HIDDEN_PEAK_MIN_PCT}%",
       exact=BYTES_EXACT)
def _hidden_peak(ev):
    peak = ev.value("E09", STEADY, PEAK_ALLOCATED, "value")
    top = ev.value("E09", STEADY, MAX_BOUNDARY_ALLOCATED, "value")
    return holds(peak > (1 + HIDDEN_PEAK_MIN_PCT / 100) * top,
                 f"peak {peak:.1f} vs boundary max {top:.1f} MiB",
                 mechanism="the peak is visible at a phase boundary")
