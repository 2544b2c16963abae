"""E18, attention against sequence length: as T grows, how do the time and peak memory of
manual attention (the T x T scores materialized) and of F.scaled_dot_product_attention grow,
which SDPA backend ran, and where does the manual path run out of memory under the chapter's
card-sized budget? Measured by scripts/e18_attention_seq.py.
"""

from __future__ import annotations

import math
import textwrap
from typing import TYPE_CHECKING

import pandas as pd

from perflab.kit.claims import BYTES_EXACT, Absent, Part, claim, judge_parts
from perflab.kit.experiment import Experiment
from perflab.kit.tables import (
    NOT_RUN,
    Missing,
    largest,
    make_table,
    peak_metric,
    pick,
    prefixed_numbers,
    rows_of,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ENTRY = Experiment(
    "E18",
    "attention_seq",
    "Attention against sequence length: manual vs scaled_dot_product_attention",
    "interventions",
    workloads=("attention",),
    cpu_behaviour="a smaller T range; no memory cap (CUDA allocator only): peak RSS "
    "(VmHWM) of a fresh process per variant",
    report_section="17 · Sequence length",
)

#: its parameters (config key ``experiments.E18``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
# the chapter's 256..4096, and one step beyond
seqs:
  description: sequence lengths T
  type: array
  items: {type: integer, minimum: 1}
  minItems: 1
  default: [256, 512, 1024, 2048, 4096, 8192]
warmup: {type: integer, minimum: 0, default: 5}
repeats: {type: integer, minimum: 1, default: 20}
peak_calls: {type: integer, minimum: 1, default: 2}
# the chapter's card: 12 GiB, of which the display held ~2.6 GiB before any experiment
# ran; the allocator is capped at what was left (CUDA only, set_per_process_memory_fraction)
budget_gib:
  description: CUDA allocator cap emulating the chapter's card (GiB)
  type: number
  exclusiveMinimum: 0
  default: 9.4
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'seqs': [16, 32], 'warmup': 1, 'repeats': 3, 'peak_calls': 1}}

# ------------------------------------------------------------------ the names its script writes

#: the two implementations; each sequence length's variants are T<T>/<impl>
MANUAL, SDPA = "manual", "sdpa"
IMPLS = (MANUAL, SDPA)
SEQ_PREFIX = "T"
COMPARISON = f"{SDPA}_vs_{MANUAL}"

#: T<T>/<impl>: forward + backward, synchronized and warmed (and perflab.instruments.interventions'
#: peak rows of the implementation alone)
FWD_BWD_LATENCY = "fwd_bwd_latency"
#: T<T>/sdpa_vs_manual: agreement after one forward + backward on identical q/k/v, and the
#: output's scale (mean |out|) it is set against
OUT_MAX_ABS_DIFF, GRAD_MAX_ABS_DIFF, OUTPUT_SCALE = (
    "out_max_abs_diff", "grad_max_abs_diff", "output_scale")
#: T<T>/sdpa_backend/<backend>: 1 if the backend's operator ran unrestricted / if SDPA
#: restricted to it runs (the reason when it cannot)
BACKEND_RAN, BACKEND_ELIGIBLE = "backend_ran", "backend_eligible"
#: the allocator cap every measurement ran under (CUDA), in MiB and as a fraction of the device
BUDGET_VARIANT = "budget"
MEMORY_BUDGET, MEMORY_FRACTION = "memory_budget", "memory_fraction"


def seq_variant(seq: int, impl: str) -> str:
    return f"{SEQ_PREFIX}{seq}/{impl}"


def comparison_variant(seq: int) -> str:
    return seq_variant(seq, COMPARISON)


def backend_variant(seq: int, backend: str) -> str:
    return seq_variant(seq, f"{SDPA}_backend/{backend}")


# ------------------------------------------------------------------ accessors


def backends(r: pd.DataFrame, seq: int, metric: str = BACKEND_RAN) -> str:
    """The SDPA backends with value 1 under ``metric`` at T, e.g. 'efficient_attention'."""
    sel = r[r.variant.str.startswith(backend_variant(seq, "")) & (r.metric == metric)
            & (r.status == "ok")]
    names = [v.rsplit("/", 1)[1] for v, x in zip(sel.variant, sel.value) if x == 1]
    return ", ".join(names) if names else ("none recognised" if not sel.empty else NOT_RUN)


def correctness(rows: pd.DataFrame) -> list[tuple[str, float, str]]:
    """The ledger's E18 line: the largest SDPA-vs-manual output difference over T, as
    (ledger field, value, source row); none when not measured."""
    worst = largest(rows, ENTRY.eid, OUT_MAX_ABS_DIFF, suffix=COMPARISON)
    if worst is None:
        return []
    return [(f"{SDPA}_{OUT_MAX_ABS_DIFF}", worst,
             f"{ENTRY.eid} */{COMPARISON} {OUT_MAX_ABS_DIFF} (max)")]


# ------------------------------------------------------------------ table and figure


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Manual vs SDPA attention per T: ms and peak MiB of each, agreement, the backend that ran."""
    r = rows_of(ENTRY.eid, frame)
    peak = peak_metric(r)
    records = []
    for T in prefixed_numbers(r, SEQ_PREFIX):
        d = comparison_variant(T)
        records.append({
            "T": T, "manual_ms": pick(r, seq_variant(T, MANUAL), FWD_BWD_LATENCY),
            "manual_mib": pick(r, seq_variant(T, MANUAL), peak, "max"),
            "sdpa_ms": pick(r, seq_variant(T, SDPA), FWD_BWD_LATENCY),
            "sdpa_mib": pick(r, seq_variant(T, SDPA), peak, "max"),
            "out_max_abs_diff": pick(r, d, OUT_MAX_ABS_DIFF, "value"),
            "grad_max_abs_diff": pick(r, d, GRAD_MAX_ABS_DIFF, "value"),
            "sdpa_backend_ran": backends(r, T),
            "sdpa_backends_eligible": backends(r, T, BACKEND_ELIGIBLE),
        })
    return make_table(records, ["T", "manual_ms", "manual_mib", "sdpa_ms", "sdpa_mib",
                                "out_max_abs_diff", "grad_max_abs_diff", "sdpa_backend_ran",
                                "sdpa_backends_eligible"])


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Attention against T on log axes: forward + backward ms and peak MiB, manual vs SDPA.

    A T where an implementation ran out of memory is marked with its status at
    that T on both panels instead of a point.
    """
    # plotting is imported here, not above: timing jobs import this module
    from perflab.kit.figures import new_figure

    r = rows_of(ENTRY.eid, rows)
    title_rows = r[r.variant.str.endswith("/" + MANUAL)]
    fig, axes = new_figure(ENTRY, title_rows if not title_rows.empty else r, ncols=2,
                           width=12.0)
    seqs = prefixed_numbers(r, SEQ_PREFIX)
    peak = peak_metric(r)
    panels = [(axes[0], FWD_BWD_LATENCY, "median", "forward + backward ms (median)"),
              (axes[1], peak, "max", "peak allocated MiB" if peak == "peak_allocated"
               else "peak RSS MiB (fresh process per point)")]
    notes: list[str] = []
    for ax, metric, statistic, ylabel in panels:
        reasons, drawn = _draw_series(ax, r, seqs, metric, statistic)
        if ax is axes[0]:
            notes += reasons
        _seq_axes(ax, seqs, ylabel, drawn)
    _titles_and_notes(fig, axes, r, seqs, notes)
    return fig


def _draw_series(ax: "Axes", r: pd.DataFrame, seqs: list[int], metric: str,
                 statistic: str) -> tuple[list[str], list[float]]:
    """Each implementation's points of ``metric`` against T, its status where it has none;
    returns (a note for each missing point with a reason, the values drawn)."""
    import seaborn as sns

    notes, drawn = [], []
    for i, impl in enumerate(IMPLS):
        xs, ys = [], []
        for T in seqs:
            cell = pick(r, seq_variant(T, impl), metric, statistic)
            if isinstance(cell, Missing):
                ax.text(T, 0.97 - 0.08 * i, f"{impl}: {cell.status}",
                        transform=ax.get_xaxis_transform(), rotation=90, ha="center",
                        va="top", fontsize=8, color=sns.color_palette()[i])
                if cell.reason:
                    notes.append(textwrap.shorten(f"T={T} {impl}: {cell}", 200))
                continue
            xs.append(T)
            ys.append(float(cell))
        drawn += ys
        if xs:
            label = impl if impl == MANUAL else "SDPA"
            ax.plot(xs, ys, marker="os"[i], label=label, color=sns.color_palette()[i])
    return notes, drawn


def _seq_axes(ax: "Axes", seqs: list[int], ylabel: str, drawn: list[float]) -> None:
    """Log2 T against a log y axis, with minor labels when ``drawn`` spans under a decade."""
    from matplotlib.ticker import FuncFormatter

    from perflab.kit.figures import log2_x

    if seqs:
        log2_x(ax, seqs)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        # within one decade no major tick shows: label the minor ones instead
        narrow = bool(drawn) and max(drawn) < 10 * min(drawn)
        ax.yaxis.set_minor_formatter(FuncFormatter(
            (lambda v, _: f"{v:g}") if narrow else (lambda v, _: "")))
    ax.set_xlabel("sequence length T (log2)")
    ax.set_ylabel(ylabel)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", fontsize=8)


def _titles_and_notes(fig: "Figure", axes, r: pd.DataFrame, seqs: list[int],
                      notes: list[str]) -> None:
    """The backends that ran over the time panel, the cap over the memory panel, the notes."""
    if seqs:
        ran = sorted({backends(r, T) for T in seqs})
        axes[0].set_title("SDPA backend that ran: " + "; ".join(ran), fontsize=9)
    budget = pick(r, BUDGET_VARIANT, MEMORY_BUDGET, "value")
    if not isinstance(budget, Missing):
        axes[1].set_title(f"allocator capped at {float(budget) / 1024:.1f} GiB", fontsize=9)
    if notes:
        fig.supxlabel("\n".join(textwrap.fill(n, 170) for n in dict.fromkeys(notes)),
                      x=0.01, ha="left", fontsize=8, color="#a35f00")


# ------------------------------------------------------------------ claims

#: C39: the manual peak must grow at least this much per doubling of T (~T^2 would be 4)
MANUAL_GROWTH_PER_DOUBLING = 3


def _peaks_by_seq(ev, impl: str) -> dict[int, float]:
    """{T: peak MiB} of one implementation: allocator peaks, or on a CPU fresh-process RSS."""
    def of(metric):
        return {v: x for v, x in ev.variants(ENTRY.eid, SEQ_PREFIX, metric, "max").items()
                if v.endswith(f"/{impl}")}

    got = of("peak_allocated") or of("peak_rss")
    return {int(v.split("/")[0].removeprefix(SEQ_PREFIX)): x for v, x in got.items()}


def _first_oom(ev, impl: str) -> int | None:
    """The smallest T at which ``impl``'s peak row is an OOM (None: it never ran out)."""
    r = ev.of(ENTRY.eid)
    sel = r[(r.status == "oom") & (r.metric == "peak_allocated")
            & r.variant.str.startswith(SEQ_PREFIX) & r.variant.str.endswith(f"/{impl}")]
    return min((int(v.split("/")[0].removeprefix(SEQ_PREFIX)) for v in sel.variant),
               default=None)


@claim("C39", "E18", "manual attention memory grows ~T^2 and OOMs first; SDPA allocates far less",
       chapter="manual 576 -> 2160 MiB (T 1024 -> 2048), OOM at 4096; SDPA 354 MiB at 4096",
       tolerance=f"manual peak ratio per doubling >= {MANUAL_GROWTH_PER_DOUBLING}; SDPA peak "
       "< manual at the largest shared T; under the allocator cap (or where memory ran out), "
       "manual runs out at a smaller T than SDPA (or SDPA never does)", exact=BYTES_EXACT)
def _attention_memory(ev):
    manual, sdpa = _peaks_by_seq(ev, MANUAL), _peaks_by_seq(ev, SDPA)
    if len(manual) < 2:
        raise Absent("fewer than two manual sequence lengths"
                     + ("" if ev.has(ENTRY.eid) else f" ({ENTRY.eid} not run)"))
    (t1, m1), (t2, m2) = sorted(manual.items())[-2:]
    per_doubling = (m2 / m1) ** (1 / math.log2(t2 / t1))
    shared = max((t for t in manual if t in sdpa), default=None)
    parts = [
        Part(per_doubling >= MANUAL_GROWTH_PER_DOUBLING,
             f"manual x{per_doubling:.2f} per doubling (T {t1} -> {t2})", name="manual ~T^2",
             mechanism="the manual peak is not dominated by the T x T score matrix at these sizes"),
        Part(shared is not None and sdpa[shared] < manual[shared],
             f"SDPA {sdpa[shared]:.1f} vs manual {manual[shared]:.1f} MiB at T={shared}"
             if shared else "no T measured for both", name="SDPA allocates less",
             mechanism="SDPA's kernel keeps a T x T buffer here"),
    ]
    om, osd = _first_oom(ev, MANUAL), _first_oom(ev, SDPA)
    # the OOM order is tested under the allocator cap, or where the device itself ran out
    if ev.maybe(ENTRY.eid, BUDGET_VARIANT, MEMORY_BUDGET, "value") is not None or om or osd:
        # "SDPA never runs out" needs SDPA measured where manual ran out: no OOM row is
        # not a peak row (an SDPA length that was never run says nothing)
        fits = [t for t in sdpa if om is not None and t >= om]
        if om is not None and osd is None and not fits:
            parts.append(Part(None, f"under the cap manual runs out at T={om}; SDPA has no "
                              f"peak measured at T >= {om}", (False, "not resolved: SDPA was "
                              "not measured where manual ran out"), name="manual OOMs first"))
        else:
            parts.append(Part(om is not None and (osd is None or om < osd),
                              f"under the cap manual runs out at T={om}, SDPA "
                              + (f"at T={osd}" if osd else f"fits at T={max(fits)}"
                                 if fits else "never"), name="manual OOMs first",
                              mechanism="manual attention fit the cap at every T measured"
                              if om is None else "SDPA ran out no later than manual"))
    return judge_parts(*parts)
