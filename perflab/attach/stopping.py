"""When ``perflab run`` has seen enough: stop on the verdict's decision, not a fixed time.

The child looks after each hooks-on / hooks-off stretch pair (:func:`look`). The verdict's
deciding numbers on a loop's own evidence are phase shares against perflab.views.diagnose's
thresholds (the input share, input wait + host-to-device, against INPUT_SHARE_PCT; the
optimizer's against OPTIMIZER_SHARE_PCT). Each is an observation per hooks-on stretch (the
stretch's share of its summed step time, as the summary computes the run's), decided by
:mod:`perflab.instruments.sequential` (anytime-valid: looking after every pair does not
inflate the error rate). The memory-growth test needs :data:`MEMORY_STEPS` timed steps for
its slope; recompiles are counted by the summary (nothing to decide). The observers' cost
(hooks on vs off) only corroborates: it gets no time of its own.

The script stops when every test is decided and the minimum (:data:`MIN_PAIRS` pairs,
sequential.MIN_N observations, the instrument windows: the plan puts them first) is met;
else the budget stops it, and the record says which test it lacked and about what budget
would decide it.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import numpy as np

from perflab.instruments import sequential as seq

#: the tests a stretch's shares decide: (name, phases, threshold in %). The thresholds are
#: the engine's (perflab.views.diagnose), read lazily by :func:`tests`
SHARE_TESTS = (("input share", ("input_wait", "host_to_device"), "INPUT_SHARE_PCT"),
               ("optimizer share", ("optimizer",), "OPTIMIZER_SHARE_PCT"))
#: the engine's candidate each share test decides (perflab.views.diagnose's names)
DECIDES = {"input share": "input_pipeline", "optimizer share": "optimizer"}
#: what :func:`look` calls the minimum when it is not met
MINIMUM = "the minimum"
#: fewest hooks-on / hooks-off stretch pairs before a stop (the observers' cost needs 2)
MIN_PAIRS = 3
#: timed steps the memory-growth slope needs before a stop (evidence.summarize needs 6; a
#: leak of a few MiB per step shows in its rising share over a few dozen)
MEMORY_STEPS = 24
#: what the child reserves at the end of a total budget, from the stop to the printed
#: verdict (s): the child's end (the ceilings' measurement, bootstrap.measure_ceilings, and
#: the interpreter's exit) and the parent's verdict. Measured by scripts/bench_run.py on a
#: 2-core CPU shared with other jobs (report/reference/attach/cpu-adaptive/NOTES.md): 4.9 to
#: 9.2 s, median about 6 (4 s, the first guess, left every estimate short)
TAIL_S = 6.0

def tests(cuda: bool = False) -> list[tuple[str, tuple[str, ...], float]]:
    """The share tests that decide the verdict here: on CUDA the input test reads the
    profiled window's trace (R02, a fixed window: perflab.attach.verdict), not the phases,
    so only the optimizer's share is sampled."""
    from perflab.views import diagnose as dg

    return [(name, phases, float(getattr(dg, attr))) for name, phases, attr in SHARE_TESTS
            if not (cuda and name == "input share")]


def started_unix(pid: int) -> float | None:
    """When process ``pid`` started (Unix time, to 10 ms; Linux's /proc), or None. The
    parent sets the command's start once its own imports have run: the interpreter's start
    before them (about a second on a loaded CPU) is the user's wait too."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        ticks = float(stat.rsplit(")", 1)[1].split()[19])  # field 22, starttime
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def prepare() -> None:
    """Import what the looks need (the engine's thresholds; scipy.stats, for the mean
    sequence's t-widening) once, at the first warm-up step's end: seconds on a loaded
    2-core CPU, which the first look would otherwise spend inside the steady state."""
    tests()
    seq.interval([0.0, 1.0], statistic="mean")


def stretches(steps: list[dict]) -> list[tuple[str, list[dict]]]:
    """The timed steps grouped in runs of one kind (``observed`` / ``bare``), in order;
    steps during which Dynamo compiled are left out (counted, never timed)."""
    out: list[tuple[str, list[dict]]] = []
    prev = None
    for r in steps:
        grew = prev is not None and r["dynamo"].get("stats.unique_graphs", 0) > \
            prev["dynamo"].get("stats.unique_graphs", 0)
        prev = r
        if r["kind"] not in ("observed", "bare") or r["wall_ms"] is None or grew:
            continue
        if out and out[-1][0] == r["kind"]:
            out[-1][1].append(r)
        else:
            out.append((r["kind"], [r]))
    return out


def stretch_shares(steps: list[dict], phases: tuple[str, ...]) -> list[float]:
    """Each hooks-on stretch's share (%) of ``phases`` in its summed phase time."""
    out = []
    for kind, rows in stretches(steps):
        rows = [r["phases_ms"] for r in rows if r["phases_ms"]]
        tot = sum(sum(p.values()) for p in rows)
        if kind == "observed" and tot > 0:
            out.append(100 * sum(p.get(x, 0.0) for p in rows for x in phases) / tot)
    return out


def pairs(steps: list[dict]) -> int:
    s = stretches(steps)
    return sum(1 for (a, _), (b, _) in zip(s, s[1:]) if a == "observed" and b == "bare")


def decisions(steps: list[dict], max_n: int | None, cuda: bool = False
              ) -> dict[str, seq.Decision]:
    return {name: seq.decide(stretch_shares(steps, phases), t, max_n=max_n,
                             statistic="mean")
            for name, phases, t in tests(cuda)}


def _phrase(name: str, d: seq.Decision) -> str:
    t = d.threshold[0]
    # a share lies in 0..100 %: the interval is clipped there for the reader
    iv = (f"{max(d.low, 0):.0f}..{min(d.high, 100):.0f} %" if math.isfinite(d.low)
          else f"{d.estimate:.0f} %")
    return f"{name} {iv} {d.state} {t:g} %" if d.decided else f"{name} {iv} vs {t:g} %"


def look(steps: list[dict], max_n: int | None, cuda: bool = False) -> dict:
    """Where the deciding evidence stands: ``{"decided": bool, "line": str, "tests":
    {name: Decision.line}, "more_stretches": int | None}``."""
    timed = sum(1 for r in steps if r["kind"] in ("observed", "bare"))
    ds = decisions(steps, max_n, cuda)
    lacking = [n for n, d in ds.items() if not d.decided]
    minimum = pairs(steps) >= MIN_PAIRS and timed >= MEMORY_STEPS
    from perflab.attach.observers import STRETCH

    # stretches still wanted: the sequence's projection, or, before its first look, at least
    # the rest of its minimum; and the rest of the stop's own minimum (pairs, timed steps)
    more = [d.more_n if d.more_n is not None else max(seq.MIN_N - d.n, 1)
            for d in ds.values() if not d.decided]
    more.append(max(MIN_PAIRS - pairs(steps), math.ceil((MEMORY_STEPS - timed) / (2 * STRETCH)),
                    0))
    out = {"decided": minimum and not lacking, "pairs": pairs(steps), "timed_steps": timed,
           "tests": {n: d.line(unit="%", what="stretches") for n, d in ds.items()},
           "lacking": lacking + ([] if minimum else [f"{MINIMUM} ({MIN_PAIRS} stretch pairs"
                                                     f", {MEMORY_STEPS} timed steps)"]),
           "more_stretches": (math.ceil(max(more)) if all(map(math.isfinite, more))
                              else None)}
    if out["decided"]:
        out["line"] = f"decided after {len(steps)} steps: " + "; ".join(
            _phrase(n, d) for n, d in ds.items())
    else:
        out["line"] = "undecided: " + "; ".join(_phrase(n, ds[n]) for n in lacking) \
            if lacking else "the minimum not reached"
    return out


def stretches_to_decide(steps: list[dict], max_n: int, cuda: bool = False) -> int:
    """About how many hooks-on stretches would decide every test, from the shares seen so
    far (per step: the first stretch pair may hold only one hooks-on stretch); the
    sequence's mean half-width at n stretches of the per-step spread over sqrt(STRETCH)."""
    from perflab.attach.observers import STRETCH

    need = seq.MIN_N
    rows = [r["phases_ms"] for _, rs in stretches(steps) for r in rs if r["phases_ms"]]
    rho = seq.rho_for(float(min(max(max_n // 2, seq.MIN_N), seq.DEFAULT_N_OPT)))
    for _, phases, t in tests(cuda):
        x = [100 * sum(p.get(k, 0.0) for k in phases) / sum(p.values()) for p in rows
             if sum(p.values()) > 0]
        if len(x) < 2:
            return max_n
        sd, gap = float(np.std(x, ddof=1)) / math.sqrt(STRETCH), abs(float(np.mean(x)) - t)
        n = next((n for n in range(seq.MIN_N, max_n + 1)
                  if seq.half_width(n, sd * 1.2, rho) < gap), max_n)
        need = max(need, n)
    return max(need, MIN_PAIRS)


# ------------------------------------------------------------------ in the child


def step_end(obs) -> str:
    """Called by the Observer at each steady step's end under a total budget
    (``settings["budget_s"]``, from ``command_unix``, the command's start): the stop reason,
    or "" to run on. Looks after each stretch pair; prints the pre-flight estimate once."""
    import sys

    from perflab.attach.observers import STRETCH

    steps, s = obs.steps, obs.s
    if "started_unix" not in s:  # the command's start: its interpreter's, where readable
        set_at = s.get("command_unix", obs.unix0)
        parent = started_unix(os.getppid()) or math.inf
        # the parent is the command when it started shortly before it set command_unix
        s["started_unix"] = parent if set_at - 30 < parent <= set_at else set_at
    elapsed = time.time() - s["started_unix"]
    end = s["budget_s"] - TAIL_S
    timed = [r["wall_ms"] for r in steps if r["kind"] in ("observed", "bare") and r["wall_ms"]]
    rec = obs.status.setdefault("stopping", {"contract": "adaptive", "budget_s": s["budget_s"],
                                             "tail_s": TAIL_S})
    # spent when the next step (as long as the recent ones) would end past the end: a step
    # checks only at its end, so waiting for the crossing overshoots by up to a step
    spent = len(timed) >= 2 and elapsed + float(np.median(timed[-8:])) / 1e3 >= end
    paired = steps[-1]["kind"] == "bare" and obs._kind != "bare"
    if not (paired or spent):
        return ""
    cuda = bool(getattr(obs, "cuda", False))
    if cuda:  # the device's clock for the steps it has finished (never a wait inside a step)
        obs._resolve(block=False)
        obs._device_times()
        done = [i for i, r in enumerate(steps) if "host_wall_ms" in r]
        steps = steps[:done[-1] + 1] if done else []
        if not steps and not spent:
            return ""
        timed = [r["wall_ms"] for r in steps if r["kind"] in ("observed", "bare")
                 and r["wall_ms"]]
    # the time a step still to come takes: the steady steps' (those during which Dynamo
    # compiled left out: a recompiling script's first steps compile until the recompile
    # limit, the rest run eager), never a compile's
    steady = [r["wall_ms"] for _, rows in stretches(steps) for r in rows]
    shares_seen = sum(1 for k, rows in stretches(steps) if k == "observed"
                      for r in rows if r["phases_ms"])
    step_s = float(np.median(steady or timed)) / 1e3 if steady or timed else 0.0
    have = len(stretch_shares(steps, ("optimizer",)))
    max_n = max(have + int(max(end - elapsed, 0) / max(2 * STRETCH * step_s, 1e-6)), seq.MIN_N)
    now = look(steps, max_n, cuda)
    rec.update(now, elapsed_s=elapsed, max_stretches=max_n, step_ms=1e3 * step_s)
    if "estimate_s" not in rec and shares_seen >= 2:
        # once, at the first pair with steady hooks-on steps (their shares' spread): the
        # time so far, the steps the stretches still to decide take, the tail
        n = stretches_to_decide(steps, max_n, cuda)
        left = max(2 * STRETCH * (n - have), 0)
        est = min(elapsed + left * step_s, end) + TAIL_S
        rec.update(estimate_s=est, estimate_steps=len(steps) + left, estimate_stretches=n)
        print(f"perflab run: step ~{1e3 * step_s:.3g} ms; decided in ~{len(steps) + left} "
              f"steps expected; ~{est:.0f} s to the verdict (budget {s['budget_s']:g} s)",
              file=sys.stderr, flush=True)
    elif "revised_s" not in rec and have >= seq.MIN_N and not now["decided"]:
        revise(rec, now, elapsed, end, step_s)
    if now["decided"]:
        rec["stopped"] = "decided"
        return now["line"]
    if spent:
        rec["stopped"] = "budget"
        more = now["more_stretches"]
        rec["budget_to_decide_s"] = (None if more is None else
                                     s["budget_s"] + 2 * STRETCH * more * step_s)
        return f"budget spent ({s['budget_s']:g} s): {now['line']}"
    return ""


def revise(rec: dict, now: dict, elapsed: float, end: float, step_s: float) -> None:
    """Once, at the sequence's first look (seq.MIN_N hooks-on stretches) if it did not
    decide there: the estimate again, from the rule's own projection over the stretches
    seen (their spread, not the first stretch's steps': on a shared or bursty machine the
    stretches vary more than one stretch's steps say); printed when it moved by more than
    a quarter."""
    import sys

    from perflab.attach.observers import STRETCH

    more = now["more_stretches"]
    est = (end if more is None else min(elapsed + 2 * STRETCH * more * step_s, end)) + TAIL_S
    rec.update(revised_s=est, revised_at_s=elapsed)
    if abs(est - rec.get("estimate_s", est)) > 0.25 * rec.get("estimate_s", est):
        why = "; ".join(f"{n} {now['tests'][n]}" for n in now["lacking"] if n in now["tests"])
        print(f"perflab run: revised after {now['pairs']} stretch pairs: ~{est:.0f} s to "
              f"the verdict ({why})", file=sys.stderr, flush=True)


def verdict_note(ev: dict) -> str:
    """What the verdict says of how the run stopped: decided, or cut short by its budget
    (which evidence it lacked, about what budget would decide it); "" for a fixed run."""
    st = (ev.get("status") or {}).get("stopping")
    if not st:
        return ""
    line = ev["status"].get("stopped_by") or st.get("line", "")
    if st.get("stopped") == "budget":
        b = st.get("budget_to_decide_s")
        line += ("; it lacked: " + ", ".join(st.get("lacking", []))
                 + (f"; about --budget {math.ceil(b)}s would decide it" if b else
                    "; no affordable budget would decide it (a share on its threshold)"))
    est = st.get("estimate_s")
    if est:
        line += (f" (pre-flight estimate ~{est:.0f} s, {st.get('estimate_steps')} steps"
                 + (f"; revised to ~{st['revised_s']:.0f} s at {st['revised_at_s']:.0f} s"
                    if st.get("revised_s") else "") + f"; budget {st['budget_s']:g} s)")
    return line


def mark_lacking(ev: dict, findings: list, memory) -> bool:
    """A run cut short by its budget: the findings whose deciding evidence it lacked say so
    (perflab.views.diagnose's ``borderline``, which the headline reads: a verdict resting
    on an undecided share is "too close to call", never a plain verdict), and the memory
    test, short of the steps the rule asks for, says how few it had. Missing evidence is
    never support. Nothing to do for a decided or a fixed-contract run. True when a
    finding was marked."""
    st = (ev.get("status") or {}).get("stopping") or {}
    if st.get("stopped") != "budget":
        return False
    marked = False
    why = f"not decided within the --budget {st['budget_s']:g} s"
    for name in st.get("lacking", []):
        f = next((f for f in findings if f.bottleneck == DECIDES.get(name)), None)
        if f is not None:
            f.borderline = (f"{why}: the {name} {st['tests'][name]}; the verdict "
                            "lacked this evidence")
            marked = True
    timed = st.get("timed_steps", 0)
    if any(x.startswith(MINIMUM) for x in st.get("lacking", [])) and timed < MEMORY_STEPS:
        memory.because += (f" ({why}: {timed} timed steps of the {MEMORY_STEPS} the stop "
                           "rule asks for; a slow leak may not show in so few)")
    return marked
