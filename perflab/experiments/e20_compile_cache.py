"""E20: the read side of scripts/e20_compile_cache.py (its entry, table, figure and claims)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from perflab.claims import SEPARATE_PROCESSES, claim, holds, judge
from perflab.experiments import Experiment
from perflab.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure


ENTRY = Experiment(
        "E20",
        "compile_cache",
        "Compile cost: a cold and a warm Inductor cache, and the break-even",
        "interventions",
        workloads=("pointwise",),
    report_section='18 · torch.compile',
)


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Cold vs warm Inductor cache: first compiled call, steady state, break-even."""
    r = rows_of("E20", frame)
    records = []
    for phase in ("cold", "warm"):
        c, e, d = f"{phase}/compiled", f"{phase}/eager", f"{phase}/compiled_vs_eager"
        records.append({
            "cache": phase,
            "first_compiled_call_s": pick(r, c, "first_call", "value"),
            "fxgraph_cache_hits": pick(r, c, "inductor/fxgraph_cache_hit", "value"),
            "fxgraph_cache_misses": pick(r, c, "inductor/fxgraph_cache_miss", "value"),
            "eager_steady_ms": pick(r, e, "forward_latency"),
            "compiled_steady_ms": pick(r, c, "forward_latency"),
            "break_even_calls": pick(r, d, "break_even_calls", "value"),
            "max_abs_diff": pick(r, d, "max_abs_diff", "value"),
            "cache_files_before": pick(r, f"{phase}/cache", "cache_files_before", "value"),
        })
    records.append({"cache": "warm vs cold",
                    "first_call_ratio": pick(r, "warm_vs_cold", "first_call_ratio", "value"),
                    "first_call_saved_s": pick(r, "warm_vs_cold", "first_call_saved", "value")})
    return make_table(records)


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Compile break-even: cumulative time of N calls, eager vs compiled cold and warm."""
    # plotting is imported here, not above: timing jobs import this module
    from perflab.figures import add_note, new_figure, num
    r = rows[rows.experiment == "E20"]
    fig, (ax, ax2) = new_figure("E20", r, ncols=2, width=12.0)
    notes, curves = [], {}
    eager = [num(pick(r, f"{ph}/eager", "forward_latency")) for ph in ("cold", "warm")]
    eager = [e for e in eager if e is not None]
    for phase in ("cold", "warm"):
        first = num(pick(r, f"{phase}/compiled", "first_call", "value"))
        steady = num(pick(r, f"{phase}/compiled", "forward_latency"))
        if first is None or steady is None:
            notes.append(f"{phase}: {pick(r, f'{phase}/compiled', 'first_call', 'value')}")
            continue
        n = pick(r, f"{phase}/compiled_vs_eager", "break_even_calls", "value")
        if isinstance(n, Missing):
            notes.append(f"{phase}: never breaks even ({n.reason})")
        curves[phase] = (first, steady, num(n))
    known = [n for *_, n in curves.values() if n is not None]
    calls = np.unique(np.logspace(0, np.log10(max([10.0, *(4 * n for n in known)])), 300).round())
    for (phase, (first, steady, n)), colour in zip(curves.items(), ("C1", "C2")):
        ax.plot(calls, first + (calls - 1) * steady / 1e3, color=colour,
                label=f"compiled, {phase} cache (first call {first:.2f} s)")
        if n is not None:
            ax.axvline(n, color=colour, ls=":", lw=1)
            ax.annotate(f"break-even {int(n)} calls", (n, first + (n - 1) * steady / 1e3),
                        fontsize=8, color=colour, xytext=(4, -12), textcoords="offset points")
    if eager:
        ax.plot(calls, calls * float(np.median(eager)) / 1e3, color="C0", label="eager")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("number of calls N")
    ax.set_ylabel("total time of N calls, s")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title("break-even: where the compiled total drops below eager", fontsize=9)
    add_note(ax, notes)
    if curves:
        names = list(curves)
        vals = [curves[p][0] for p in names]
        ax2.bar(names, vals, color=["C1", "C2"][:len(names)])
        for x, v in enumerate(vals):
            ax2.text(x, v, f"{v:.2f} s", ha="center", va="bottom", fontsize=9)
        ax2.set_ylabel("first compiled call of a fresh process, s")
        ratio = pick(r, "warm_vs_cold", "first_call_ratio", "value")
        if not isinstance(ratio, Missing):
            ax2.set_title(f"warm / cold first call = {ratio:.2f}", fontsize=9)
    return fig


@claim("C41", "E20", "a warm Inductor cache cuts the first compiled call; steady state is the same",
       chapter="10.945 s cold vs 2.542 s warm; steady 0.892 vs 0.885 ms",
       tolerance="warm first call < 50% of cold; steady states within 10%, undecided without a "
                 "between-process floor (cold and warm are separate processes)")
def _compile_cache(ev):
    cold = ev.value("E20", "cold/compiled", "first_call", "value")
    warm = ev.value("E20", "warm/compiled", "first_call", "value")
    sc = ev.value("E20", "cold/compiled", "forward_latency")
    sw = ev.value("E20", "warm/compiled", "forward_latency")
    measured = f"first call {cold:.2f} -> {warm:.2f}; steady {sc:.3f} vs {sw:.3f} ms"
    if warm >= 0.5 * cold:
        return holds(False, measured, mechanism="the warm cache did not shorten the first call "
                                                 "much")
    # the steady states are two processes' medians: no floor of that kind to judge them by
    return judge(abs(sw - sc) <= 0.1 * sc, measured, is_resolved=SEPARATE_PROCESSES,
                 mechanism="steady state differs between cold and warm")
