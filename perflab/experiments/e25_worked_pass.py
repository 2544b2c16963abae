"""E25, a worked pass on one job: measure the baseline step (AdamW foreach), localize its time
by phase, intervene on one mechanism (AdamW fused), check the update is the same, and
remeasure under the same contract. Measured by scripts/e25_worked_pass.py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.core.names import PHASE_SHARE, PHASES, STEP_LATENCY, THROUGHPUT
from perflab.experiments.e07_optimizers import AGREEMENT_EXPONENT
from perflab.instruments import ab
from perflab.kit.claims import Absent, Part, claim, judge_parts, pct, phase_shares, resolved
from perflab.kit.experiment import Experiment
from perflab.kit.tables import NOT_RUN, Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ENTRY = Experiment(
    "E25",
    "worked_pass",
    "A worked pass: measure, localize, intervene (AdamW foreach to fused), remeasure",
    "localize",
    report_section="19 · A worked pass",
    builds_the_contract=True,
)

#: its parameters (config key ``experiments.E25``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
blocks: {type: integer, minimum: 2, default: 12}
inner: {type: integer, minimum: 1, default: 30}
# calls of the baseline and of the localization; null: timing.repeats
repeats:
  description: "calls of the baseline and of the per-phase localization (null: timing.repeats)"
  oneOf: [{type: "null"}, {type: integer, minimum: 1}]
  default: null
      # E19-E24
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'blocks': 2, 'inner': 5}}

# ------------------------------------------------------------------ the names its script writes

#: the two optimizers (perflab.instruments.optim factory names), each also the variant of its side
FOREACH, FUSED = "adamw_foreach", "adamw_fused"
BASELINE = f"baseline_{FOREACH}"  # step 1: the baseline under the contract
LOCALIZE_PREFIX = "localize/"  # step 2: one variant per phase of steps.PHASES
FUSED_VS_FOREACH = "fused_vs_foreach"  # step 3: one step from identical state
DIFFERENCE = f"{FUSED}_minus_{FOREACH}"  # step 4: the pair's difference (runner.Context.ab)

MAX_ABS_DIFF, PARAMETER_SCALE = "max_abs_diff", "parameter_scale"
#: the difference's rows in perflab.instruments.ab's names (STEP_LATENCY_REL, ab.RESOLVED), and the
#: throughput change the script writes beside them
STEP_LATENCY_REL = f"{STEP_LATENCY}{ab.REL}"
THROUGHPUT_REL = f"{THROUGHPUT}{ab.REL}"
PEAK_ALLOCATED, PEAK_RESERVED = "peak_allocated", "peak_reserved"  # step 5: each side alone


def localize_variant(phase: str) -> str:
    return f"{LOCALIZE_PREFIX}{phase}"


# ------------------------------------------------------------------ table


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """The worked pass, one line per step of measure / localize / intervene / remeasure."""
    r = rows_of("E25", frame)
    shares = {ph: pick(r, localize_variant(ph), PHASE_SHARE, "value") for ph in PHASES}
    measured = {k: v for k, v in shares.items() if not isinstance(v, Missing)}
    largest = max(measured, key=measured.get) if measured else Missing(NOT_RUN)
    lines = [
        ("measure", "baseline step, AdamW foreach (median ms)", pick(r, BASELINE)),
        ("measure", "baseline IQR (ms)", pick(r, BASELINE, statistic="iqr")),
        ("measure", "baseline throughput (examples/s)", pick(r, BASELINE, THROUGHPUT)),
        ("localize", "largest phase", largest),
        ("localize", "optimizer share (%)", shares["optimizer"]),
        ("localize", "backward share (%)", shares["backward"]),
        ("localize", "forward share (%)", shares["forward"]),
        ("correctness", "one step fused vs foreach, max |diff|",
         pick(r, FUSED_VS_FOREACH, MAX_ABS_DIFF, "value")),
        ("correctness", "parameter scale (mean |p|)",
         pick(r, FUSED_VS_FOREACH, PARAMETER_SCALE, "value")),
        ("remeasure", "pair: AdamW foreach (median ms)", pick(r, FOREACH)),
        ("remeasure", "pair: AdamW fused (median ms)", pick(r, FUSED)),
        ("remeasure", "latency change (%)",
         pick(r, DIFFERENCE, STEP_LATENCY_REL, "value")),
        ("remeasure", "throughput change (%)", pick(r, DIFFERENCE, THROUGHPUT_REL, "value")),
        ("remeasure", "difference resolved (Wilcoxon p < 0.05)",
         pick(r, DIFFERENCE, ab.RESOLVED, "value")),
        ("tradeoff", "peak allocated, foreach alone (MiB)", pick(r, FOREACH, PEAK_ALLOCATED, "max")),
        ("tradeoff", "peak allocated, fused alone (MiB)", pick(r, FUSED, PEAK_ALLOCATED, "max")),
    ]
    records = [{"step": step, "quantity": quantity, "value": value}
               for step, quantity, value in lines]
    return make_table(records, ["step", "quantity", "value"])


# ------------------------------------------------------------------ figure


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """The worked pass on one job: each phase's share of the baseline step (localize), then the
    foreach and fused AdamW steps remeasured as an interleaved pair, block by block.
    """
    # plotting is imported here, not above: timing jobs import this module
    import seaborn as sns

    from perflab.kit.figures import new_figure, num, pair_blocks

    r = rows[rows.experiment == "E25"]
    fig, (ax, ax2) = new_figure(ENTRY, r, ncols=2, width=12.0)
    shares = [num(pick(r, localize_variant(ph), PHASE_SHARE, "value")) for ph in PHASES]
    ax.barh([ph for ph, v in zip(PHASES, shares) if v is not None],
            [v for v in shares if v is not None], color=sns.color_palette()[0])
    ax.invert_yaxis()
    ax.set_xlabel("share of the step, % (per-phase sync)")
    ax.set_title("localize: the baseline step (AdamW foreach)", fontsize=9)
    pair_blocks(ax2, samples, "E25", FOREACH, FUSED, ("AdamW foreach", "AdamW fused"))
    change = pick(r, DIFFERENCE, STEP_LATENCY_REL, "value")
    if not isinstance(change, Missing):
        ax2.set_title(f"remeasure: fused changes the step by {change:+.1f}%", fontsize=9)
    return fig


# ------------------------------------------------------------------ claims


#: the contract columns both sides of the pair must share (the "same contract" of C43)
SIDE_CONTRACT = ("workload", "model", "input_shape", "dtype", "device", "mode", "execution")


def _not_measured(what: str, name: str) -> Part:
    """A part whose evidence is absent: undecided, never held."""
    return Part(None, f"{what} not measured", (False, f"not resolved: no {what} row"),
                name=name)


def _same_contract(ev) -> Part:
    r = ev.of("E25")
    sides = [r[(r.variant == v) & (r.status == "ok")] for v in (FOREACH, FUSED)]
    if any(s.empty for s in sides):
        return _not_measured("side", "same contract")
    got = [{tuple(x) for x in s[list(SIDE_CONTRACT)].astype(str).itertuples(index=False)}
           for s in sides]
    return Part(got[0] == got[1] and len(got[0]) == 1,
                "both sides under one contract" if got[0] == got[1] else
                f"contracts differ: {sorted(got[0])} vs {sorted(got[1])}", name="same contract",
                mechanism="the pair's sides ran under different contracts")


@claim("C43", "E25",
       "the worked pass: fused AdamW lowers latency and raises throughput, same contract",
       chapter="19.1 -> 14.4 ms (-24%), throughput +32%",
       tolerance="latency change < 0, resolved by the pair's significance test; throughput "
       "change > 0; both sides under one contract; one step of each from identical state "
       f"agrees within 1e{AGREEMENT_EXPONENT} x the parameter scale (C16's bound)")
def _worked_pass(ev):
    rel = ev.value("E25", DIFFERENCE, STEP_LATENCY_REL, "value")
    thr = ev.maybe("E25", DIFFERENCE, THROUGHPUT_REL, "value", None)
    diff = ev.maybe("E25", DIFFERENCE, STEP_LATENCY, "value", rel)
    try:
        s = phase_shares(ev, "E25", LOCALIZE_PREFIX)
        top = max(s, key=s.get)
        where = (f"; largest phase {top} ({s[top]:.0f}%), "
                 f"optimizer {s.get('optimizer', float('nan')):.0f}%")
    except Absent:
        where = ""
    parts = [Part(rel < 0, f"latency {pct(rel)}", resolved(ev, "E25", DIFFERENCE, diff),
                  mechanism="the fused step is not faster here" + where, name="latency down")]
    parts.append(_not_measured("throughput", "throughput up") if thr is None else
                 Part(thr > 0, f"throughput {pct(thr)}", name="throughput up",
                      mechanism="the throughput does not rise"))
    parts.append(_same_contract(ev))
    d = ev.maybe("E25", FUSED_VS_FOREACH, MAX_ABS_DIFF, "value", None)
    scale = ev.maybe("E25", FUSED_VS_FOREACH, PARAMETER_SCALE, "value", None)
    parts.append(_not_measured("one-step agreement", "same result")
                 if d is None or scale is None else
                 Part(d < 10.0 ** AGREEMENT_EXPONENT * scale,
                      f"one step max |diff| {d:.1e} at parameter scale {scale:.1e}",
                      name="same result", mechanism="fused and foreach updates differ beyond "
                      "roundoff"))
    return judge_parts(*parts)
