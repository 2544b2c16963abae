"""``perflab whatif -- python train.py``: each intervention that applies, applied from outside
the script in a fresh run of it, timed against the baseline (docs/whatif-script.md).

One attached baseline run (perflab.attach.run.run_child) gives the diagnosis; the
interventions of :mod:`perflab.attach.patches` that apply to what it observed run next, the
diagnosis's first, each in a fresh process with the same settings (seed, steps, warm-up),
interleaved with repeats of the baseline (B, I1, I2, B, I3, I4, B, ..., B) so the
between-run floor (perflab.instruments.stats.process_floor_pct) is measured in the same
invocation. Each change is judged by perflab.instruments.stats.judge against that floor: a
change inside it is "not resolved", never a speedup. Fixed steps per run (the sequential
rule of perflab.instruments.sequential is not used yet: each run is one fresh process).
"""

from __future__ import annotations

import math
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perflab.attach import run as runmod

#: the W01 names this table shares (perflab.experiments.w01_whatif): one vocabulary
FASTER, SLOWER, UNRESOLVED, NOT_APPLICABLE, FAILED = (
    "faster", "slower", "not resolved", "does not apply", "failed")
NOT_RUN = "not run"
BASELINE = "baseline"
NOT_DETERMINISTIC = ("the script is not deterministic run to run: correctness not checked "
                     "(losses differ by {:.3g} (relative) between two identical runs)")
#: beyond diagnose.HYPOTHESES (the W01 names for each verdict): the attached-only patches
EXTRA_HYPOTHESES = {"device_compute": ("tf32", "channels_last"),
                    "memory_bandwidth": ("autocast_fp16",), "recompiling": ("compile_dynamic",)}
#: where each patch edits the script: the construction-site kind of ev["sites"]
SITE_KIND = {"loader": "loader", "optimizer": "optimizer"}


class WhatifError(runmod.RunError):
    """Bad input, or a script that cannot be re-run, said in one line."""


def parse_params(items: list[str]) -> dict[str, dict]:
    """--set's ``NAME:k=v,...`` (perflab run --patch's grammar, perflab.attach.patches.parse_spec)
    -> {NAME: {k: v}}."""
    from perflab.attach import patches as pmod

    out: dict[str, dict] = {}
    for item in items:
        try:
            spec = pmod.parse_spec(item)
        except ValueError as exc:
            raise WhatifError(f"--set {item!r}: {exc}") from None
        out.setdefault(spec.pop("name"), {}).update(spec)
    return out


def patches():
    """The patch registry of the child side (perflab.attach.patches)."""
    from perflab.attach import patches as pmod

    return pmod.REGISTRY


def order(names: list[str], verdict: str) -> list[str]:
    """The diagnosis's interventions first (in its order), then the rest as registered."""
    from perflab.views import diagnose as dg

    first = [*dg.HYPOTHESES.get(verdict, ()), *EXTRA_HYPOTHESES.get(verdict, ())]
    head = [n for n in first if n in names]
    return head + [n for n in names if n not in head]


def schedule(names: list[str], every: int = 2) -> list[str | None]:
    """The run order after the first baseline: None = a baseline repeat, between every
    ``every`` interventions and at the end; at least two repeats (three baselines)."""
    out: list[str | None] = []
    for i, n in enumerate(names):
        out.append(n)
        if (i + 1) % every == 0 and i + 1 < len(names):
            out.append(None)
    out.append(None)
    while out.count(None) < 2:
        out.insert(len(out) // 2 if names else 0, None)
    return out


# ------------------------------------------------------------------ reading one run

def steady_ms(ev: dict) -> list[float]:
    from perflab.attach import evidence as evmod

    return list(evmod.summarize(ev).steady_ms)


def peak_mib(ev: dict) -> tuple[float | None, str]:
    """(the highest memory of a step row, its metric): the allocator's on CUDA, else RSS."""
    for key in ("max_allocated_mib", "rss_mib"):
        vals = [r["memory"][key] for r in ev["steps"] if key in r.get("memory", {})]
        if vals:
            return float(max(vals)), key
    return None, "not measured (no memory in the step rows)"


def first_call_ms(ev: dict) -> float:
    """The warm-up steps' wall above the steady step, summed (compile included), ms."""
    from perflab.attach import evidence as evmod

    s = evmod.summarize(ev)
    if not s.steady_ms:
        return math.nan
    med = float(np.median(s.steady_ms))
    return float(sum(max(0.0, w - med) for w in s.warmup_ms))


def energy_per_step(ev: dict) -> tuple[float | None, str]:
    """(J per timed step, how): the cumulative counter's rise over the timed steps."""
    rows = [r for r in ev["steps"] if r.get("kind") != "warmup" and r.get("energy_j") is not None]
    if len(rows) >= 2:
        return ((rows[-1]["energy_j"] - rows[0]["energy_j"]) / (len(rows) - 1),
                (ev.get("energy") or {}).get("instrument") or "energy counter")
    why = (ev.get("energy") or {}).get("reason") or "the evidence has no energy counter"
    return None, f"not measured ({why})"


def batch_size(ev: dict) -> int | None:
    sizes = [ld.get("batch_size") for ld in ev.get("loaders", []) if ld.get("batch_size")]
    return int(sizes[0]) if sizes else None


def traceback_tail(ev: dict | None, lines: int = 6) -> str:
    tb = ((ev or {}).get("status") or {}).get("traceback") or ""
    return " / ".join(t.strip() for t in tb.strip().splitlines()[-lines:]) or \
        "no traceback in the evidence"


def ran(rc: int, ev: dict | None) -> bool:
    """The run gave timed steps and did not raise."""
    return ev is not None and (ev.get("status") or {}).get("exit") != "raised" and bool(
        steady_ms(ev))


# ------------------------------------------------------------------ judging

def floor_pct(baseline_medians: list[float]) -> float | None:
    """The between-run floor of this invocation's baseline runs, % (None: fewer than 2)."""
    from perflab.instruments import stats

    return stats.process_floor_pct(baseline_medians) if len(baseline_medians) >= 2 else None


@dataclass
class Row:
    """One intervention as the table shows it."""

    name: str
    verdict: str
    reason: str = ""
    change_pct: float | None = None  # median steady step, intervened vs baseline
    ci_pct: tuple[float, float] | None = None
    bound_pct: float | None = None
    first_call_cost_ms: float | None = None
    break_even_steps: float | None = None
    peak_mib: tuple[float | None, float | None] = (None, None)
    peak_metric: str = ""
    per_example_us: tuple[float, float] | None = None  # (baseline, intervened) µs/example
    energy_j: tuple[float | None, float | None] = (None, None)  # J/step (baseline, intervened)
    energy_how: str = ""
    check: str = "no check"
    site: str = ""
    edit: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def gain_pct(self) -> float | None:
        return None if self.change_pct is None else -self.change_pct


def beyond_floor(change_pct: float, floor: float) -> bool:
    """Is a change of the median beyond the between-run floor? process_floor_pct bounds the
    log ratio of two runs (floor = 100 (e^q - 1)): a slow-down beyond +floor %, a speed-up
    below 100 (e^-q - 1) % (e.g. floor 100 % -> below -50 %)."""
    return abs(math.log1p(change_pct / 100)) > math.log1p(floor / 100)


def judge_change(base: list[float], new: list[float], floor: float | None) -> tuple[str, float, tuple[float, float]]:
    """(verdict, change %, 95% interval %) of the median steady step: faster/slower only
    when stats.judge finds it significant and it lies beyond the between-run floor; no
    floor: not resolved."""
    from perflab.instruments import stats

    j = stats.judge(base, new, paired=False)
    med = float(np.median(base))
    ci = (100 * j.ci_low / med, 100 * j.ci_high / med)
    if floor is None or not j.significant or not beyond_floor(j.relative_pct, floor):
        return UNRESOLVED, j.relative_pct, ci
    return (FASTER if j.relative_pct < 0 else SLOWER), j.relative_pct, ci


def loss_check(name: str, baselines: list[list[float]], new: list[float]) -> str:
    """The intervention's first K losses against the baseline's run-to-run spread, with
    W01's tolerance class for the intervention."""
    from perflab.experiments.w01_whatif import whatif as w01

    base = [b for b in baselines if b]
    if len(base) < 2 or not new:
        return "not checked (fewer than two baseline runs, or no losses recorded)"
    k = min(len(new), *(len(b) for b in base))
    if k == 0:
        return "not checked (no losses recorded)"
    ref = np.asarray(base[0][:k], float)
    scale = np.maximum(np.abs(ref), 1e-12)
    spread = max(float(np.max(np.abs(np.asarray(b[:k], float) - ref) / scale)) for b in base[1:])
    same = w01.TOLERANCES["same arithmetic"]
    if spread > same.loss_rel:
        return NOT_DETERMINISTIC.format(spread)
    iv = w01.REGISTRY.get(name)
    tol = w01.TOLERANCES[iv.tolerance if iv else "reordered"]
    diff = float(np.max(np.abs(np.asarray(new[:k], float) - ref) / scale))
    limit = max(tol.loss_rel, 2 * spread)
    return (f"{'ok' if diff <= limit else 'MISMATCH'}: first {k} losses within {diff:.2g} "
            f"(relative; limit {limit:.2g}, {tol.name}; baseline runs differ by {spread:.2g})")


def bound_pct(name: str, entry, shares: dict[str, float]) -> tuple[float | None, str]:
    """W01's phase bound: the share of the baseline's step the touched phases take."""
    from perflab.experiments.w01_whatif import whatif as w01

    touches = tuple(getattr(entry, "touches", ()) or getattr(w01.REGISTRY.get(name), "touches", ()))
    if not touches or not shares:
        return None, "no phase it removes" if not touches else "no phase shares observed"
    total = sum(shares.get(p, 0.0) for p in touches)
    return total, f"{' + '.join(touches)} {total:.1f}% of the step"


def site_of(name: str, ev: dict) -> str:
    """The construction site the patch edits (ev["sites"]; older evidence: the DataLoader's
    site, else the optimizer's step site)."""
    sites = ev.get("sites") or {}
    kind = next((k for pre, k in SITE_KIND.items() if pre in name), "model")
    found = list(sites.get(kind) or [])
    if not found and kind == "loader":
        found = [ld["site"] for ld in ev.get("loaders", []) if ld.get("site")]
    return found[0] if found else ""


def measured_row(name: str, entry, base_evs: list[dict], ev: dict, floor: float | None,
                 shares: dict[str, float], used: dict | None = None) -> Row:
    used = used or {}
    base_steps = [v for b in base_evs for v in steady_ms(b)]
    new_steps = steady_ms(ev)
    verdict, change, ci = judge_change(base_steps, new_steps, floor)
    row = Row(name, verdict, change_pct=change, ci_pct=ci)
    if floor is None:
        row.reason = "no between-run floor (fewer than two baseline runs)"
    elif verdict == UNRESOLVED:
        row.reason = f"inside the between-run floor ±{floor:.2g}% or not significant"
    row.bound_pct, bound_from = bound_pct(name, entry, shares)
    row.extra["bound_from"] = bound_from
    base_first = float(np.median([first_call_ms(b) for b in base_evs]))
    row.first_call_cost_ms = first_call_ms(ev) - base_first
    saving = float(np.median(base_steps) - np.median(new_steps))
    if saving > 0 and row.first_call_cost_ms > 0:
        row.break_even_steps = row.first_call_cost_ms / saving
    bp, metric = peak_mib(base_evs[0])
    row.peak_mib, row.peak_metric = (bp, peak_mib(ev)[0]), metric
    bs = batch_size(base_evs[0])
    if bs:
        row.per_example_us = (1e3 * float(np.median(base_steps)) / bs,
                              1e3 * float(np.median(new_steps)) / (batch_size(ev) or bs))
    (be, how), (ie, _) = energy_per_step(base_evs[0]), energy_per_step(ev)
    row.energy_j, row.energy_how = (be, ie), how
    row.check = loss_check(name, [b.get("losses") or [] for b in base_evs], ev.get("losses") or [])
    row.site = site_of(name, base_evs[0])
    p = ev.get("patch") or {}
    if p.get("where"):
        row.site = p["where"][0]
    try:
        row.edit = entry.edit(row.site, {**getattr(entry, "params", {}), **used}) \
            if row.site else ""
    except Exception as exc:  # the diff is an explanation, never a reason to lose the row
        row.edit = f"(no diff: {exc})"
    return row


def ranked(rows: list[Row]) -> list[Row]:
    """Faster first by measured gain, then not resolved, slower, failed, not run, not applicable."""
    rank = {FASTER: 0, UNRESOLVED: 1, SLOWER: 2, FAILED: 3, NOT_RUN: 4, NOT_APPLICABLE: 5}
    return sorted(rows, key=lambda r: (rank.get(r.verdict, 6), -(r.gain_pct or 0.0)))


# ------------------------------------------------------------------ output

def _f(v, fmt="{:+.1f}", none="") -> str:
    return none if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def markdown(rows: list[Row], head: list[str]) -> str:
    lines = [*head, "",
             "| intervention | verdict | step change % (95%) | bound % | first-call cost ms "
             "(break-even steps) | peak MiB base→new | µs/example base→new | J/step base→new "
             "| losses | where |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in ranked(rows):
        if r.change_pct is None:
            why = r.reason.replace("|", "/")
            lines.append(f"| {r.name} | {r.verdict} | {why} | | | | | | | |")
            continue
        ci = f" ({r.ci_pct[0]:+.1f}..{r.ci_pct[1]:+.1f})" if r.ci_pct else ""
        be = f" ({r.break_even_steps:.0f})" if r.break_even_steps else ""
        pe = (f"{r.per_example_us[0]:.3g}→{r.per_example_us[1]:.3g}" if r.per_example_us
              else "batch size unknown")
        en = (f"{r.energy_j[0]:.3g}→{r.energy_j[1]:.3g}" if None not in r.energy_j
              else r.energy_how)
        pk = (f"{_f(r.peak_mib[0], '{:.0f}', '?')}→{_f(r.peak_mib[1], '{:.0f}', '?')} "
              f"({r.peak_metric})")
        edit = " / ".join(t.strip() for t in r.edit.splitlines()).replace("|", "/")
        where = (f"`{r.site}`" + (f" `{edit}`" if edit else "")).replace("|", "/") \
            if r.site else "no site found"
        lines.append(f"| {r.name} | {r.verdict}{': ' + r.reason if r.reason else ''} | "
                     f"{r.change_pct:+.1f}{ci} | {_f(r.bound_pct, '{:.0f}', 'n/a')} | "
                     f"{_f(r.first_call_cost_ms, '{:+.0f}')}{be} | {pk} | {pe} | {en} | "
                     f"{r.check} | {where} |")
    return "\n".join(lines) + "\n"


def rows_csv(rows: list[Row]) -> list[dict]:
    """CSV-contract rows (perflab.core.io): one per number, unsupported rows with the reason."""
    from perflab.attach import verdict as vmod

    out = []
    for r in rows:
        if r.change_pct is None:
            status = "error" if r.verdict == FAILED else "unsupported"
            out.append(vmod._row("whatif", r.name, "step_latency_rel", "median", None, "%",
                                 "steady", status, f"{r.verdict}: {r.reason}"))
            continue
        for metric, value, unit in (
                ("step_latency_rel", r.change_pct, "%"),
                ("step_latency_rel_ci_low", r.ci_pct[0], "%"),
                ("step_latency_rel_ci_high", r.ci_pct[1], "%"),
                ("first_call_cost", r.first_call_cost_ms, "ms"),
                ("peak_change", None if None in r.peak_mib else r.peak_mib[1] - r.peak_mib[0], "MiB"),
                ("energy_per_step", r.energy_j[1], "J")):
            ok = value is not None and not (isinstance(value, float) and math.isnan(value))
            out.append(vmod._row("whatif", r.name, metric, "median", value if ok else None,
                                 unit, "steady", "ok" if ok else "unsupported",
                                 "" if ok else "not measured in this run"))
    return out


# ------------------------------------------------------------------ the runs

def whatif(argv: list[str], *, steps: int = 30, warmup: int = 3, loss_steps: int = 5,
           seed: int = 0, budget: float | None = None, out: str | None = None,
           only: list[str] | None = None, params: dict | None = None, runner=None) -> int:
    """Run the plan; print the ranked table; write whatif.md/.csv. ``runner`` (tests) stands
    in for run.run_child."""
    from perflab.attach import verdict as vmod
    from perflab.core import io

    runner = runner or runmod.run_child
    try:
        command = runmod.command_of(argv)
        runmod.check_script(command)
    except runmod.RunError as exc:
        print(f"perflab whatif: {exc}", file=sys.stderr)
        return 2
    name = Path(command[1] if command[0] == "-m" else command[0]).stem
    out_dir = Path(out or Path("perflab-run") / f"{name}-whatif-{time.strftime('%Y%m%d-%H%M%S')}")
    script_dir = Path(command[0]).resolve().parent if command[0] != "-m" else Path.cwd()

    def settings(patch: dict | None) -> dict:
        return {"steps": steps, "seconds": None, "follow": False, "warmup": warmup,
                "roots": [str(script_dir), str(Path.cwd())], "no_step_s": 6.0,
                "patch": patch, "seed": seed, "loss_steps": loss_steps}

    started = time.perf_counter()
    rc, ev, wall = runner(command, settings(None), out_dir / "baseline-1")
    if not ran(rc, ev):
        print(f"perflab whatif: the baseline run gave no timed steps: "
              f"{runmod.outcome_line(rc, ev, command)}; {traceback_tail(ev)}", file=sys.stderr)
        return rc or 1
    d, s, _ = vmod.judge(ev, out_dir / "baseline-1")
    print(f"[1] baseline: median step {np.median(s.steady_ms):.3g} ms, {wall:.1f} s; "
          f"verdict {d.verdict}", file=sys.stderr)
    registry = patches()
    rows: list[Row] = []
    applicable = []
    for n, entry in registry.items():
        if only and n not in only:
            continue
        why = entry.applies(ev)
        if why:
            rows.append(Row(n, NOT_APPLICABLE, why))
        else:
            applicable.append(n)
    plan = schedule(order(applicable, d.verdict))
    est = wall
    print(f"perflab whatif: plan {len(plan)} more runs of ~{est:.0f} s each (the baseline's "
          f"wall), ~{est * len(plan):.0f} s: " + ", ".join(p or BASELINE for p in plan)
          + (f"; budget {budget:.0f} s" if budget else ""), file=sys.stderr)
    bases, tried = [ev], {}
    for k, p in enumerate(plan, start=2):
        left = plan[k - 1:].count(None) - (1 if p is None else 0)
        elapsed = time.perf_counter() - started
        if p is not None and budget is not None and elapsed + est * (1 + left) > budget:
            rows.append(Row(p, NOT_RUN, f"not run: budget ({budget:.0f} s; "
                                        f"{elapsed:.0f} s spent, ~{est:.0f} s a run)"))
            continue
        tag = p or f"baseline-{len(bases) + 1}"
        rc2, ev2, w2 = runner(command, settings({"name": p, **(params or {}).get(p, {})} if p else None), out_dir / tag)
        if p is None:
            if not ran(rc2, ev2):
                print(f"perflab whatif: the script cannot be re-run: its first run succeeded, "
                      f"an identical second one did not ({runmod.outcome_line(rc2, ev2, command)}"
                      f"; {traceback_tail(ev2)}). If it writes to a fixed path (a checkpoint, a "
                      "log directory) or needs a free port, make that path or port an argument "
                      "or let it exist", file=sys.stderr)
                return rc2 or 1
            bases.append(ev2)
            print(f"[{k}] baseline: median step {np.median(steady_ms(ev2)):.3g} ms, "
                  f"{w2:.1f} s", file=sys.stderr)
        else:
            tried[p] = (rc2, ev2)
            state = ("FAILED" if not ran(rc2, ev2) else
                     f"median step {np.median(steady_ms(ev2)):.3g} ms")
            print(f"[{k}] {p}: {state}, {w2:.1f} s", file=sys.stderr)
    floor = floor_pct([float(np.median(steady_ms(b))) for b in bases])
    for p, (rc2, ev2) in tried.items():
        patch = (ev2 or {}).get("patch") or {}
        if not ran(rc2, ev2):
            rows.append(Row(p, FAILED, f"the patched run raised: {traceback_tail(ev2)}"))
        elif patch and not patch.get("applied", True):
            rows.append(Row(p, NOT_APPLICABLE, f"not applied: {patch.get('error') or patch.get('detail')}"))
        else:
            rows.append(measured_row(p, registry[p], bases, ev2, floor, s.phase_share_pct,
                                     (params or {}).get(p)))
    head = [f"# perflab whatif: {' '.join(command)}", "",
            f"- baseline: {len(bases)} runs, {steps} steps each ({warmup} warm-up), seed {seed}; "
            f"between-run floor "
            + (f"±{floor:.2g}% (perflab.instruments.stats.process_floor_pct)" if floor is not None
               else "not measured (fewer than two baseline runs)"),
            f"- diagnosis: {d.verdict} (perflab.attach.verdict); its "
            "interventions ran first; fixed steps per run (no sequential stopping rule)"]
    md = markdown(rows, head)
    print(md)
    io.atomic_write_text(out_dir / "whatif.md", md)
    io.write_results(out_dir / "whatif.csv", rows_csv(rows))
    print(f"whatif: {out_dir / 'whatif.md'}, rows: {out_dir / 'whatif.csv'}", file=sys.stderr)
    return 0


# ------------------------------------------------------------------ command line

_VALUED = ("--steps", "--warmup", "--out", "--budget", "--loss-steps", "--seed", "--only", "--set")


def is_script_form(words: list[str]) -> bool:
    """`perflab whatif` of a script (python/python3 first, a .py, or -m) rather than a Workload."""
    if "--" in words:
        after = words[words.index("--") + 1:]
        first = after[0] if after else ""
        return first == "-m" or Path(first).name in runmod._PYTHONS or first.endswith(".py")
    first = next((a for k, a in enumerate(words) if not a.startswith("-")
                  and (k == 0 or words[k - 1] not in _VALUED)), "")
    return Path(first).name in runmod._PYTHONS or first.endswith(".py")


def add_arguments(p) -> None:
    p.add_argument("--steps", type=int, default=30, help="timed steps of every run (default 30)")
    p.add_argument("--warmup", type=int, default=3, help="warm-up steps left out (default 3)")
    p.add_argument("--loss-steps", type=int, default=5, help="first K losses compared (default 5)")
    p.add_argument("--seed", type=int, default=0, help="the script's RNG seed in every run")
    p.add_argument("--budget", help="wall budget, e.g. 90s or 3m: what does not fit is a "
                   "'not run: budget' row")
    p.add_argument("--only", help="comma-separated intervention names")
    p.add_argument("--set", action="append", default=[], metavar="NAME:K=V,...",
                   help="a patch's parameters, e.g. loader_workers:num_workers=4 (repeatable)")
    p.add_argument("--out", help="where the runs and whatif.md/.csv go")
    p.add_argument("script", nargs="*", help="the script and its arguments (or after --)")


def main(argv: list[str] | None = None) -> int:
    import argparse

    head, command = runmod.split_argv(list(sys.argv[1:] if argv is None else argv))
    p = argparse.ArgumentParser(prog="perflab whatif",
                                description="each intervention measured: docs/whatif-script.md")
    add_arguments(p)
    a = p.parse_args(head)
    from perflab.kit import sampling

    try:
        budget = None if a.budget is None else sampling.parse_budget_s(a.budget)
        params = parse_params(a.set)
    except (ValueError, WhatifError) as exc:
        print(f"perflab whatif: {exc}", file=sys.stderr)
        return 2
    return whatif([*a.script, *command], steps=a.steps, warmup=a.warmup, loss_steps=a.loss_steps,
                  seed=a.seed, budget=budget, out=a.out,
                  only=a.only.split(",") if a.only else None, params=params)


if __name__ == "__main__":
    sys.exit(main())
