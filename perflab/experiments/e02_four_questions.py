"""E02 · How fast is the model? Four legitimate questions with four different answers.

``scripts/e02_four_questions.py`` times one model and one batch as forward under
``inference_mode``, forward with grad, forward + backward and the full training step,
eager and (with ``compile: true``) compiled, the first compiled call apart from the
steady state. This module names those rows and reads them back: the table, the figure
and claims C05-C06.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

import pandas as pd

from perflab.core.names import STEP_LATENCY
from perflab.kit.claims import Part, against_floor, claim, judge, judge_parts, pct
from perflab.kit.experiment import Experiment
from perflab.kit.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

EID = "E02"

ENTRY = Experiment(
    EID,
    "four_questions",
    "How fast is the model? Four questions, eager and compiled",
    "hygiene",
    report_section="2 · How fast is the model?",
    builds_the_contract=True,
)

#: its parameters (config key ``experiments.E02``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
compile:
  description: also time the four questions under torch.compile (first call apart)
  type: boolean
  default: true
# round-robin blocks of every question; calls per block = repeats / blocks
blocks:
  description: round-robin blocks of every question (calls per block = repeats / blocks)
  type: integer
  minimum: 1
  default: 20
# calls of each question; null: timing.repeats
repeats:
  description: "calls of each question in the round robin (null: timing.repeats)"
  oneOf: [{type: "null"}, {type: integer, minimum: 1}]
  default: null
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'blocks': 3}}

#: the four questions, each a variant (metric ``step_latency``), in the order they are timed
FORWARD_INFERENCE = "forward_inference"
FORWARD_GRAD = "forward_grad"
FORWARD_BACKWARD = "forward_backward"
TRAIN_STEP = "train_step"
#: a compiled question's first call (compilation included), apart from its steady state
FIRST_CALL = "first_call"


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Four questions: one row per question, eager and compiled side by side."""
    r = rows_of(EID, frame)
    records = []
    for v in r.variant.unique():  # the order the experiment measured them in
        records.append({
            "question": v,
            "mode": r[r.variant == v].iloc[0]["mode"],
            "eager_median_ms": pick(r, v, execution="eager"),
            "eager_iqr_ms": pick(r, v, statistic="iqr", execution="eager"),
            "compiled_median_ms": pick(r, v, execution="compiled"),
            "compiled_iqr_ms": pick(r, v, statistic="iqr", execution="compiled"),
            "compiled_first_call_ms": pick(r, v, FIRST_CALL, "value", execution="compiled"),
        })
    return make_table(records)


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Median time per call of the four questions (forward under ``inference_mode``, forward
    with grad, forward + backward, full training step), eager vs ``torch.compile`` steady
    state, with p25..p75 error bars; the first compiled call of each is printed above the
    bars.
    """
    # plotting is imported here, not above: timing jobs import this module
    from perflab.kit.figures import add_note, bar_cell, draw_bars, new_figure

    r = rows[rows.experiment == EID]
    fig, (ax,) = new_figure(ENTRY, r, width=8.0)
    questions = list(r.variant.unique())
    executions = [e for e in ("eager", "compiled") if (r.execution == e).any()]
    series = {ex: [bar_cell(r, q, ex) for q in questions] for ex in executions}
    notes = draw_bars(ax, questions, series)
    if "compiled" in executions:
        # the first compiled call is compilation: printed, not drawn (it dwarfs the bars)
        firsts = [pick(r, q, FIRST_CALL, "value", execution="compiled") for q in questions]
        text = ", ".join(f"{q} {v / 1e3:.2f} s" for q, v in zip(questions, firsts)
                         if not isinstance(v, Missing))
        if text:
            ax.set_title(textwrap.fill(f"first compiled call (not drawn): {text}", 95),
                         fontsize=9)
    ax.set_ylabel("median ms per call (error bar: p25..p75)")
    ax.set_xlabel("")
    add_note(ax, notes, loc="upper right")
    return fig


#: C05: forward with and without grad "cost about the same" within this %
SAME_COST_PCT = 10
#: C06: each question's answer is at least this % above the previous one's
STEP_UP_PCT = 20


@claim("C05", EID, "forward under inference_mode costs about what forward with grad costs",
       chapter="2.968 vs 2.967 ms",
       tolerance=f"within {SAME_COST_PCT}% of each other; undecided inside the A/A floor (C00)")
def _inference_vs_grad(ev):
    inf = ev.value(EID, FORWARD_INFERENCE, STEP_LATENCY)
    grad = ev.value(EID, FORWARD_GRAD, STEP_LATENCY)
    rel = (inf - grad) / grad
    return judge(abs(rel) <= SAME_COST_PCT / 100, f"{inf:.3f} vs {grad:.3f} ms ({pct(100 * rel)})",
                 is_resolved=against_floor(ev, 100 * rel, SAME_COST_PCT, agree=True),
                 mechanism="saving activations for backward costs measurable time here"
                 if rel < 0 else "inference_mode is slower here")


@claim("C06", EID, "the four questions have four answers: forward < forward+backward < full step",
       chapter="2.97 < 8.09 < 16.45 ms",
       tolerance=f"each at least {STEP_UP_PCT}% above the previous, beyond the A/A floor (C00)")
def _four_answers(ev):
    f = ev.value(EID, FORWARD_GRAD, STEP_LATENCY)
    fb = ev.value(EID, FORWARD_BACKWARD, STEP_LATENCY)
    t = ev.value(EID, TRAIN_STEP, STEP_LATENCY)
    # each step up its own part: the questions run in one interleaved round robin
    parts = []
    for lo, hi, name, mechanism in (
            (f, fb, "backward adds", "backward adds little to forward here"),
            (fb, t, "the optimizer adds", "the optimizer adds little to forward + backward here")):
        up = 100 * (hi / lo - 1)
        parts.append(Part(up > STEP_UP_PCT, f"{lo:.3f} -> {hi:.3f} ms ({pct(up)})",
                          against_floor(ev, up, STEP_UP_PCT),
                          name=f"{name} at least {STEP_UP_PCT}%",
                          mechanism=mechanism))
    return judge_parts(*parts)
