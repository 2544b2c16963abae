"""The verdict on an attached run: perflab.views.diagnose's engine on the run's evidence, plus the
findings only a real loop shows.

The engine reads experiment rows (E05's phase shares, R01's roofline, R02's trace). The run's
evidence is written in those coordinates (:func:`engine_rows`), each row's window saying it
came from the script's own loop, so the same tests decide: input pipeline, synchronization,
optimizer, host overhead, device compute / memory bandwidth. Before them, one finding the
experiments cannot have: ``recompiling`` (steady steps during which Dynamo compiled: their
time against the steady steps'). Beside the time verdict: ``memory_growth`` (step-end memory
rising every step: a leak, e.g. a loss kept with its graph).

The advice names the user's line where the evidence has one: the DataLoader's construction,
the optimizer's first step, a host read's call.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from perflab.attach import evidence as evmod
from perflab.core import io
from perflab.core.names import PHASES
from perflab.experiments import e05_phases as e05
from perflab.experiments import r01_roofline as r01
from perflab.experiments import r02_step_trace as r02
from perflab.views import diagnose as dg

#: what the input test says of a script that builds no DataLoader (the engine's words are
#: for a workload, which could be handed one)
NO_DATALOADER = (" (the script builds no DataLoader: its batches come from its own loop, and "
                 "the time it takes to make them is in the step's other phases)")
#: time in steady steps that recompiled, % of all steady time, that makes it the verdict
RECOMPILE_SHARE_PCT = 10.0
ATTACHED = "attached: the script's own loop"


def _row(eid, variant, metric, statistic, value, unit, window, status="ok", reason=""):
    return dict(experiment=eid, variant=variant, workload="script", model="", input_shape="",
                dtype="as the script sets it", device="cpu", device_name="", mode="train",
                execution="attached", metric=metric, window=window,
                sync_boundary="none", statistic=statistic,
                value=value if status == "ok" else None, unit=unit, n=1, status=status,
                reason=reason)


def engine_rows(ev: dict, s: evmod.Summary, out_dir: Path | None = None) -> pd.DataFrame:
    """The run's evidence as the rows perflab.views.diagnose reads (``out_dir``: where the trace
    of the profiled window is, read on CUDA)."""
    out = []
    fed = e05.FED_BY_LOADER if ev["loaders"] else e05.SERVED_BATCH
    for p in PHASES:
        if p in s.phase_share_pct:
            out.append(_row("E05", e05.SYNC + p, e05.PHASE_SHARE, "value", s.phase_share_pct[p],
                            "%", f"{ATTACHED}; {fed}"))
    if not ev["cuda"]:
        out.append(_row("R02", r02.BUSY, r02.DEVICE_TIME, "value", None, "ms", ATTACHED,
                        "unsupported", r02.NO_QUEUE))
    elif out_dir is not None:
        from perflab.attach import device

        free = float(np.median(s.steady_ms)) if s.steady_ms else None
        out += device.trace_rows(ev, out_dir, free, lambda *a: _row(*a, device.WINDOW))
    out += _roofline_rows(ev, s)
    frame = io.rows_to_frame(out)
    return frame


def _roofline_rows(ev: dict, s: evmod.Summary) -> list[dict]:
    """R01's forward + backward fractions: one step's counted work over the steady forward +
    loss + backward time, against the ceilings measured after the script (computed in the
    child: observers.roofline_fractions)."""
    f, ceil = ev.get("roofline") or {}, ev.get("ceilings") or {}
    if not f or "peak_flops" not in ceil:
        return []
    window = (f"{ATTACHED}: one step's forward + backward work (FLOP and byte counters) over "
              "the steady forward + loss + backward time")
    out = [_row(*r01.forward_backward_row(m)[:3], "median", f[m], u, window)
           for m, u in ((r01.ARITHMETIC_INTENSITY, "FLOP/B"), (r01.FLOPS_FRACTION, "%"),
                        (r01.BANDWIDTH_FRACTION, "%"), (r01.ROOFLINE_FRACTION, "%"))]
    out.append(_row(*r01.RIDGE_POINT_ROW[:3], "value", ceil["peak_flops"] / ceil["bandwidth"],
                    "FLOP/B", f"matmul {ceil['dtype']} n={ceil['matmul_n']} / copy bandwidth, "
                    "measured after the script"))
    return out


# ------------------------------------------------------------------ attach-only findings


def recompiling(ev: dict, s: evmod.Summary) -> dg.Finding:
    steps = ev["steps"]
    recompiled = s.recompile_steps
    limit = ev.get("limit_hits") or []
    reasons = ev.get("recompiles") or []
    if not (ev.get("dynamo_final") or {}).get("stats.unique_graphs"):
        return dg.Finding("recompiling", dg.RULED_OUT, "the script compiled no graph "
                          "(Dynamo's counters: stats.unique_graphs 0 or absent)")
    spent = sum(r["wall_ms"] or 0.0 for r in steps[1:] if r["kind"] != "warmup"
                and _grew(steps, r))
    total = spent + sum(s.steady_ms)
    share = 100 * spent / total if total else 0.0
    rd = dg.Reading("RUN compiler recompile_steps value", recompiled, "count",
                    "steady steps during which Dynamo compiled a graph")
    sh = dg.Reading("RUN compiler recompile time share", share, "%",
                    f">= {RECOMPILE_SHARE_PCT:g}% of the steady time")
    sh.passes = rd.passes = share >= RECOMPILE_SHARE_PCT
    why = f"{recompiled} steady steps recompiled, {share:.1f}% of the steady time"
    if reasons:
        first = reasons[-1].splitlines()
        why += "; Dynamo's last reason: " + " ".join(x.strip() for x in first[1:4])[:300]
    if limit:
        why += "; a frame hit the recompile limit and fell back to eager"
    f = dg.Finding("recompiling", dg.FITS if sh.passes else dg.RULED_OUT, why, [rd, sh])
    if sh.passes:
        f.intervention = ("stop the shapes from changing every step (pad or bucket the "
                          "inputs to a few sizes), or compile with dynamic=True / "
                          "torch._dynamo.mark_dynamic on the varying dimension")
    return f


def _grew(steps: list[dict], r: dict) -> bool:
    prev = steps[r["index"] - 1]
    return evmod._compiled(prev, r) > 0


def memory_growth(ev: dict, s: evmod.Summary) -> dg.Finding:
    if not s.memory_slope:
        return dg.Finding("memory_growth", dg.NOT_MEASURED,
                          "needs at least 6 timed steps with their step-end memory")
    slope, lo, hi = s.memory_slope
    n = len(s.memory_series)
    growth = slope * s.memory_steps_span
    what = "allocated" if s.memory_key == "allocated_mib" else "resident set (RSS)"
    sl = dg.Reading(f"RUN memory {s.memory_key}_slope value", slope, "MiB/step",
                    "Theil-Sen slope, 95% interval above 0")
    gr = dg.Reading("RUN memory growth over the run", growth, "MiB",
                    f">= {evmod.GROWTH_FLOOR_MIB:g} MiB")
    rising = dg.Reading("RUN memory rising share", 100 * s.memory_rising_share, "%",
                        f">= {100 * evmod.RISING_SHARE:g}% of consecutive timed steps rose")
    sl.passes, gr.passes = lo > 0, growth >= evmod.GROWTH_FLOOR_MIB
    rising.passes = s.memory_rising_share >= evmod.RISING_SHARE
    ok = sl.passes and gr.passes and rising.passes
    f = dg.Finding("memory_growth", dg.FITS if ok else dg.RULED_OUT,
                   f"{what} memory {'grows' if slope > 0 else 'changes'} {slope:.3g} MiB per "
                   f"step (95% {lo:.3g}..{hi:.3g}, {n} timed steps, rising in "
                   f"{100 * s.memory_rising_share:.0f}% of them; {growth:.3g} MiB over the run)",
                   [sl, gr, rising])
    if ok:
        f.intervention = ("find what the loop keeps from every step: a loss or output "
                          "appended to a list with its graph (keep loss.item() or "
                          "loss.detach() instead), a growing cache; E11 shows the pattern")
    return f


# ------------------------------------------------------------------ the verdict


def _advice(ev: dict, d: dg.Diagnosis) -> str:
    """The intervention, at the user's line where the evidence has one."""
    base = d.intervention
    if d.verdict == "input_pipeline" and ev["loaders"]:
        lo = ev["loaders"][0]
        return (f"{lo['site']} — DataLoader(num_workers={lo['num_workers']}, "
                f"pin_memory={lo['pin_memory']}): {base}")
    if d.verdict == "optimizer" and ev.get("optimizer_sites"):
        name, site = next(iter(ev["optimizer_sites"].items()))
        return f"{site} — {name}: {base}"
    return base


def host_reads(ev: dict) -> list[tuple[str, float]]:
    """(site, reads per step) of the host reads located, most first."""
    hits = ev.get("host_reads") or ev.get("sync_hits") or []
    steps = len({h["step"] for h in hits}) or 1
    n_window = sum(1 for r in ev["steps"] if r["kind"] == "syncs") or steps
    by: dict[str, int] = {}
    for h in hits:
        key = (f"{h['site']} ({h['op']})" if "op" in h else h["site"]) or "unlocated"
        by[key] = by.get(key, 0) + 1
    return sorted(((k, v / n_window) for k, v in by.items()), key=lambda kv: -kv[1])


def _share_interval(ev: dict, phases: tuple[str, ...]) -> tuple[float, float, int] | None:
    """95% bootstrap interval of the mean share (%) of ``phases`` in the observed steps."""
    rows = [r["phases_ms"] for r in ev["steps"] if r["kind"] == "observed" and r["phases_ms"]]
    if len(rows) < 4:
        return None
    tot = np.array([sum(p.values()) for p in rows])
    part = np.array([sum(p.get(x, 0.0) for x in phases) for p in rows])
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(rows), (2000, len(rows)))
    boot = 100 * part[idx].sum(1) / tot[idx].sum(1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return float(lo), float(hi), len(rows)


def _undecided(ev: dict, f: dg.Finding, phases: tuple[str, ...], threshold: float) -> None:
    """Mark ``f`` when the threshold lies inside its share's interval over the observed
    steps: this budget cannot decide it; say how many steps would (the interval narrows as
    one over the square root of the steps)."""
    got = _share_interval(ev, phases)
    if got is None or f.outcome == dg.NOT_MEASURED:
        return
    lo, hi, n = got
    if lo <= threshold <= hi:
        mid = (lo + hi) / 2
        need = int(np.ceil(n * ((hi - lo) / 2 / max(abs(mid - threshold), 0.5)) ** 2))
        f.borderline = (f"the {threshold:g}% threshold lies inside the share's 95% interval "
                        f"over {n} observed steps ({lo:.1f}..{hi:.1f}%): not decided within "
                        f"this budget; about {max(need, 2 * n)} observed steps would decide "
                        f"it (--steps {2 * max(need, 2 * n)})")


def judge(ev: dict, out_dir: Path | None = None) -> tuple[dg.Diagnosis, evmod.Summary, dict]:
    """(the time verdict, the summary, the extra findings {'memory': ..., 'recompiling':...})."""
    s = evmod.summarize(ev)
    frame = engine_rows(ev, s, out_dir)
    d = dg.diagnose(frame)
    for f in d.findings:  # a script has no workload to hand a loader: say what it has
        if f.bottleneck == "input_pipeline":
            f.because = f.because.replace(dg.NO_OWN_LOADER, NO_DATALOADER)
    if not ev["cuda"]:  # on CUDA the trace decides input, with its own spread (R02)
        for f in d.findings:
            if f.bottleneck == "input_pipeline" and not f.borderline:
                _undecided(ev, f, ("input_wait", "host_to_device"), dg.INPUT_SHARE_PCT)
    for f in d.findings:
        if f.bottleneck == "optimizer" and not f.borderline:
            _undecided(ev, f, ("optimizer",), dg.OPTIMIZER_SHARE_PCT)
    rec = recompiling(ev, s)
    mem = memory_growth(ev, s)
    from perflab.attach import stopping  # a budget's stop: what the verdict lacked
    if stopping.mark_lacking(ev, d.findings, mem):
        d.rival, _ = dg._rival(d.findings, d.verdict)  # the headline: too close to call
    if rec.outcome == dg.FITS:
        d = dg.Diagnosis("recompiling", rec.because, [rec] + d.findings, d.measured)
    else:
        d.findings.insert(0, rec)
    d.findings.append(mem)
    if d.verdict == "undetermined" and mem.outcome == dg.FITS:
        # no time candidate fits, and the memory grows every step: that is the answer, not
        # "undetermined" with the growth as a footnote
        d = dg.Diagnosis("memory_growth", mem.because, d.findings, d.measured)
    reads = host_reads(ev)
    sync = next(f for f in d.findings if f.bottleneck == "synchronization")
    if reads and not ev["cuda"]:
        sync.because += ("; host reads located (Tensor.item/tolist/cpu/numpy/bool wrapped, "
                         "free on a CPU, each a sync on CUDA): "
                         + "; ".join(f"{k} {v:.3g}/step" for k, v in reads[:3]))
    for f in d.findings:
        if f.bottleneck == d.verdict:
            f.intervention = _advice(ev, d)
    return d, s, {"memory": mem, "recompiling": rec}
