"""E11: the read side of scripts/e11_retained_leak.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.claims import Absent, Evidence, claim, holds
from perflab.experiments import Experiment
from perflab.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E11",
        "retained_leak",
        "The accumulating branch: a retained reference grows memory linearly",
        "memory",
        cpu_behaviour="RSS instead of allocated (no allocator counter; empty_cache n/a); "
        "the retained graph's saved-tensor bytes are counted on both devices",
    report_section='10 · The accumulating branch',
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """The leak: memory every N iterations, final, after empty_cache; growth; the metric."""
    r = rows_of("E11", frame)
    instrument = "allocated" if ((r.metric == "allocated") & (r.status == "ok")).any() else "rss"
    records = []
    for variant in ("retained_graph", "no_grad", "item"):
        marks = sorted({v.removeprefix(f"{variant}/") for v in r.variant.unique()
                        if v.startswith(f"{variant}/i")})
        for metric, label in ((instrument, f"{instrument} MiB"),
                              ("retained_graph_bytes", "retained graph MiB")):
            rec = {"variant": variant, "instrument": label}
            rec.update({m: pick(r, f"{variant}/{m}", metric, "value") for m in marks})
            rec["final"] = pick(r, f"{variant}/final", metric, "value")
            if metric == instrument:
                rec["after_empty_cache"] = pick(r, f"{variant}/after_empty_cache", "allocated",
                                                "value")
                rec["growth_mib_per_iter"] = pick(r, variant, f"{instrument}_growth", "value")
                rec["median_step_mib"] = pick(r, variant, f"{instrument}_median_increment",
                                              "value")
                rec["monitored_metric"] = pick(r, variant, "monitored_metric", "value")
            else:
                rec["growth_mib_per_iter"] = pick(r, variant, "retained_graph_growth", "value")
            records.append(rec)
    records.append({"variant": "all", "instrument": "monitored metric, max |difference|",
                    "monitored_metric": pick(r, "all", "monitored_metric_max_abs_diff",
                                             "value")})
    return make_table(records)


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """The leak plot: memory after every iteration, three variants; the retained graph's bytes."""
    # plotting is imported here, not above: timing jobs import this module
    from perflab.figures import add_note, new_figure, num
    r = rows[rows.experiment == "E11"]
    fig, (ax, ax2) = new_figure("E11", r, ncols=2, width=12.0)
    s = samples[samples.experiment == "E11"]
    instrument = s.metric.iloc[0] if not s.empty else "allocated"
    labels = {"retained_graph": "kept.append(metric) (graph kept)",
              "no_grad": "torch.no_grad()", "item": "metric.item()"}
    notes = []
    for v, label in labels.items():
        d = s[s.variant == v]
        if d.empty:
            notes.append(f"{v}: no samples (not run)")
            continue
        # the median iteration-to-iteration step: a one-off heap trim does not set it
        growth = num(pick(r, v, f"{instrument}_median_increment", "value"))
        ax.plot(d["index"], d.value, lw=2,
                label=f"{label}: {growth:+.3f} MiB/iter (median step)" if growth is not None
                else label)
        after = pick(r, f"{v}/after_empty_cache", "allocated", "value")
        if not isinstance(after, Missing):
            ax.plot([d["index"].max()], [after], "x", ms=9, color="black",
                    label="after empty_cache()" if v == "retained_graph" else None)
    ax.set_xlabel("iteration")
    ax.set_ylabel(f"{instrument} MiB" + (" (process RSS)" if instrument == "rss" else ""))
    ax.set_title("memory after every iteration")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=8)
    add_note(ax, notes)
    for v, label in labels.items():
        marks = sorted(int(x.removeprefix(f"{v}/i")) for x in r.variant.unique()
                       if x.startswith(f"{v}/i"))
        ys = [num(pick(r, f"{v}/i{m:02d}", "retained_graph_bytes", "value")) for m in marks]
        if marks and all(y is not None for y in ys):
            ax2.plot(marks, ys, "o-", label=label)
    ax2.set_xlabel("iteration")
    ax2.set_ylabel("MiB saved for backward, reachable from the kept list")
    ax2.set_title("the retained graph, counted tensor by tensor")
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(loc="upper left", fontsize=8)
    return fig


def _leak_series(ev: Evidence, variant: str) -> list[float]:
    got = sorted((int(v.rsplit("/i", 1)[1]), x)
                 for v, x in ev.variants("E11", f"{variant}/i", "allocated", "value").items())
    if not got:  # a CPU has no live-tensor counter: the bytes the kept graphs hold
        got = sorted((int(v.rsplit("/i", 1)[1]), x) for v, x in
                     ev.variants("E11", f"{variant}/i", "retained_graph_bytes", "value").items())
    if len(got) < 2:
        raise Absent("no allocation series for " + variant + ("" if ev.has("E11") else " (E11 not run)"))
    return [x for _, x in got]


@claim("C27", "E11", "a retained graph-connected metric grows memory linearly; no_grad and .item() stay flat",
       chapter="164 -> 2400 MiB over 60 iterations; 124 and 162 MiB flat",
       tolerance="retained grows > 2x; the repairs within 5% of their start")
def _retained_leak(ev):
    kept = _leak_series(ev, "retained_graph")
    flat = [_leak_series(ev, v) for v in ("no_grad", "item")]
    grows = kept[-1] > 2 * kept[0]
    steps = [b - a for a, b in zip(kept, kept[1:])]
    linear = min(steps) > 0.5 * max(steps) if steps else False
    stays = all(abs(s[-1] - s[0]) <= 0.05 * max(s[0], kept[-1] - kept[0]) for s in flat)
    return holds(grows and linear and stays,
                 f"retained {kept[0]:.1f} -> {kept[-1]:.1f} MiB; no_grad {flat[0][0]:.1f} -> "
                 f"{flat[0][-1]:.1f}; item {flat[1][0]:.1f} -> {flat[1][-1]:.1f}",
                 mechanism="the retained loop does not grow steadily" if not (grows and linear)
                 else "a repaired loop still grows")


@claim("C28", "E11", "empty_cache frees nothing of the retained graph",
       chapter="2400.3 MiB before and after", tolerance="within 1%")
def _empty_cache_no_fix(ev):
    after = ev.value("E11", "retained_graph/after_empty_cache", "allocated", "value")
    final = ev.value("E11", "retained_graph/final", "allocated", "value")
    return holds(abs(after - final) <= 0.01 * final, f"{final:.1f} -> {after:.1f} MiB",
                 mechanism="empty_cache lowered allocated memory: the tensors were not live")
