"""E19, torch.compile as an intervention: is the same torch.compile call neutral on the
GEMM-bound MLP and a large speedup on the pointwise chain, beyond the noise of an interleaved
eager/compiled pair, with the outputs unchanged? Measured by scripts/e19_compile_ab.py.

The eager/compiled pair's names are defined here, and perflab.instruments.compiling writes them for
E19 and E20 alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from perflab.instruments import ab
from perflab.instruments.sequential import NO_CHANGE
from perflab.kit.claims import Decision, Evidence, Part, ab_against, claim, judge_parts
from perflab.kit.experiment import Experiment
from perflab.kit.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ENTRY = Experiment(
    "E19",
    "compile_ab",
    "torch.compile on a GEMM-bound MLP vs a pointwise chain: interleaved A/B",
    "interventions",
    workloads=("controlled", "pointwise"),
    cpu_behaviour="same (Inductor's C++ backend); peak-memory rows unsupported",
    report_section="18 · torch.compile",
)

#: its parameters (config key ``experiments.E19``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
# 24 block pairs, not 12 (~1 s more on the H200, whose MLP forward is ~1 ms): C40's MLP
# read 1.11x [-17, -7.4%] over 12 pairs, then 1.39x, and an A/B of 24 pairs is held to
# C00's floor for 24, not 12
blocks: {type: integer, minimum: 2, default: 24}
inner: {type: integer, minimum: 1, default: 30}
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'blocks': 2, 'inner': 3}}

# ------------------------------------------------------------------ the names its script writes

#: the two workloads: the controlled one (the chapter's GEMM-bound MLP) and the pointwise chain
MLP, POINTWISE = "mlp", "pointwise"
#: each workload's pair is <workload>/eager and <workload>/compiled, compared under
#: <workload>/compiled_vs_eager (compare_with_eager)
EAGER, COMPILED = "eager", "compiled"
COMPARISON = f"{COMPILED}_vs_{EAGER}"

#: the steady state of each side (the pair's block medians beside it), the compiled side's
#: first call (the compilation), and under the comparison the largest output difference and
#: eager median / compiled median
FORWARD_LATENCY, FIRST_CALL = "forward_latency", "first_call"
MAX_ABS_DIFF, SPEEDUP = "max_abs_diff", "speedup"


def side_variant(prefix: str, side: str) -> str:
    """``<prefix>/eager`` or ``<prefix>/compiled`` (prefix: E19's workload, E20's cache phase)."""
    return f"{prefix}/{side}"


def comparison_variant(prefix: str) -> str:
    return f"{prefix}/{COMPARISON}"


def difference_variant(prefix: str) -> str:
    """The A/B difference of the pair, as Context.ab names it (compiled minus eager)."""
    return f"{side_variant(prefix, COMPILED)}_minus_{side_variant(prefix, EAGER)}"


# ------------------------------------------------------------------ accessors


def workloads_run(rows: pd.DataFrame) -> list[str]:
    """The workloads E19's rows have an eager side of, in the order they were measured."""
    r = rows_of(ENTRY.eid, rows)
    return list(dict.fromkeys(v.split("/")[0] for v in r.variant if v.endswith("/" + EAGER)))


def correctness(rows: pd.DataFrame) -> list[tuple[str, float, str]]:
    """The ledger's E19 lines: each workload's compiled-vs-eager output difference, as
    (ledger field, value, source row)."""
    r = rows_of(ENTRY.eid, rows)
    lines = []
    for v in dict.fromkeys(r.variant):
        if v.endswith("/" + COMPARISON):
            diff = pick(r, v, MAX_ABS_DIFF, "value")
            if not isinstance(diff, Missing):
                lines.append((f"{COMPILED}_{v.split('/')[0]}_{MAX_ABS_DIFF}", float(diff),
                              f"{ENTRY.eid} {v} {MAX_ABS_DIFF}"))
    return lines


# ------------------------------------------------------------------ table and figure


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Compile A/B: one row per workload, eager vs compiled steady state, correctness, peaks."""
    r = rows_of(ENTRY.eid, frame)
    records = []
    for name in workloads_run(r):
        e, c = side_variant(name, EAGER), side_variant(name, COMPILED)
        d = comparison_variant(name)
        records.append({
            "workload": name,
            "model": r[r.variant == e].iloc[0]["model"] if (r.variant == e).any() else "",
            "eager_median_ms": pick(r, e, FORWARD_LATENCY),
            "eager_block_min_ms": pick(r, e, ab.BLOCK_MEDIAN, "min"),
            "eager_block_max_ms": pick(r, e, ab.BLOCK_MEDIAN, "max"),
            "compiled_median_ms": pick(r, c, FORWARD_LATENCY),
            "compiled_block_min_ms": pick(r, c, ab.BLOCK_MEDIAN, "min"),
            "compiled_block_max_ms": pick(r, c, ab.BLOCK_MEDIAN, "max"),
            "speedup_x": pick(r, d, SPEEDUP),
            "resolved": pick(r, difference_variant(name), ab.RESOLVED, "value"),
            "compiled_first_call_ms": pick(r, c, FIRST_CALL, "value"),
            "max_abs_diff": pick(r, d, MAX_ABS_DIFF, "value"),
            "eager_peak_allocated_mib": pick(r, e, "peak_allocated", "max"),
            "compiled_peak_allocated_mib": pick(r, c, "peak_allocated", "max"),
        })
    return make_table(records)


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Compile A/B: eager vs compiled block medians, one panel per workload."""
    # plotting is imported here, not above: timing jobs import this module
    from perflab.kit.figures import add_note, new_figure, num, pair_blocks

    r = rows_of(ENTRY.eid, rows)
    names = workloads_run(r)
    fig, axes = new_figure(ENTRY, r, ncols=max(len(names), 1),
                           width=6.0 * max(len(names), 1))
    for ax, name in zip(axes, names):
        pair_blocks(ax, samples, ENTRY.eid, side_variant(name, EAGER),
                    side_variant(name, COMPILED), (EAGER, COMPILED))
        ax.set_ylabel("block median, ms per forward")
        speed = pick(r, comparison_variant(name), SPEEDUP)
        diff = pick(r, comparison_variant(name), MAX_ABS_DIFF, "value")
        res = pick(r, difference_variant(name), ab.RESOLVED, "value")
        verdict = "resolved" if num(res) == 1.0 else "inside the noise"
        ok = not isinstance(speed, Missing) and not isinstance(diff, Missing)
        ax.set_title(f"{name}: compiled {speed:.2f}x ({verdict}), max |diff| {diff:.1e}" if ok
                     else f"{name}: {speed}", fontsize=9)
    if not names:
        add_note(axes[0], ["no eager/compiled pair in the rows"], loc="upper left")
    return fig


# ------------------------------------------------------------------ claims

#: C40: the MLP is neutral when its speedup is within this band (or inside the noise)
NEUTRAL_SPEEDUP = (0.9, 1.1)
#: C40: the pointwise chain must speed up by more than this
POINTWISE_SPEEDUP_ABOVE = 2


def _time_rel_pct(speedup: float) -> float:
    """The compiled side's time as a change from eager's (%), for a speedup (eager / compiled)."""
    return 100 * (1 / speedup - 1)


#: the thresholds (compiled time as a change from eager's, %) C40 sets each pair against:
#: its adaptive A/B samples until each is decided (Context.interleaved's ``stop_at``)
STOP_AT = {MLP: tuple(_time_rel_pct(x) for x in NEUTRAL_SPEEDUP),
           POINTWISE: (_time_rel_pct(POINTWISE_SPEEDUP_ABOVE),)}


def _beyond(ev: Evidence, prefix: str, threshold_pct: float) -> Decision:
    """Is the pair's effect decided against a threshold of :data:`STOP_AT` (the time change
    a speedup would be)?"""
    return ab_against(ev, ENTRY.eid, difference_variant(prefix), threshold_pct)


@claim("C40", "E19", "torch.compile is neutral on the GEMM-bound MLP and a large speedup on the pointwise chain",
       chapter="0.988x (inside the block spread) vs 12.399x",
       tolerance=f"MLP speedup within {NEUTRAL_SPEEDUP[0]}-{NEUTRAL_SPEEDUP[1]}x and pointwise "
       f"speedup > {POINTWISE_SPEEDUP_ABOVE}x, each decided by the pair's interval and the "
       "A/A floor (C00)")
def _compile_split(ev):
    eid = ENTRY.eid
    mlp = ev.value(eid, comparison_variant(MLP), SPEEDUP)
    pointwise = ev.value(eid, comparison_variant(POINTWISE), SPEEDUP)
    # neutral is a band: decided when the pair's effect is clear of both its edges (an
    # effect inside the noise is not evidence of neutrality)
    edges = sorted((_beyond(ev, MLP, t) for t in STOP_AT[MLP]), key=lambda d: not d[0])
    band = (all(ok for ok, _ in edges), edges[-1][1])
    lo, hi = NEUTRAL_SPEEDUP
    return judge_parts(
        Part(lo <= mlp <= hi, f"MLP {mlp:.3f}x", band, name="neutral on the MLP",
             mechanism="compile changes the GEMM-bound MLP beyond noise"),
        Part(pointwise > POINTWISE_SPEEDUP_ABOVE, f"pointwise {pointwise:.2f}x",
             _beyond(ev, POINTWISE, *STOP_AT[POINTWISE]),
             name="a large speedup on the pointwise chain",
             mechanism="Inductor's fusion does not pay on the pointwise chain here"))


# ------------------------------------------------------------------ the recipe E19-E20 share


def compare_with_eager(ctx, prefix: str, eager: Callable[[], Any],
                       compiled: Callable[[], Any], batch_size: int, *,
                       stop_at: Sequence[float] = NO_CHANGE, **kw: Any) -> dict[str, float]:
    """Correctness, then the interleaved eager/compiled pair, then the speedup, as rows.

    ``stop_at``: the thresholds (% change of compiled from eager) a claim sets the pair
    against (:data:`STOP_AT` for E19's), which an adaptive pair samples until decided.

    Variants ``<prefix>/eager``, ``<prefix>/compiled`` (its rows and samples
    marked compiled) and ``<prefix>/compiled_vs_eager`` (max_abs_diff, speedup): the
    names of :mod:`perflab.experiments.e19_compile_ab`.
    Returns :meth:`Context.ab`'s medians: ``a`` eager, ``b`` compiled (ms).
    """
    from perflab.instruments import compiling, timing

    p, t = ctx.params, ctx.timing
    v = comparison_variant(prefix)
    eager_v = side_variant(prefix, EAGER)
    compiled_v = side_variant(prefix, COMPILED)
    ctx.row(variant=v, metric=MAX_ABS_DIFF, value=compiling.max_abs_diff(compiled(), eager()),
            unit="abs", n=1, execution="compiled",
            window="one forward of each on the same input and state",
            sync_boundary="outputs compared on the host", **kw)
    res = ctx.interleaved(eager, compiled, blocks=p["blocks"], inner=p["inner"],
                          warmup=t["warmup"], variant=f"{compiled_v}_minus_{eager_v}",
                          stop_at=stop_at, **kw)
    window = timing.ab_window(res, t["warmup"])
    n_blocks = len(res.a_blocks)
    d = ctx.ab(res, a=eager_v, b=compiled_v, batch_size=batch_size,
               window=window, metric=FORWARD_LATENCY, **kw)
    compiling.mark_execution(ctx, compiled_v, "compiled")
    ctx.row(variant=v, metric=SPEEDUP, value=d["a"] / d["b"], unit="x", statistic="median",
            n=n_blocks, execution="compiled", window=f"eager median / compiled median "
            f"({window})", sync_boundary="synchronized at both ends of each call; blocks "
            "interleaved AB/BA", **kw)
    return {**d, "window": window}
