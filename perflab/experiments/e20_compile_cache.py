"""E20, compile cost: how much does a warm Inductor cache cut the first compiled call of a
fresh process, with the steady state unchanged, and after how many calls does compiling pay
for itself, cold and warm? Measured by scripts/e20_compile_cache.py (two jobs: cold, then
warm).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from perflab.experiments.e19_compile_ab import (
    COMPILED,
    EAGER,
    FIRST_CALL,
    FORWARD_LATENCY,
    MAX_ABS_DIFF,
    comparison_variant,
    side_variant,
)
from perflab.kit.claims import (
    Decision,
    Part,
    ab_against,
    against_process_floor,
    claim,
    judge_parts,
    pct,
    process_floor,
)
from perflab.kit.experiment import Experiment
from perflab.kit.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

ENTRY = Experiment(
    "E20",
    "compile_cache",
    "Compile cost: a cold and a warm Inductor cache, and the break-even",
    "interventions",
    workloads=("pointwise",),
    report_section="18 · torch.compile",
    own_rules=True,
)

#: its parameters (config key ``experiments.E20``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
# 36 block pairs, not 12 (under 1 s more on the H200, whose pointwise step is 0.14 ms;
# ~13 s on the CPU): C41's cache-loaded vs fresh code read -4.7% [-17, -3.4] over 12 pairs
# of 4 ms blocks, one pair at -22%, then -4.2% [-4.4, -3.6] (the pair at 5217a39)
blocks: {type: integer, minimum: 2, default: 36}
inner: {type: integer, minimum: 1, default: 30}
"""

#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'blocks': 2, 'inner': 3}}

# ------------------------------------------------------------------ the names its script writes

#: E20's two jobs: ``cold`` wipes the shared cache directory and compiles into it; ``warm``,
#: a later fresh process, compiles the same model reusing it. Each phase's rows are E19's
#: eager/compiled pair under the phase's name (cold/eager, cold/compiled, ...)
COLD, WARM = "cold", "warm"
CACHE_PHASES = (COLD, WARM)
WARM_VS_COLD = f"{WARM}_vs_{COLD}"


#: <phase>/compiled: the compiler's own counters during the first compiled call,
#: torch._dynamo.utils.counters' "section.key" as "section/key"
COMPILER_COUNTERS = ("inductor.fxgraph_cache_hit", "inductor.fxgraph_cache_miss",
                     "aot_autograd.autograd_cache_hit", "aot_autograd.autograd_cache_miss",
                     "stats.unique_graphs")
FXGRAPH_CACHE_HIT, FXGRAPH_CACHE_MISS = "inductor/fxgraph_cache_hit", "inductor/fxgraph_cache_miss"
#: <phase>/cache: files in the shared cache before and after the first compiled call
CACHE_FILES_BEFORE, CACHE_FILES_AFTER = "cache_files_before", "cache_files_after"
#: <phase>/compiled_vs_eager: calls after which compiling has paid for itself
BREAK_EVEN_CALLS = "break_even_calls"
#: warm_vs_cold: the first compiled call, warm / cold and cold - warm
FIRST_CALL_RATIO, FIRST_CALL_SAVED = "first_call_ratio", "first_call_saved"

#: the cold job also compiles a copy of the model again, which Inductor serves from the cache
#: the cold compile just wrote: cold/fresh_artifact (the cold compile's own code) and
#: cold/cached_artifact (the code a cache hit yields), timed as an interleaved pair in that
#: one process, so C41 compares the two steady states like with like
FRESH_ARTIFACT, CACHED_ARTIFACT = "fresh_artifact", "cached_artifact"
FRESH_V, CACHED_V = f"{COLD}/{FRESH_ARTIFACT}", f"{COLD}/{CACHED_ARTIFACT}"
#: the pair's difference variant, as Context.ab names it (B minus A)
ARTIFACT_DIFF = f"{CACHED_V}_minus_{FRESH_V}"
#: the table's row of that pair
CACHE_LOADED_ROW = "cold: cache-loaded vs fresh code"


def counter_metric(key: str) -> str:
    """The metric of a compiler counter ("inductor.fxgraph_cache_hit" -> "inductor/...")."""
    return key.replace(".", "/")


def cache_variant(phase: str) -> str:
    return f"{phase}/cache"


# ------------------------------------------------------------------ the two jobs' files
# (the workflow reads them at parse time: nothing here imports torch)


def e20_dir(result_dir: str | Path) -> Path:
    return Path(result_dir) / "e20_compile_cache"


def e20_cache_dir(result_dir: str | Path) -> str:
    """The Inductor cache the cold and warm jobs share (its own, under the results)."""
    return str(e20_dir(result_dir) / "inductor_cache")


def e20_cold_outputs(result_dir: str | Path) -> dict[str, str]:
    """csv, samples and provenance of the cold job (the warm job writes E20's own)."""
    d = e20_dir(result_dir)
    return {"csv": str(d / "cold.csv"), "samples": str(d / "cold_samples.csv"),
            "provenance": str(d / "cold.json")}


def e20_contract(contract: dict, phase: str, result_dir: str | Path) -> dict:
    """E20's contract for one phase: the phase, the shared cache, where cold's rows are.

    ``inductor_cache_dir`` is the parameter the harness honours instead of
    giving the job a private cache.
    """
    if phase not in CACHE_PHASES:
        raise ValueError(f"phase must be one of {CACHE_PHASES}, got {phase!r}")
    c = copy.deepcopy(dict(contract))
    c["params"] = {**c.get("params", {}), "phase": phase,
                   "inductor_cache_dir": e20_cache_dir(result_dir)}
    if phase == WARM:
        c["params"]["cold_outputs"] = e20_cold_outputs(result_dir)
    return c


# ------------------------------------------------------------------ table and figure


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Cold vs warm Inductor cache: first compiled call, steady state, break-even."""
    r = rows_of(ENTRY.eid, frame)
    records = []
    for phase in CACHE_PHASES:
        c, e = side_variant(phase, COMPILED), side_variant(phase, EAGER)
        d = comparison_variant(phase)
        records.append({
            "cache": phase,
            "first_compiled_call_s": pick(r, c, FIRST_CALL, "value"),
            "fxgraph_cache_hits": pick(r, c, FXGRAPH_CACHE_HIT, "value"),
            "fxgraph_cache_misses": pick(r, c, FXGRAPH_CACHE_MISS, "value"),
            "eager_steady_ms": pick(r, e, FORWARD_LATENCY),
            "compiled_steady_ms": pick(r, c, FORWARD_LATENCY),
            "break_even_calls": pick(r, d, BREAK_EVEN_CALLS, "value"),
            "max_abs_diff": pick(r, d, MAX_ABS_DIFF, "value"),
            "cache_files_before": pick(r, cache_variant(phase), CACHE_FILES_BEFORE, "value"),
        })
    records.append({"cache": CACHE_LOADED_ROW,
                    "fxgraph_cache_hits": pick(r, CACHED_V, FXGRAPH_CACHE_HIT, "value"),
                    "fresh_code_steady_ms": pick(r, FRESH_V, FORWARD_LATENCY),
                    "cache_loaded_steady_ms": pick(r, CACHED_V, FORWARD_LATENCY),
                    "max_abs_diff": pick(r, ARTIFACT_DIFF, MAX_ABS_DIFF, "value")})
    records.append({"cache": "warm vs cold",
                    "first_call_ratio": pick(r, WARM_VS_COLD, FIRST_CALL_RATIO, "value"),
                    "first_call_saved_s": pick(r, WARM_VS_COLD, FIRST_CALL_SAVED, "value")})
    return make_table(records)


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """Compile break-even: cumulative time of N calls, eager vs compiled cold and warm."""
    # plotting is imported here, not above: timing jobs import this module
    from perflab.kit.figures import new_figure

    r = rows_of(ENTRY.eid, rows)
    fig, (ax, ax2) = new_figure(ENTRY, r, ncols=2, width=12.0)
    curves, notes = _curves(r)
    _break_even_panel(ax, r, curves, notes)
    if curves:
        _first_call_panel(ax2, r, curves)
    return fig


def _curves(r: pd.DataFrame) -> tuple[dict[str, tuple], list[str]]:
    """{phase: (first call s, compiled steady ms, break-even calls or None)}, and a note for
    each phase that cannot be drawn or never breaks even."""
    from perflab.kit.figures import num

    notes, curves = [], {}
    for phase in CACHE_PHASES:
        c = side_variant(phase, COMPILED)
        first = num(pick(r, c, FIRST_CALL, "value"))
        steady = num(pick(r, c, FORWARD_LATENCY))
        if first is None or steady is None:
            notes.append(f"{phase}: {pick(r, c, FIRST_CALL, 'value')}")
            continue
        n = pick(r, comparison_variant(phase), BREAK_EVEN_CALLS, "value")
        if isinstance(n, Missing):
            notes.append(f"{phase}: never breaks even ({n.reason})")
        curves[phase] = (first, steady, num(n))
    return curves, notes


def _break_even_panel(ax: "Axes", r: pd.DataFrame, curves: dict[str, tuple],
                      notes: list[str]) -> None:
    """Total time of N calls on log axes: each compiled curve, its break-even, and eager."""
    from perflab.kit.figures import add_note, num

    eager = [num(pick(r, side_variant(ph, EAGER), FORWARD_LATENCY)) for ph in CACHE_PHASES]
    eager = [e for e in eager if e is not None]
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


def _first_call_panel(ax: "Axes", r: pd.DataFrame, curves: dict[str, tuple]) -> None:
    """The first compiled call of each phase's fresh process, and warm / cold."""
    names = list(curves)
    vals = [curves[p][0] for p in names]
    ax.bar(names, vals, color=["C1", "C2"][:len(names)])
    for x, v in enumerate(vals):
        ax.text(x, v, f"{v:.2f} s", ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("first compiled call of a fresh process, s")
    ratio = pick(r, WARM_VS_COLD, FIRST_CALL_RATIO, "value")
    if not isinstance(ratio, Missing):
        ax.set_title(f"warm / cold first call = {ratio:.2f}", fontsize=9)


# ------------------------------------------------------------------ claims

#: C41: the warm first call must be below this share of the cold one
WARM_FIRST_CALL_BELOW = 0.5
#: C41: the cold and warm steady states must agree within this share
STEADY_AGREES_WITHIN = 0.1
#: the thresholds (% of the fresh code's time) C41 sets the cache-loaded pair against: its
#: adaptive A/B samples until both are decided (Context.interleaved's ``stop_at``)
STEADY_STOP_AT = (-100 * STEADY_AGREES_WITHIN, 100 * STEADY_AGREES_WITHIN)


@claim("C41", "E20", "a warm Inductor cache cuts the first compiled call; steady state is the same",
       chapter="10.945 s cold vs 2.542 s warm; steady 0.892 vs 0.885 ms",
       tolerance=f"warm first call < {WARM_FIRST_CALL_BELOW:.0%} of cold; steady states within "
       f"{STEADY_AGREES_WITHIN:.0%}: the code a cache hit loads against the cold compile's own, "
       "interleaved in the cold job (the A/B's 95% interval and C00's A/A floor); a run without "
       "that pair: the cold and warm processes' medians against the run's between-process "
       "floor, when E20's own eager A/A across them lies inside it")
def _compile_cache(ev):
    eid = ENTRY.eid
    cold = ev.value(eid, side_variant(COLD, COMPILED), FIRST_CALL, "value")
    warm = ev.value(eid, side_variant(WARM, COMPILED), FIRST_CALL, "value")
    # the first calls are one compile each, in two processes: a 2x cut is far beyond how
    # much one compile's time varies, so that part is read as measured
    first = Part(warm < WARM_FIRST_CALL_BELOW * cold, f"first call {cold:.2f} -> {warm:.2f} s",
                 name="the warm cache cuts the first call",
                 mechanism="the warm cache did not shorten the first call much")
    paired = ev.has(eid) and (ev.of(eid).variant == CACHED_V).any()
    return judge_parts(first, _steady_in_one_process(ev) if paired
                       else _steady_across_processes(ev))


def _steady_in_one_process(ev) -> Part:
    """Steady state: the cache-loaded code against the cold compile's own, one process."""
    eid = ENTRY.eid
    ev.value(eid, CACHED_V, FIRST_CALL, "value")  # the second compile failed: an ERROR
    gap = ev.value(eid, ARTIFACT_DIFF, "ab_effect_rel", "value")
    fresh = ev.value(eid, FRESH_V, FORWARD_LATENCY)
    loaded = ev.value(eid, CACHED_V, FORWARD_LATENCY)
    hits = ev.value(eid, CACHED_V, FXGRAPH_CACHE_HIT, "value")
    decided = ab_against(ev, eid, ARTIFACT_DIFF, 100 * STEADY_AGREES_WITHIN, agree=True)
    if not hits:
        # a second compile that Inductor did not serve from its cache compares the fresh code
        # with itself: it says nothing of what a warm cache loads
        decided = (False, "not resolved: the second compile was not an Inductor cache hit "
                          f"(fxgraph_cache_hit {hits})")
    return Part(abs(gap) <= 100 * STEADY_AGREES_WITHIN,
                f"steady, interleaved in the cold job: fresh {fresh:.3f} vs cache-loaded "
                f"{loaded:.3f} ms ({pct(gap)})", decided, name="steady state is the same",
                mechanism="the code a cache hit loads runs at another speed than the fresh "
                          "compile's")


def _steady_across_processes(ev) -> Part:
    """Steady state: the cold and warm processes' medians (a run without the one-process pair)."""
    eid = ENTRY.eid
    steady_cold = ev.value(eid, side_variant(COLD, COMPILED), FORWARD_LATENCY)
    steady_warm = ev.value(eid, side_variant(WARM, COMPILED), FORWARD_LATENCY)
    gap = 100 * (steady_warm / steady_cold - 1)
    return Part(abs(gap) <= 100 * STEADY_AGREES_WITHIN,
                f"steady {steady_cold:.3f} vs {steady_warm:.3f} ms ({pct(gap)})",
                _steady_decided(ev, gap), name="steady state is the same",
                mechanism="steady state differs between cold and warm")


def _steady_decided(ev, gap_pct: float) -> Decision:
    """The steady-state gap against the run's between-process floor, which is measured on
    another step (the controlled training step): it is used only when E20's own A/A across
    its two processes (eager, the same code in both) lies inside it."""
    decided, how = against_process_floor(ev, gap_pct, 100 * STEADY_AGREES_WITHIN, agree=True)
    floor, _ = process_floor(ev)
    eager = [ev.maybe(ENTRY.eid, side_variant(p, EAGER), FORWARD_LATENCY) for p in CACHE_PHASES]
    if floor is None:
        return decided, how
    if None in eager:
        return False, ("not resolved: no eager steady state in both processes to check that "
                       "the between-process floor carries over to E20's step")
    own = 100 * (eager[1] / eager[0] - 1)
    if abs(own) > floor:
        return False, (f"not resolved: E20's own A/A (eager in the cold and the warm process) "
                       f"is {pct(own)}, beyond the between-process floor {floor:.2g}%: that "
                       "floor does not carry over to this step")
    return decided, f"{how}; E20's eager A/A {pct(own)} inside it"
