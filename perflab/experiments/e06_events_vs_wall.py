"""E06 · Two instruments: how much of the step does the device spend, and how much the host?

``scripts/e06_events_vs_wall.py`` times the same training step with the synchronized wall
clock and with device time (CUDA events with the device kept ahead of the host), beside
events on an idle stream (they include launch gaps), the host's submission time in a
free-running loop and the host-exposed time (wall - device). This module names those rows
(as (variant, metric) pairs) and reads them back: the table, the figure, claim C14, and
the pairs the ledger and the diagnosis read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.core.names import STEP_LATENCY
from perflab.kit.claims import claim, interval_part, judge_parts, medians, pct
from perflab.kit.experiment import Experiment
from perflab.kit.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


EID = "E06"

ENTRY = Experiment(
    EID,
    "events_vs_wall",
    "Two instruments: synchronized wall clock vs CUDA events",
    "localize",
    cpu_behaviour="wall clock only; CUDA events and host submission rows unsupported",
    report_section="5 · Two instruments",
    claims_read_samples=True,  # C14: the host-exposed share by its own interval,
    diagnosis=("cuda",),
    builds_the_contract=True,
)

#: its parameters (config key ``experiments.E06``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = ""  # none: it measures at the run's own timing and workload


#: (variant, metric) of each instrument's per-call series
WALL = ("wall_clock", STEP_LATENCY)  # drained before, synchronized after: the helper's boundary
#: CUDA events with the device kept ahead of the host (perflab.instruments.timing.time_wall_and_device)
DEVICE = ("cuda_events_device_ahead", "device_time")
#: CUDA events recorded into an idle stream around the wall calls: submission to completion
IDLE_EVENTS = ("cuda_events_idle_stream", "event_elapsed")
SUBMISSION = ("host_submission", STEP_LATENCY)  # host ms per call in a free-running loop
#: wall - device time, per pair of neighbouring calls: the step's time the device is not busy
HOST_EXPOSED = ("wall_minus_device", "host_exposed")
#: 100 x median host-exposed / median wall (%)
HOST_EXPOSED_SHARE = ("wall_minus_device", "host_exposed_share")
#: the device-side sleep queued ahead of each start event (ms), and the calls redone
DEVICE_LEAD = ("cuda_events_device_ahead", "device_lead")
CALLS_REDONE = ("cuda_events_device_ahead", "calls_redone")
#: the per-call series, in the order the table lists them: (label, (variant, metric))
SERIES = (
    ("synchronized wall clock", WALL),
    ("device time (CUDA events, device kept ahead of the host)", DEVICE),
    ("CUDA events on an idle stream (include launch gaps)", IDLE_EVENTS),
    ("host submission only (free-running loop)", SUBMISSION),
    ("host-exposed: wall - device (neighbouring calls)", HOST_EXPOSED),
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Two instruments: wall clock, device time, idle-stream events, host submission, host-exposed.

    Device time is read from CUDA events with the device kept ahead of the host
    (a device-side sleep before the start event), so it excludes the host's
    launch gaps; events on an idle stream (the start fires at submission) are
    kept beside it to show what they include. Host-exposed = wall - device.
    """
    r = rows_of(EID, frame)
    records = []
    for label, (variant, metric) in SERIES:
        records.append({
            "instrument": label,
            "median_ms": pick(r, variant, metric),
            "iqr_ms": pick(r, variant, metric, statistic="iqr"),
        })
    records.append({"instrument": "host-exposed share of the wall clock (%)",
                    "median_ms": pick(r, *HOST_EXPOSED_SHARE, "value")})
    return make_table(records)


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Median step time by the synchronized wall clock, device time (CUDA events with the
    device kept ahead of the host), CUDA events on an idle stream and host submission, with
    p25..p75 error bars; instruments this device cannot provide are labelled with their
    status and reason instead of drawn.
    """
    # plotting is imported here, not above: timing jobs import this module
    from perflab.kit.figures import add_note, bar_cell, draw_bars, new_figure
    r = rows[rows.experiment == EID]
    fig, (ax,) = new_figure(ENTRY, r, width=7.5)
    series = [WALL, DEVICE, IDLE_EVENTS, SUBMISSION]
    labels = ["wall clock", "device time", "events, idle stream", "host submission"]
    notes = draw_bars(ax, labels, {"median": [bar_cell(r, v, metric=m) for v, m in series]})
    gap = pick(r, *HOST_EXPOSED)
    if isinstance(gap, Missing):
        notes.append(f"host-exposed: {gap}")
    else:
        share = pick(r, *HOST_EXPOSED_SHARE, "value")
        ax.set_title(f"host-exposed (wall - device) = {gap:+.3f} ms per call"
                     + ("" if isinstance(share, Missing) else f", {share:.0f}% of the wall"),
                     fontsize=9)
    ax.set_ylabel("median ms per step (error bar: p25..p75)")
    add_note(ax, notes, loc="upper right")
    return fig


#: C14: the two instruments agree when wall - device time is under this % of the wall clock
AGREE_PCT = 5


@claim("C14", EID, "on a device-bound step the synchronized wall clock and CUDA events agree",
       chapter="16.281 vs 15.945 ms (+0.336 ms, 2.1%): events exclude only host overhead",
       tolerance=f"wall - device time < {AGREE_PCT}% of wall (median host-exposed time of "
       "neighbouring calls over the median wall), decided by its 95% interval (block "
       "bootstrap of the two series, paired call by call); device time: CUDA events with the "
       "device kept ahead of the host")
def _events_agree(ev):
    gap = ev.value(EID, *HOST_EXPOSED)
    device = ev.value(EID, *DEVICE)
    wall = ev.value(EID, *WALL)
    gap_pct = 100 * gap / wall
    submit = ev.maybe(EID, *SUBMISSION)
    # the chapter's step was device-bound, so its events missed only a little host overhead;
    # where the host sets the pace, the device idles between launches and wall - device is
    # that idle time, which events with the device kept ahead rightly leave out
    pace = (f"the host submits a step in {submit:.3f} ms, the device runs it in {device:.3f} ms"
            if submit is not None else f"the device runs the step in {device:.3f} ms")
    # a share of the wall, not an A/B effect: C00's floor bounds another statistic
    return judge_parts(interval_part(
        ev, gap_pct, f"wall - device {gap:+.3f} ms of {wall:.3f} ms ({pct(gap_pct)})",
        [[(EID, *HOST_EXPOSED), (EID, *WALL)]], _exposed_share, (-AGREE_PCT, AGREE_PCT),
        name=f"within {AGREE_PCT}% of wall",
        mechanism=f"this step is host-bound, not device-bound: {pace}, so the device "
                  f"idles {gap_pct:.0f}% of the wall clock waiting for launches; the "
                  "events (device kept ahead) leave that out, the wall clock does not"
        if gap > 0 else f"device time exceeds the wall clock by {-gap_pct:.0f}%: the "
                        "events span more than the call (see the device lead and "
                        "the calls redone)"))


def _exposed_share(group):
    """100 x median host-exposed / median wall (resampled, the two series paired)."""
    m = medians(group)
    return 100 * m[:, 0] / m[:, 1]
