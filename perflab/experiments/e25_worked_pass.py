"""E25: the read side of scripts/e25_worked_pass.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.claims import Absent, claim, judge, pct, phase_shares, resolved
from perflab.experiments import Experiment
from perflab.tables import NOT_RUN, Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E25",
        "worked_pass",
        "A worked pass: measure, localize, intervene (AdamW foreach to fused), remeasure",
        "localize",
    report_section='19 · A worked pass',
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """The worked pass, one line per step of measure / localize / intervene / remeasure."""
    r = rows_of("E25", frame)
    shares = {ph: pick(r, f"localize/{ph}", "phase_share", "value") for ph in
              ("input_wait", "host_to_device", "forward", "loss", "backward", "optimizer",
               "logging")}
    measured = {k: v for k, v in shares.items() if not isinstance(v, Missing)}
    largest = max(measured, key=measured.get) if measured else Missing(NOT_RUN)
    records = [
        {"step": "measure", "quantity": "baseline step, AdamW foreach (median ms)",
         "value": pick(r, "baseline_adamw_foreach")},
        {"step": "measure", "quantity": "baseline IQR (ms)",
         "value": pick(r, "baseline_adamw_foreach", statistic="iqr")},
        {"step": "measure", "quantity": "baseline throughput (examples/s)",
         "value": pick(r, "baseline_adamw_foreach", "throughput")},
        {"step": "localize", "quantity": "largest phase", "value": largest},
        {"step": "localize", "quantity": "optimizer share (%)", "value": shares["optimizer"]},
        {"step": "localize", "quantity": "backward share (%)", "value": shares["backward"]},
        {"step": "localize", "quantity": "forward share (%)", "value": shares["forward"]},
        {"step": "correctness", "quantity": "one step fused vs foreach, max |diff|",
         "value": pick(r, "fused_vs_foreach", "max_abs_diff", "value")},
        {"step": "correctness", "quantity": "parameter scale (mean |p|)",
         "value": pick(r, "fused_vs_foreach", "parameter_scale", "value")},
        {"step": "remeasure", "quantity": "pair: AdamW foreach (median ms)",
         "value": pick(r, "adamw_foreach")},
        {"step": "remeasure", "quantity": "pair: AdamW fused (median ms)",
         "value": pick(r, "adamw_fused")},
        {"step": "remeasure", "quantity": "latency change (%)",
         "value": pick(r, "adamw_fused_minus_adamw_foreach", "step_latency_rel", "value")},
        {"step": "remeasure", "quantity": "throughput change (%)",
         "value": pick(r, "adamw_fused_minus_adamw_foreach", "throughput_rel", "value")},
        {"step": "remeasure", "quantity": "difference resolved (Wilcoxon p < 0.05)",
         "value": pick(r, "adamw_fused_minus_adamw_foreach", "difference_resolved", "value")},
        {"step": "tradeoff", "quantity": "peak allocated, foreach alone (MiB)",
         "value": pick(r, "adamw_foreach", "peak_allocated", "max")},
        {"step": "tradeoff", "quantity": "peak allocated, fused alone (MiB)",
         "value": pick(r, "adamw_fused", "peak_allocated", "max")},
    ]
    return make_table(records, ["step", "quantity", "value"])


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """The worked pass on one job: each phase's share of the baseline step (localize), then the
    foreach and fused AdamW steps remeasured as an interleaved pair, block by block.
    """
    # plotting is imported here, not above: timing jobs import this module
    import seaborn as sns

    from perflab.figures import new_figure, num, pair_blocks
    r = rows[rows.experiment == "E25"]
    fig, (ax, ax2) = new_figure("E25", r, ncols=2, width=12.0)
    phases = ["input_wait", "host_to_device", "forward", "loss", "backward", "optimizer",
              "logging"]
    shares = [num(pick(r, f"localize/{ph}", "phase_share", "value")) for ph in phases]
    ax.barh([ph for ph, v in zip(phases, shares) if v is not None],
            [v for v in shares if v is not None], color=sns.color_palette()[0])
    ax.invert_yaxis()
    ax.set_xlabel("share of the step, % (per-phase sync)")
    ax.set_title("localize: the baseline step (AdamW foreach)", fontsize=9)
    pair_blocks(ax2, samples, "E25", "adamw_foreach", "adamw_fused",
                 ("AdamW foreach", "AdamW fused"))
    change = pick(r, "adamw_fused_minus_adamw_foreach", "step_latency_rel", "value")
    if not isinstance(change, Missing):
        ax2.set_title(f"remeasure: fused changes the step by {change:+.1f}%", fontsize=9)
    return fig


@claim("C43", "E25", "the worked pass: fused AdamW lowers latency and raises throughput, same contract",
       chapter="19.1 -> 14.4 ms (-24%), throughput +32%",
       tolerance="latency change < 0, resolved by the pair's significance test")
def _worked_pass(ev):
    d = "adamw_fused_minus_adamw_foreach"
    rel = ev.value("E25", d, "step_latency_rel", "value")
    thr = ev.maybe("E25", d, "throughput_rel", "value", float("nan"))
    diff = ev.maybe("E25", d, "step_latency", "value", rel)
    try:
        s = phase_shares(ev, "E25", "localize/")
        top = max(s, key=s.get)
        where = f"; largest phase {top} ({s[top]:.0f}%), optimizer {s.get('optimizer', float('nan')):.0f}%"
    except Absent:
        where = ""
    return judge(rel < 0, f"latency {pct(rel)}, throughput {pct(thr)}",
                 is_resolved=resolved(ev, "E25", d, diff),
                 mechanism="the fused step is not faster here" + where)
