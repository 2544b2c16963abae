"""E12, allocated, reserved, max reserved and NVML: what each of the four counters says at
four states around one large tensor (allocated, deleted, the cache emptied), and what ``del``
and ``empty_cache()`` each move. Measured by scripts/e12_alloc_reserved_smi.py.

A ``big_mib`` larger than the device (the host's MemTotal on a CPU, NVML's largest GPU) is
refused by the configuration; one that still does not fit when the job allocates it leaves
the steady state's rows and makes every later reading an ``oom`` row naming the size, which
C29 reads as undecided, not as a finding.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from perflab.core import env
from perflab.core.rows import Unmeasured
from perflab.kit.claims import BYTES_EXACT, INCONCLUSIVE, Part, Verdict, claim, judge_parts
from perflab.kit.experiment import ConfigProblem, ConfigView, Experiment
from perflab.kit.tables import Missing, make_table, pick, rows_of

if TYPE_CHECKING:
    from matplotlib.figure import Figure

ENTRY = Experiment(
    "E12",
    "alloc_reserved_smi",
    "Allocated, reserved, max reserved and NVML: four counters, four stories",
    "memory",
    cpu_behaviour="allocator and NVML counters are unsupported rows; the process RSS "
    "around the same large tensor is measured instead",
    report_section="11 · Allocated, reserved and the third number",
)

#: its parameters (config key ``experiments.E12``): a JSON-schema fragment whose defaults
#: are the chapter's values; perflab.pipeline.config assembles the run's schema from these
SCHEMA = """\
big_mib:
  description: size of the large transient tensor
  type: integer
  minimum: 1
  default: 400
"""



def check_config(cfg: dict, view: ConfigView) -> None:
    """A large tensor bigger than the whole device can never be allocated: refused here,
    before any job, where the size can be read without initialising CUDA (the host's
    MemTotal on a CPU; NVML's largest GPU on CUDA). A size under that bound that still does
    not fit (other tensors, other processes) ends as the job's ``oom`` rows."""
    if ENTRY.eid not in view.selected:
        return
    big = view.contract(ENTRY.eid)["params"]["big_mib"]
    if view.device.startswith("cuda"):
        total = env.nvml_largest_device_mib() if view.check_device else None
        where = "the largest GPU here holds"
    else:
        total, where = env.host_memory_mib("MemTotal"), "this host has (MemTotal)"
    if total is not None and big > total:
        raise ConfigProblem("experiments.E12.big_mib", f"{big} MiB is more than {where} "
                            f"{total:.0f} MiB: the tensor could never be allocated")


#: its sizes at the test contract (`scale: tiny`, config/test.yaml): the smallest that
#: still run every code path
SCALES = {"tiny": {'big_mib': 16}}

# ------------------------------------------------------------------ the names its script writes

#: the four states, in order: steady, after allocating the tensor, after del, after empty_cache
STEADY, AFTER_ALLOC, AFTER_DEL, AFTER_EMPTY_CACHE = (
    "steady", "after_alloc", "after_del", "after_empty_cache")
STATES = (STEADY, AFTER_ALLOC, AFTER_DEL, AFTER_EMPTY_CACHE)
#: what each call moved: (variant, state before, state after)
DELTAS = (("delta/del", AFTER_ALLOC, AFTER_DEL),
          ("delta/empty_cache", AFTER_DEL, AFTER_EMPTY_CACHE))
#: the counters: the caching allocator's three, NVML's per-process number, the process RSS
ALLOCATED, RESERVED, MAX_RESERVED = "allocated", "reserved", "max_reserved"
NVML_PROCESS, RSS = "nvml_process", "rss"
COUNTERS = (ALLOCATED, RESERVED, MAX_RESERVED, NVML_PROCESS, RSS)


# ------------------------------------------------------------------ table

#: the table's label of each state and delta
LABELS = {STEADY: "steady state", AFTER_ALLOC: "after allocating the large tensor",
          AFTER_DEL: "after del (Python reference gone)",
          AFTER_EMPTY_CACHE: "after torch.cuda.empty_cache()",
          "delta/del": "moved by del", "delta/empty_cache": "moved by empty_cache()"}


def table(frame: pd.DataFrame) -> pd.DataFrame:
    """Four counters at four states, then what del and empty_cache moved."""
    r = rows_of("E12", frame)
    return make_table([{"state": label, **{f"{m}_mib": pick(r, state, m, "value")
                                           for m in COUNTERS}}
                       for state, label in LABELS.items()])


def figure(rows: pd.DataFrame, samples: pd.DataFrame) -> "Figure":
    """The counters at each state: allocated, reserved, max reserved, NVML (CPU: RSS)."""
    # plotting is imported here, not above: timing jobs import this module
    from perflab.kit.figures import add_note, draw_bars, new_figure

    r = rows[rows.experiment == "E12"]
    fig, (ax,) = new_figure(ENTRY, r, width=10.0)
    counters = [m for m in COUNTERS if ((r.metric == m) & (r.status == "ok")).any()]
    series = {}
    for m in counters:
        cells = [pick(r, state, m, "value") for state in STATES]
        series[m] = [c if isinstance(c, Missing) else (c, 0.0, 0.0) for c in cells]
    notes = draw_bars(ax, list(STATES), series) if series else ["no counter measured"]
    for m in (ALLOCATED, NVML_PROCESS):
        cell = pick(r, STEADY, m, "value")
        if m not in counters and isinstance(cell, Missing):
            notes.append(f"{m}: {cell}")
    ax.set_ylabel("MiB: " + ", ".join(counters))
    add_note(ax, notes, loc="upper right")
    return fig


# ------------------------------------------------------------------ claims

#: C29: a counter that moves moves by more than this ...
MOVED_MIN_MIB = 50
#: ... and one that stays moves by less than this
STILL_MAX_MIB = 1


@claim("C29", "E12",
       "del lowers allocated, not reserved; empty_cache lowers reserved, not allocated",
       chapter="874 -> 474 allocated (reserved 1064 kept); empty_cache: reserved 1064 -> 542",
       tolerance=f"each counter moves by > {MOVED_MIN_MIB} MiB or by < {STILL_MAX_MIB} MiB "
                 "as stated", exact=BYTES_EXACT)
def _three_counters(ev):
    try:
        return _counters_move(ev)
    except Unmeasured as exc:
        if exc.status != "oom":
            raise
        # the large tensor was never held, so neither del nor empty_cache had anything to
        # move: no evidence either way (the generic reading of an oom row is a finding)
        return Verdict(INCONCLUSIVE, f"undecided: not measured ({exc.where}): {exc.reason}")


def _counters_move(ev):
    after = (AFTER_ALLOC, AFTER_DEL, AFTER_EMPTY_CACHE)
    a = {v: ev.value("E12", v, ALLOCATED, "value") for v in after}
    r = {v: ev.value("E12", v, RESERVED, "value") for v in after}
    moves = {  # (counter, step): MiB it fell by across that step
        ("allocated", "del"): a[AFTER_ALLOC] - a[AFTER_DEL],
        ("reserved", "del"): r[AFTER_ALLOC] - r[AFTER_DEL],
        ("allocated", "empty_cache"): a[AFTER_DEL] - a[AFTER_EMPTY_CACHE],
        ("reserved", "empty_cache"): r[AFTER_DEL] - r[AFTER_EMPTY_CACHE],
    }
    should_move = {("allocated", "del"), ("reserved", "empty_cache")}
    parts = []
    for (counter, step), fell in moves.items():
        if (counter, step) in should_move:
            ok, want = fell > MOVED_MIN_MIB, f"falls by > {MOVED_MIN_MIB} MiB"
        else:
            ok, want = abs(fell) < STILL_MAX_MIB, f"stays within {STILL_MAX_MIB} MiB"
        parts.append(Part(ok, f"{step}: {counter} {-fell:+.0f} MiB", name=f"{step}: {counter} {want}",
                          mechanism=f"it moved by {-fell:+.0f} MiB: the caching allocator "
                                    "behaved differently on this device"))
    return judge_parts(*parts)
