"""E24, the input pipeline (the companion article): is a DataLoader-fed step waiting for its
input — the input-wait share as num_workers grows, with the losses unchanged — and does
pinned host memory make the host-to-device copy faster? Measured by
scripts/e24_input_pipeline.py.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from perflab.core.names import STEP_LATENCY
from perflab.kit.claims import (
    Absent,
    Part,
    against_floor,
    claim,
    interval_part,
    judge,
    judge_parts,
    pct,
    resolved,
)
from perflab.kit.experiment import Experiment
from perflab.kit.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ENTRY = Experiment(
    "E24",
    "input_pipeline",
    "Input pipeline: input-wait share vs num_workers, pageable vs pinned copies",
    "interventions",
    cpu_behaviour="num_workers sweep only; pinned and non_blocking rows unsupported",
    report_section="23 · Article: the input pipeline",
    claims_read_samples=True,  # C46: the input-wait share by its own interval
)

#: its parameters (config key ``experiments.E24``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
# num_workers tried; counts above the job's cores are skipped
workers:
  description: DataLoader num_workers values; counts above the job's cores are skipped
  type: array
  items: {type: integer, minimum: 0}
  minItems: 1
  default: [0, 1, 2, 4, 8]
# num_workers of the pinned-memory run (CUDA)
pin_workers: {type: integer, minimum: 0, default: 4}
# CPU preparation passes per example (the stand-in for decoding)
item_ops:
  description: CPU preparation passes per example (the stand-in for decoding)
  type: integer
  minimum: 0
  default: 20
# configurations interleaved in blocks (balanced order), each a fresh loader
blocks:
  description: interleaved blocks; each runs every configuration once (balanced order)
  type: integer
  minimum: 1
  default: 6
# untimed steps per block after its first batch (worker start-up)
warmup:
  description: untimed steps per block after the first batch (worker start-up)
  type: integer
  minimum: 0
  default: 2
# timed steps per block per configuration
steps:
  description: timed steps per block per configuration
  type: integer
  minimum: 1
  default: 8
# pageable vs pinned copy, interleaved
copy_blocks: {type: integer, minimum: 2, default: 12}
copy_inner: {type: integer, minimum: 1, default: 30}
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'workers': [0, 1, 2], 'pin_workers': 1, 'item_ops': 2, 'blocks': 2, 'warmup': 1, 'steps': 2, 'copy_blocks': 2, 'copy_inner': 3}}

# ------------------------------------------------------------------ the names its script writes

#: each loader configuration is workers_<N> (pageable host memory) or workers_<N>/pinned
WORKERS_PREFIX, PINNED = "workers_", "pinned"
#: the bare copy of one batch, pageable and pinned, as an interleaved pair
COPY_PAGEABLE, COPY_PINNED = "copy/pageable", "copy/pinned"

#: the three parts of a fed step (perflab.experiments.e24_input_pipeline.dataset.FedRun), each step's median beside the
#: whole step's (STEP_LATENCY); the first two are named as perflab.instruments.steps.PHASES names them
INPUT_WAIT, HOST_TO_DEVICE, COMPUTE = "input_wait", "host_to_device", "compute"
PARTS = (INPUT_WAIT, HOST_TO_DEVICE, COMPUTE)
#: per configuration: summed input wait / summed step time (%), examples/s, the first
#: batch's wait (worker start-up) and the losses against num_workers=0's
INPUT_WAIT_SHARE, THROUGHPUT, FIRST_BATCH_WAIT = (
    "input_wait_share", "throughput", "first_batch_wait")
#: per bare copy: GB/s
BANDWIDTH = "bandwidth"


def workers_variant(workers: int, pinned: bool = False) -> str:
    return f"{WORKERS_PREFIX}{workers}" + (f"/{PINNED}" if pinned else "")


#: the configuration every other's losses are compared with
REFERENCE = workers_variant(0)
LOSS_MAX_ABS_DIFF_VS_REFERENCE = f"loss_max_abs_diff_vs_{REFERENCE}"


def pair_variant(most: str) -> str:
    """The judgement of the most workers' block medians against the reference's."""
    return f"pair/{most}_minus_{REFERENCE}"


def _configurations(r: pd.DataFrame) -> list[str]:
    """The loader configurations in E24's rows, in the order they ran."""
    return [v for v in dict.fromkeys(r.variant) if v.startswith(WORKERS_PREFIX)]


# ------------------------------------------------------------------ table and figure


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Input pipeline: one row per loader configuration, then the pageable/pinned copy pair."""
    r = rows_of(ENTRY.eid, frame)
    records = []
    for v in _configurations(r):
        records.append({
            "configuration": v,
            "step_median_ms": pick(r, v, STEP_LATENCY),
            "input_wait_median_ms": pick(r, v, INPUT_WAIT),
            "host_to_device_median_ms": pick(r, v, HOST_TO_DEVICE),
            "compute_median_ms": pick(r, v, COMPUTE),
            # summed wait / summed step: a few long waits weigh in full, unlike the medians
            "input_wait_share_of_summed_steps_pct": pick(r, v, INPUT_WAIT_SHARE, "value"),
            "examples_per_s": pick(r, v, THROUGHPUT),
            "first_batch_wait_ms": pick(r, v, FIRST_BATCH_WAIT, "value"),
            "loss_max_abs_diff": pick(r, v, LOSS_MAX_ABS_DIFF_VS_REFERENCE, "value"),
        })
    for v in (COPY_PAGEABLE, COPY_PINNED):
        records.append({"configuration": f"bare {v}",
                        "host_to_device_median_ms": pick(r, v, HOST_TO_DEVICE),
                        "bandwidth_gb_per_s": pick(r, v, BANDWIDTH)})
    return make_table(records)


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Where each DataLoader-fed step goes: input wait, host-to-device, compute."""
    # plotting is imported here, not above: timing jobs import this module
    import seaborn as sns

    from perflab.kit.figures import add_note, new_figure, num
    r = rows_of(ENTRY.eid, rows)
    fig, (ax,) = new_figure(ENTRY, r, width=9.0)
    configs = _configurations(r)
    bottom = np.zeros(len(configs))
    notes = []
    for i, part in enumerate(PARTS):
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
        share = pick(r, c, INPUT_WAIT_SHARE, "value")
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


# ------------------------------------------------------------------ claims

#: C46: with no workers, input wait must be at least this share of the step for workers to
#: be the intervention
INPUT_BOUND_SHARE_PCT = 25


def _step_by_workers(ev) -> dict[int, float]:
    """{num_workers: median step ms} of the pageable loader configurations."""
    got = ev.variants(ENTRY.eid, WORKERS_PREFIX, STEP_LATENCY)
    return {int(v.removeprefix(WORKERS_PREFIX)): x for v, x in got.items() if "/" not in v}


@claim("C46", "E24", "when input wait dominates the step, DataLoader workers shorten it",
       chapter="article: check input wait first; workers help only when it is the largest part",
       tolerance=f"input wait >= {INPUT_BOUND_SHARE_PCT}% of the step with 0 workers (summed "
                 "over summed, decided by its 95% interval: block bootstrap of the two series, "
                 "paired step by step) and the most workers' step shorter (the interleaved "
                 "pair's judgement where E24 wrote one, else beyond the A/A floor, C00)")
def _workers(ev):
    eid = ENTRY.eid
    steps = _step_by_workers(ev)
    if len(steps) < 2 or 0 not in steps:
        raise Absent("fewer than two worker counts" + ("" if ev.has(eid) else f" ({eid} not run)"))
    share = ev.value(eid, REFERENCE, INPUT_WAIT_SHARE, "value")
    most = max(steps)
    rel = (steps[most] - steps[0]) / steps[0]
    # the configurations ran block by block next to each other: their pair is an A/B; a run
    # from before E24 judged it has only the floor to set the medians' difference against
    pair_v = pair_variant(workers_variant(most))
    pair = (resolved(ev, eid, pair_v, steps[most] - steps[0])
            if ev.found(eid, pair_v, "ab_p", "value") is not None
            else against_floor(ev, 100 * rel))
    return judge_parts(
        # a share of the step, not an A/B effect: C00's floor bounds another statistic
        interval_part(ev, share, f"input wait {share:.0f}% of the step with 0 workers",
                      [[(eid, REFERENCE, INPUT_WAIT), (eid, REFERENCE, STEP_LATENCY)]],
                      _wait_share, (INPUT_BOUND_SHARE_PCT, math.inf), name="input wait dominates",
                      mechanism="input wait is not where the step's time goes"),
        Part(rel < 0, f"step {steps[0]:.2f} -> {steps[most]:.2f} ms with {most} ({pct(100 * rel)})",
             pair, name="workers shorten the step", mechanism="more workers did not shorten the step"))


def _wait_share(group):
    """100 x summed input wait / summed step time (resampled, the two series paired)."""
    sums = group.sum(axis=-1)
    return 100 * sums[:, 0] / sums[:, 1]


@claim("C47", "E24", "pinned host memory makes the host-to-device copy faster",
       chapter="article: test pin_memory + non_blocking for the transfer",
       tolerance="pinned copy median below pageable, resolved by the pair's significance test")
def _pinned(ev):
    eid = ENTRY.eid
    pinned = ev.value(eid, COPY_PINNED, HOST_TO_DEVICE)
    pageable = ev.value(eid, COPY_PAGEABLE, HOST_TO_DEVICE)
    # the pair's difference, as the A/B writer names it (pinned minus pageable)
    difference = f"{COPY_PINNED}_minus_{COPY_PAGEABLE}"
    return judge(pinned < pageable, f"pinned {pinned:.3f} vs pageable {pageable:.3f} ms "
                 f"({pct(100 * (pinned - pageable) / pageable)})",
                 is_resolved=resolved(ev, eid, difference, pinned - pageable),
                 mechanism="the pinned copy is not faster here")
