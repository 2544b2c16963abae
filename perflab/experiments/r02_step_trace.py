"""R02, the step's trace: does the real step synchronize, where, and what does the device wait for?

From one short profiled window of the step (the workload's own, fed from its loader), as a
training loop runs it: the host-device synchronizations per step, each located (phase,
operator, the frame that called it) with the host's blocked time; the device's busy time
and its idle time split into waiting for data, waiting on a sync, waiting for the host to
launch, and the rest, per phase, in ms per step. Measured by scripts/r02_step_trace.py
(arithmetic in perflab/instruments/trace.py, frames from perflab/instruments/syncs.py); the diagnosis reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from perflab.core.names import PHASES
from perflab.instruments.trace import BETWEEN, CAUSES, DATA, LAUNCH, OTHER, SYNC
from perflab.kit.experiment import Experiment
from perflab.kit.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ENTRY = Experiment(
    "R02",
    "step_trace",
    "Step trace: the step's syncs and the device's idle time, attributed",
    "diagnose",
    cpu_behaviour="the window is profiled (host activity only); syncs and device idle time "
                  "unsupported: a CPU has no device queue",
    extra_outputs=(("trace", "_trace.json.gz"),),
    report_section="24 · Diagnosis: the roofline and the verdict",
    diagnosis=("cpu", "cuda"),
)

#: free-running stretches of the window's length, timed without the profiler
FREE_STRETCHES = 3

#: its parameters (config key ``experiments.R02``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
# profiler warmup steps (traced and discarded), then the window
warmup: {description: "profiler warmup steps before the window (traced, discarded)", type: integer, minimum: 0, default: 3}
# steps in the window (ms per step = its totals / active)
active: {description: free-running steps in the profiled window, type: integer, minimum: 1, default: 10}
# steps under torch.cuda.set_sync_debug_mode("warn") (CUDA only)
sync_steps: {description: "steps run under torch.cuda.set_sync_debug_mode('warn') to locate the syncs (CUDA)", type: integer, minimum: 1, default: 3}
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'warmup': 1, 'active': 3, 'sync_steps': 2}}

#: why this experiment has no claim of its own
NO_CLAIMS = ("the step's syncs and idle split are not findings of the chapter: they feed the "
             "diagnosis (synchronization, input pipeline, host launch), whose verdicts are "
             "tested as verdicts, on workloads whose bottleneck is known")

# ------------------------------------------------------------------ the names its script writes

#: the profiled window: each step's host time, and how many steps it holds
WINDOW, STEP_TIME, STEPS = "window", "step_time", "steps"
#: device busy time (union of kernels, copies, memsets), and idle time per cause
BUSY = "device/busy"
DEVICE_TIME, IDLE_TIME = "device_time", "idle_time"
#: % of the window (the totals' ratio; p25/p75 rows: of the per-step ratios)
WINDOW_SHARE = "window_share"
#: host-to-device copies on the device outside any kernel (part of feeding the step)
H2D_COPY = "device/h2d_copy"
#: synchronizations: per step (profiler: operator calls that blocked; debug mode: warnings)
SYNCS = "syncs"
SYNCS_PER_STEP, SYNC_WARNINGS_PER_STEP = "syncs_per_step", "sync_warnings_per_step"
#: host time inside the blocking calls, per step and % of the window
BLOCKED_TIME = "blocked_time"
#: at most what removing the syncs could save: min(blocked, sync + launch idle), per step
SYNC_COST_BOUND = "sync/cost_bound"
#: the same step free-running without the profiler (ms per step), and a bound as % of it:
#: the profiler slows the host (on an H200, a host-heavy step's window ran 42 ms per step
#: against 16.5 ms unprofiled), so a share of the window understates what the device-side
#: waits cost the real step
FREE_RUNNING = "free_running"
FREE_STEP_SHARE = "free_step_share"
#: 1 when the workload feeds the step from a loader of its own (0: make_batch's batch again)
STEP, OWN_LOADER = "step", "own_loader"
#: one variant per sync site: "site:<phase>|<operators>|<frame>"
SITE_PREFIX = "site:"
#: on a CPU
NO_QUEUE = ("a CPU has no device queue: the host runs every operator itself, so no device "
            "waits on it and nothing synchronizes with one")


def idle_variant(cause: str) -> str:
    return f"idle/{cause}"


def phase_variant(phase: str, cause: str) -> str:
    """The join: device busy time ("busy") or idle time of ``cause`` while ``phase`` was open."""
    return f"phase/{phase}/{cause}"


def site_variant(phase: str, op: str, frame: str) -> str:
    clean = [s.replace("|", "/").replace("\n", " ")[:160] for s in (phase, op, frame)]
    return SITE_PREFIX + "|".join(clean)


@dataclass(frozen=True)
class SyncSite:
    """One place the step synchronizes: what the what-if and the verdict name."""

    phase: str
    op: str  # the operators, outermost > innermost (e.g. "aten::item > aten::_local_scalar_dense")
    frame: str  # the Python line that called it ("" when not located)
    syncs_per_step: float
    blocked_ms: float  # host ms per step inside the blocking calls
    idle_ms: float  # device ms per step idle right after them

    @property
    def where(self) -> str:
        loc = f" at {self.frame}" if self.frame else ""
        return f"{self.op or 'a direct synchronize'} in {self.phase}{loc}"


def sync_sites(rows: pd.DataFrame) -> list[SyncSite]:
    """The step's sync sites from R02's rows (any frame holding them), most blocked first."""
    r = rows_of("R02", rows)
    r = r[r.variant.str.startswith(SITE_PREFIX) & (r.status == "ok")]
    out = []
    for variant in dict.fromkeys(r.variant):
        phase, op, frame = (variant.removeprefix(SITE_PREFIX).split("|") + ["", "", ""])[:3]
        got = {m: float(pick(r, variant, m, "value")) for m in
               (SYNCS_PER_STEP, BLOCKED_TIME, IDLE_TIME)
               if not isinstance(pick(r, variant, m, "value"), Missing)}
        out.append(SyncSite(phase, op, frame, got.get(SYNCS_PER_STEP, 0.0),
                            got.get(BLOCKED_TIME, 0.0), got.get(IDLE_TIME, 0.0)))
    return sorted(out, key=lambda s: -s.blocked_ms)


def step_sync_sites(rows: pd.DataFrame) -> list[SyncSite]:
    """The sync sites that belong to the step: a site outside every phase that syncs less
    than once a step is the profiled window's own boundary (the harness drains the device
    between windows), not something the user's step does each time it runs."""
    return [s for s in sync_sites(rows) if s.phase != BETWEEN or s.syncs_per_step >= 1]


# ------------------------------------------------------------------ table

_LABELS = {DATA: "waiting for data (loader next())", SYNC: "waiting on a sync",
           LAUNCH: "waiting for the host to launch", OTHER: "other (already queued)"}


def _line(r: pd.DataFrame, label: str, variant: str, metric: str) -> dict:
    return {"measurement": label, "ms_per_step": pick(r, variant, metric, "mean"),
            "share_pct": pick(r, variant, WINDOW_SHARE, "value"),
            "p25_ms": pick(r, variant, metric, "p25"), "p75_ms": pick(r, variant, metric, "p75")}


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Step trace: device busy and idle time by cause (ms per step, % of the profiled window,
    p25..p75 over its steps), the syncs per step with the host's blocked time, each sync site
    (phase, operators, frame), and where in the step (phase) each kind of idle time fell.
    """
    r = rows_of("R02", frame)
    records = [{"measurement": "step (profiled window, host clock)",
                "ms_per_step": pick(r, WINDOW, STEP_TIME, "mean"),
                "p25_ms": pick(r, WINDOW, STEP_TIME, "p25"),
                "p75_ms": pick(r, WINDOW, STEP_TIME, "p75")},
               _line(r, "device busy", BUSY, DEVICE_TIME)]
    records += [_line(r, f"idle: {_LABELS[c]}", idle_variant(c), IDLE_TIME) for c in CAUSES]
    records.append({"measurement": "syncs per step (profiler / sync debug mode)",
                    "count": pick(r, SYNCS, SYNCS_PER_STEP, "value"),
                    "count_debug_mode": pick(r, SYNCS, SYNC_WARNINGS_PER_STEP, "value")})
    records.append(_line(r, "host blocked in syncs", SYNCS, BLOCKED_TIME))
    records.append({"measurement": "sync cost bound: min(blocked, sync + launch idle)",
                    "ms_per_step": pick(r, SYNC_COST_BOUND, IDLE_TIME, "mean"),
                    "share_pct": pick(r, SYNC_COST_BOUND, WINDOW_SHARE, "value")})
    records.append({"measurement": "step free-running, unprofiled (ms per step)",
                    "ms_per_step": pick(r, FREE_RUNNING, STEP_TIME, "median"),
                    "p25_ms": pick(r, FREE_RUNNING, STEP_TIME, "p25"),
                    "p75_ms": pick(r, FREE_RUNNING, STEP_TIME, "p75")})
    records.append({"measurement": "sync cost bound as % of the unprofiled step",
                    "share_pct": pick(r, SYNC_COST_BOUND, FREE_STEP_SHARE, "value")})
    for s in sync_sites(frame):
        records.append({"measurement": f"sync site: {s.where}", "count": s.syncs_per_step,
                        "ms_per_step": s.blocked_ms, "idle_after_ms": s.idle_ms})
    for phase in (*PHASES, BETWEEN):
        for cause in ("busy", *CAUSES):
            v = pick(r, phase_variant(phase, cause), DEVICE_TIME if cause == "busy"
                     else IDLE_TIME, "mean")
            if not isinstance(v, Missing) and v > 0:
                records.append({"measurement": f"in {phase}: "
                                + ("device busy" if cause == "busy" else _LABELS[cause]),
                                "ms_per_step": v})
    return make_table(records, ["measurement", "ms_per_step", "share_pct", "p25_ms", "p75_ms",
                                "count", "count_debug_mode", "idle_after_ms"])


# ------------------------------------------------------------------ figure


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Where the device's time goes in the real step, per phase: busy (kernels, copies) and idle
    time split by what it waited for — data from the loader, a host-device sync, the host to
    launch the next kernel, or nothing the host did (already queued) — in ms per step of one
    short profiled window of free-running steps; the syncs per step and their sites beside.
    On a CPU there is no device queue, so no bar: the panel says so.
    """
    # plotting is imported here, not above: timing jobs import this module
    import seaborn as sns

    from perflab.kit.figures import add_note, new_figure

    r = rows[rows.experiment == "R02"]
    fig, (ax,) = new_figure(ENTRY, r, width=10.0)
    phases = [p for p in (*PHASES, BETWEEN)
              if any(_value(r, p, c) for c in ("busy", *CAUSES))]
    colours = dict(zip(("busy", *CAUSES), sns.color_palette("tab10", 1 + len(CAUSES))))
    left = [0.0] * len(phases)
    for cause in ("busy", *CAUSES):
        widths = [_value(r, p, cause) for p in phases]
        if any(widths):
            ax.barh(phases, widths, left=left, color=colours[cause],
                    label="device busy" if cause == "busy" else _LABELS[cause])
            left = [a + b for a, b in zip(left, widths)]
    ax.invert_yaxis()
    ax.set_xlabel("ms per step (profiled window)")
    if phases:
        ax.legend(loc="lower right", fontsize=8)
    notes = [f"{s.syncs_per_step:.3g} sync/step: {s.where}" for s in sync_sites(rows)]
    busy = pick(r, BUSY, DEVICE_TIME, "mean")
    if isinstance(busy, Missing):
        notes.append(f"device time {busy}")
    add_note(ax, notes, loc="upper right")
    return fig


def _value(r: pd.DataFrame, phase: str, cause: str) -> float:
    v = pick(r, phase_variant(phase, cause), DEVICE_TIME if cause == "busy" else IDLE_TIME,
             "mean")
    return 0.0 if isinstance(v, Missing) else float(v)
