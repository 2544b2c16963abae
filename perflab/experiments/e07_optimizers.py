"""E07 · Intervene: what does the optimizer step cost, and does fused AdamW change it?

``scripts/e07_optimizers.py`` times each optimizer's ``.step()`` alone with the same
gradients present, checks one fused AdamW step against one foreach step from identical
state, and runs the whole training step with foreach and with fused AdamW as an
interleaved pair. This module names those rows and reads them back: the table, the
figure, claims C15-C18, and the row names the ledger and the diagnosis cite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.core.names import STEP_LATENCY
from perflab.instruments import ab
from perflab.kit.claims import (
    NUMERICS_EXACT,
    Evidence,
    Part,
    claim,
    holds,
    judge,
    judge_parts,
    pct,
    resolved,
)
from perflab.kit.experiment import Experiment
from perflab.kit.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

EID = "E07"

ENTRY = Experiment(
    EID,
    "optimizers",
    "Intervene: the optimizer step in isolation, and fused vs foreach AdamW",
    "localize",
    report_section="6 · Intervene, remeasure",
)

#: its parameters (config key ``experiments.E07``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
optimizers:
  description: optimizers whose isolated .step() is timed
  type: array
  items: {type: string, enum: [sgd, sgd_momentum, adamw_foreach, adamw_fused]}
  minItems: 1
  default: [sgd, sgd_momentum, adamw_foreach, adamw_fused]
pair_blocks: {type: integer, minimum: 2, default: 12}
pair_inner: {type: integer, minimum: 1, default: 30}
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'pair_blocks': 2, 'pair_inner': 5}}

#: the optimizers (names of :func:`perflab.instruments.optim.factory`); each isolated ``.step()`` is the
#: variant of its name, metric OPTIMIZER_STEP
SGD, SGD_MOMENTUM, FOREACH, FUSED = "sgd", "sgd_momentum", "adamw_foreach", "adamw_fused"
OPTIMIZERS = (SGD, SGD_MOMENTUM, FOREACH, FUSED)
OPTIMIZER_STEP = "optimizer_step"
#: one fused step against one foreach step: the variant and its metrics
FUSED_VS_FOREACH = "fused_vs_foreach"
MAX_ABS_DIFF = "max_abs_diff"
PARAMETER_SCALE = "parameter_scale"
UPDATE_SCALE = "update_scale"
#: the full training step with each AdamW, as an interleaved pair (perflab.pipeline.runner.Context.ab),
#: and the pair's difference variant (fused - foreach)
STEP_FOREACH, STEP_FUSED = f"step_{FOREACH}", f"step_{FUSED}"
STEP_FUSED_MINUS_FOREACH = f"{STEP_FUSED}_minus_{STEP_FOREACH}"


def agreement_row(metric: str) -> tuple[str, str, str, str]:
    """(experiment, variant, metric, statistic) of the one-step fused-vs-foreach check."""
    return EID, FUSED_VS_FOREACH, metric, "value"


def _pair_records(r: pd.DataFrame, a: str, b: str, label_a: str, label_b: str) -> list[dict]:
    """An interleaved pair's rows (Context.ab): each side, its block spread, the difference."""
    d = f"{b}_minus_{a}"
    out = []
    for label, v in ((label_a, a), (label_b, b)):
        out.append({
            "measurement": label,
            "median_ms": pick(r, v),
            "iqr_ms": pick(r, v, statistic="iqr"),
            "block_min_ms": pick(r, v, ab.BLOCK_MEDIAN, "min"),
            "block_max_ms": pick(r, v, ab.BLOCK_MEDIAN, "max"),
            "examples_per_s": pick(r, v, "throughput"),
        })
    out.append({
        "measurement": f"{label_b} - {label_a}",
        "median_ms": pick(r, d, statistic="value"),
        "change_pct": pick(r, d, STEP_LATENCY + ab.REL, "value"),
        "wilcoxon_p": pick(r, d, ab.WILCOXON_P, "value"),
        "resolved": pick(r, d, ab.RESOLVED, "value"),
    })
    return out


PAIR_COLUMNS = ["measurement", "median_ms", "iqr_ms", "block_min_ms", "block_max_ms",
                "examples_per_s", "change_pct", "wilcoxon_p", "resolved"]
#: the pair's two sides as the table and the figure label them
PAIR_LABELS = ("full step, AdamW foreach", "full step, AdamW fused")


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Isolated .step() per optimizer, the one-step correctness check, the end-to-end pair."""
    r = rows_of(EID, frame)
    records = [{"measurement": f".step() {v}", "median_ms": pick(r, v, OPTIMIZER_STEP),
                "iqr_ms": pick(r, v, OPTIMIZER_STEP, "iqr")}
               for v in OPTIMIZERS]
    records.append({
        "measurement": "one step fused vs foreach: max |diff| (parameter scale)",
        "max_abs_diff": pick(r, FUSED_VS_FOREACH, MAX_ABS_DIFF, "value"),
        "parameter_scale": pick(r, FUSED_VS_FOREACH, PARAMETER_SCALE, "value"),
    })
    records += _pair_records(r, STEP_FOREACH, STEP_FUSED, *PAIR_LABELS)
    return make_table(records, [*PAIR_COLUMNS, "max_abs_diff", "parameter_scale"])


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """The isolated optimizer ``.step()`` of SGD, SGD with momentum, AdamW foreach and AdamW
    fused with the same gradients present, and the full training step with foreach vs fused
    AdamW as an interleaved pair, block by block.
    """
    # plotting is imported here, not above: timing jobs import this module
    from perflab.kit.figures import add_note, bar_cell, draw_bars, new_figure, pair_blocks

    r = rows[rows.experiment == EID]
    fig, (ax, ax2) = new_figure(ENTRY, r, ncols=2, width=12.0)
    opts = list(OPTIMIZERS)
    notes = draw_bars(ax, opts, {"median": [bar_cell(r, o, metric=OPTIMIZER_STEP) for o in opts]})
    ax.set_ylabel("isolated .step(), median ms (error bar: p25..p75)")
    diff = pick(r, FUSED_VS_FOREACH, MAX_ABS_DIFF, "value")
    ax.set_title(f"one fused vs one foreach step: max |diff| = {diff}" if isinstance(diff, Missing)
                 else f"one fused vs one foreach step: max |diff| = {diff:.2e}", fontsize=9)
    add_note(ax, notes, loc="upper right")
    pair_blocks(ax2, samples, EID, STEP_FOREACH, STEP_FUSED, PAIR_LABELS)
    return fig


#: C16: one fused step agrees with one foreach step when max |diff| < 1e<this> x the
#: parameter scale
AGREEMENT_EXPONENT = -5


def _wider_iqr(ev: Evidence, a: str, b: str) -> float | None:
    """The wider IQR of two optimizers' isolated steps; None when either has none (then no
    noise measure: not resolved, rather than a spread of 0)."""
    iqrs = [ev.maybe(EID, v, OPTIMIZER_STEP, "iqr") for v in (a, b)]
    return None if None in iqrs else max(iqrs)


@claim("C15", EID, "fused AdamW's .step() is faster than foreach",
       chapter="5.490 vs 8.969 ms", tolerance="fused median < foreach median, beyond both IQRs")
def _fused_faster(ev):
    fo = ev.value(EID, FOREACH, OPTIMIZER_STEP)
    fu = ev.value(EID, FUSED, OPTIMIZER_STEP)
    noise = _wider_iqr(ev, FOREACH, FUSED)
    return judge(fu < fo, f"fused {fu:.3f} vs foreach {fo:.3f} ms ({pct(100 * (fu - fo) / fo)})",
                 is_resolved=resolved(ev, EID, FUSED, fu - fo, noise=noise),
                 mechanism="the fused kernel is slower than the multi-tensor foreach path here")


@claim("C16", EID, "one fused AdamW step agrees with one foreach step within roundoff",
       chapter="max |diff| 3.7e-9 at parameter scale 2.6e-2",
       tolerance=f"max |diff| < 1e{AGREEMENT_EXPONENT} x parameter scale",
       exact=NUMERICS_EXACT)
def _fused_agrees(ev):
    d = ev.value(*agreement_row(MAX_ABS_DIFF))
    scale = ev.value(*agreement_row(PARAMETER_SCALE))
    return holds(d < 10.0 ** AGREEMENT_EXPONENT * scale, f"max |diff| {d:.2e} at scale {scale:.2e}",
                 mechanism="fused and foreach updates differ beyond roundoff")


@claim("C17", EID, "SGD < SGD momentum < AdamW foreach in isolated .step() time",
       chapter="1.407 < 3.605 < 8.969 ms",
       tolerance="strict ordering of the medians, each gap wider than the two steps' IQRs")
def _optimizer_order(ev):
    med = {v: ev.value(EID, v, OPTIMIZER_STEP) for v in (SGD, SGD_MOMENTUM, FOREACH)}
    parts = []
    for lo, hi in ((SGD, SGD_MOMENTUM), (SGD_MOMENTUM, FOREACH)):
        parts.append(Part(med[lo] < med[hi], f"{lo} {med[lo]:.3f} < {hi} {med[hi]:.3f} ms",
                          resolved(ev, EID, hi, med[hi] - med[lo], noise=_wider_iqr(ev, lo, hi)),
                          name=f"{lo} < {hi}",
                          mechanism="more per-parameter state does not cost more time here"))
    return judge_parts(*parts)


@claim("C18", EID, "the full training step is faster with fused AdamW (interleaved pair)",
       chapter="step falls to roughly 13 ms from ~16.4 (and 19.1 -> 14.4 ms in the worked pass)",
       tolerance="fused - foreach < 0, resolved by the pair's significance test")
def _full_step_fused(ev):
    d = STEP_FUSED_MINUS_FOREACH
    rel = ev.value(EID, d, STEP_LATENCY + ab.REL, "value")
    diff = ev.value(EID, d, STEP_LATENCY, "value")
    return judge(rel < 0, f"{diff:+.3f} ms ({pct(rel)})",
                 is_resolved=resolved(ev, EID, d, diff),
                 mechanism="the optimizer is too small a share of this step for the fused kernel "
                           "to show")
