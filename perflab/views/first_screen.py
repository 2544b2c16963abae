"""The report's first screen: the answer before the evidence.

What a reader of ``report.html`` sees without scrolling (at 1400 px): the verdict (what the
machine waits for, its evidence in one line, the next intervention and W01's measured effect
where it ran), where the step's time goes (a stacked bar of E05's phases, and R02's device
idle where a device queue was measured), and the claims' tally with the claims whose verdict
changed against the shipped reference run of the same device kind. Plus the page's style
(tables scroll inside the page, text left-aligned) and its navigation sidebar.

Everything is read from the run's files; every text is escaped; nothing is fetched.
"""

from __future__ import annotations

import html
import math
import re
from pathlib import Path

import pandas as pd

from perflab.core.names import PHASE_NOTES, PHASES
from perflab.experiments import e05_phases, r01_roofline, r02_step_trace
from perflab.kit.tables import Missing, pick, rows_of
from perflab.views import summary

#: the page's own style: the sidebar, tables that scroll inside their cell of the page
#: instead of widening it, left-aligned text (nbconvert's lab template right-aligns every
#: cell), preformatted text that wraps
STYLE = """<style>
nav.perflab-nav {position: fixed; top: 0; left: 0; width: 200px; height: 100vh;
  overflow-y: auto; box-sizing: border-box; padding: 14px 10px; font-size: 13px;
  line-height: 1.35; background: #f7f7f7; border-right: 1px solid #ddd; z-index: 100;
  text-align: left}
nav.perflab-nav a {display: block; color: #1a4f8b; text-decoration: none; padding: 2px 0}
nav.perflab-nav a.sub {padding-left: 10px; font-size: 12px; color: #444}
body.jp-Notebook {padding-left: 210px !important; box-sizing: border-box; max-width: 100vw;
  overflow-x: hidden}
main {max-width: 100%; box-sizing: border-box}
.jp-RenderedHTMLCommon table {display: block; max-width: 100%; overflow-x: auto;
  box-sizing: border-box}
.jp-RenderedHTMLCommon td, .jp-RenderedHTMLCommon th {text-align: left !important;
  vertical-align: top !important}
.jp-RenderedHTMLCommon pre, .jp-OutputArea-output pre {white-space: pre-wrap;
  overflow-wrap: anywhere}
.jp-RenderedHTMLCommon img {max-width: 100%; height: auto}
.jp-RenderedHTMLCommon, .jp-RenderedHTMLCommon p {text-align: left}
div.answer {border: 2px solid #1a4f8b; border-radius: 6px; padding: 10px 16px;
  margin: 4px 0 10px 0; background: #f4f8fc; box-sizing: border-box; width: 100%}
div.answer h1 {margin: 0 0 6px 0; font-size: 22px}
div.answer .verdict {font-size: 19px; margin: 4px 0}
div.answer p {margin: 3px 0}
div.stack {display: flex; width: 100%; box-sizing: border-box; height: 30px; border-radius: 4px; overflow: hidden;
  margin: 6px 0 2px 0; border: 1px solid #bbb}
div.stack div {height: 100%; color: #fff; font-size: 12px; line-height: 30px;
  overflow: hidden; white-space: nowrap; text-align: center}
span.key {display: inline-block; margin-right: 12px; font-size: 12px}
span.key span.swatch {display: inline-block; width: 10px; height: 10px; margin-right: 4px}
</style>"""

#: one colour per phase (E05's seven) and per device-idle cause (R02)
COLOURS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac"]


def stack_html(parts: dict[str, float], title: str) -> str:
    """One stacked bar of ``parts`` (label -> %, summing to about 100) with its key."""
    esc = html.escape
    cells, keys = [], []
    for k, (name, pct) in enumerate(parts.items()):
        colour = _colour(name) if name in PHASES else COLOURS[k % len(COLOURS)]
        if pct <= 0:
            continue
        label = f"{name} {pct:.0f}%" if pct >= 7 else ""
        cells.append(f'<div style="width:{pct:.2f}%;background:{colour}" '
                     f'title="{esc(name)} {pct:.1f}%">{esc(label)}</div>')
        note = f" ({PHASE_NOTES[name]})" if name in PHASE_NOTES else ""
        keys.append(f'<span class="key"><span class="swatch" style="background:{colour}"></span>'
                    f'{esc(name)}{esc(note)} {pct:.1f}%</span>')
    return (f"<p><strong>{esc(title)}</strong></p><div class=\"stack\">{''.join(cells)}</div>"
            f"<div>{''.join(keys)}</div>")


def device_idle(rows: pd.DataFrame) -> dict[str, float]:
    """R02's device busy and idle shares of its profiled window (%), {} where it measured
    none (a CPU has no device queue: those rows are `unsupported`)."""
    if rows.empty:
        return {}
    r = rows[(rows.experiment == r02_step_trace.ENTRY.eid) & (rows.status == "ok")
             & (rows.metric == r02_step_trace.WINDOW_SHARE) & (rows.statistic == "value")]
    keep = r[(r.variant == r02_step_trace.BUSY) | r.variant.str.startswith("idle/")]
    return {("device busy" if v == r02_step_trace.BUSY else "idle: " + v[len("idle/"):]):
            float(x) for v, x in zip(keep.variant, keep.value)}


def _colour(phase: str) -> str:
    """A phase's colour, the same in the bar and on the roofline."""
    return COLOURS[PHASES.index(phase) % len(COLOURS)] if phase in PHASES else "#333"


def _flops(x: float) -> str:
    return f"{x / 1e12:.3g} TFLOP/s" if x >= 1e12 else f"{x / 1e9:.3g} GFLOP/s"


def _num(cell) -> float | None:
    return None if isinstance(cell, Missing) else float(cell)


def roofline_svg(rows: pd.DataFrame, width: int = 380, height: int = 210) -> str:
    """R01's roofline as an inline SVG: the roof of the run's dtype (its measured matmul
    ceiling over the measured memory bandwidth) and each phase with counted FLOPs as a point
    at its arithmetic intensity and achieved FLOP/s (log-log). "" where R01 measured no
    ceiling or no phase did work."""
    r = rows_of(r01_roofline.ENTRY.eid, rows)
    if r.empty:
        return ""
    dtype = str(r.dtype.iloc[0])
    peaks = {k: v for k, v in r01_roofline.peak_flops(r).items() if v}
    peak = peaks.get(dtype) or max(peaks.values(), default=None)
    bw = _num(pick(r, r01_roofline.MEMORY_BANDWIDTH, r01_roofline.BANDWIDTH, "value"))
    points = {}
    for ph in r01_roofline.WORK_PHASES:
        v = r01_roofline.phase_variant(ph)
        x = _num(pick(r, v, r01_roofline.ARITHMETIC_INTENSITY))
        y = _num(pick(r, v, r01_roofline.ACHIEVED_FLOPS))
        if x and y and x > 0 and y > 0:
            points[ph] = (x, y)
    if not (peak and bw and points):
        return ""
    ridge = peak / bw
    xs = [x for x, _ in points.values()] + [ridge]
    x0, x1 = math.log10(min(xs) / 4), math.log10(max(xs) * 4)
    y0, y1 = math.log10(min(y for _, y in points.values()) / 4), math.log10(peak * 2)
    pad = 34

    def at(x: float, y: float) -> tuple[float, float]:
        return (pad + (math.log10(x) - x0) / (x1 - x0) * (width - pad - 6),
                height - pad + 10 - (math.log10(y) - y0) / (y1 - y0) * (height - pad - 4))

    roof = [at(10 ** x0, min(peak, bw * 10 ** x0)), at(ridge, peak), at(10 ** x1, peak)]
    esc = html.escape
    dots = "".join(
        f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="5" fill="{c}"><title>{esc(ph)}: '
        f"{x:.3g} FLOP/B, {y / 1e9:.3g} GFLOP/s ({100 * y / min(peak, bw * x):.1f}% of the "
        f"roof)</title></circle>"
        for ph, (x, y) in points.items()
        for cx, cy, c in [(*at(x, y), _colour(ph))])
    key = "".join(f'<span class="key"><span class="swatch" style="background:{c}"></span>'
                  f"{esc(ph)}</span>" for ph in points for c in [_colour(ph)])
    return (f"<p><strong>The roofline (R01, {esc(dtype)}): each phase against this device's "
            "ceilings</strong></p>"
            f'<svg viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            'role="img" style="max-width:100%;background:#fff;border:1px solid #ccc">'
            f'<polyline fill="none" stroke="#333" stroke-width="2" points="'
            + " ".join(f"{a:.1f},{b:.1f}" for a, b in roof) + '"/>'
            + dots
            + f'<text x="{width / 2:.0f}" y="{height - 4}" font-size="11" text-anchor="middle">'
            "arithmetic intensity (FLOP/byte, log)</text>"
            + f'<text x="10" y="{height / 2:.0f}" font-size="11" text-anchor="middle" '
            f'transform="rotate(-90 10 {height / 2:.0f})">FLOP/s (log)</text>'
            + f"<text x=\"{roof[2][0] - 4:.0f}\" y=\"{roof[2][1] - 5:.0f}\" font-size=\"10\" "
            f'text-anchor="end">peak {_flops(peak)}</text></svg>'
            f"<div>{key}</div>")


def time_html(rows: pd.DataFrame) -> str:
    """Where the step's time goes: E05's synchronized phase shares, R02's device idle."""
    out = []
    phases = e05_phases.phase_shares(rows)
    if phases:
        out.append(stack_html(phases, "Where the step's time goes (E05, each phase synchronized, "
                          "% of the phase sum)"))
    idle = device_idle(rows)
    if idle:
        out.append(stack_html(idle, "The device during free-running steps (R02, % of its "
                          "profiled window)"))
    if not out:
        out.append("<p>Where the step's time goes: not measured in this run (E05 did not run; "
                   "<code>--config run=E05</code> measures it).</p>")
    roof = roofline_svg(rows)
    if not roof:
        return "".join(out)
    # the bars and the roofline side by side: the first screen keeps its height
    return ('<div style="display:flex;gap:18px;align-items:flex-start;flex-wrap:wrap">'
            f'<div style="flex:1 1 480px;min-width:0">{"".join(out)}</div>'
            f'<div style="flex:0 1 390px;min-width:0">{roof} <a href="#r01">R01\'s table and '
            "figure</a></div>"
            "</div>")


def verdict_html(results: Path, title: str, workload: str) -> str:
    """The answer box: the verdict, its evidence in one line, what to do next and what W01
    measured for it."""
    esc = html.escape
    diag = Path(results) / "diagnosis.csv"
    out = [f'<div class="answer" id="answer"><h1>{esc(title)}</h1>']
    if not diag.is_file():
        out.append("<p class=\"verdict\">No verdict: the diagnosis did not run in this run "
                   "(<code>perflab diagnose</code> runs it).</p>")
    else:
        out.append(chosen_html(diag))
        best = summary.best_whatif(results)
        out.append(f"<p>Measured (W01): {esc(best)}</p>" if best else
                   "<p>Measured effect: not measured in this run "
                   f"(<code>perflab whatif {esc(workload)}</code> measures each intervention "
                   "that applies).</p>")
    out.append("</div>")
    return "".join(out)


def chosen_html(diagnosis_csv: Path) -> str:
    """The verdict of a ``diagnosis.csv`` (perflab.views.diagnose.to_frame), its first evidence
    row and the next intervention, as the answer box's paragraphs."""
    esc = html.escape
    frame = pd.read_csv(diagnosis_csv, keep_default_na=False, dtype=str)
    chosen = frame[frame.verdict == "True"]
    if chosen.empty:
        return ("<p class=\"verdict\"><strong>No verdict</strong>: no candidate fits its "
                "evidence (the diagnosis below says why for each).</p>")
    first = chosen.iloc[0]
    out = [f'<p class="verdict">The machine is waiting for: '
           f"<strong>{esc(first['label'])}</strong> — {esc(first['because'])}.</p>"]
    if first.get("source"):
        value = first.get("value", "")
        try:
            value = f"{float(value):.3g}"
        except ValueError:
            pass
        out.append(f"<p>Evidence: <code>{esc(first['source'])}</code> = {esc(value)} "
                   f"{esc(first.get('unit', ''))} (test: {esc(first.get('test', ''))})</p>")
    if first.get("intervention"):
        out.append(f"<p>Next: {esc(first['intervention'])}</p>")
    return "".join(out)


#: a verdict that says this run did not judge the claim (its experiment did not run here):
#: set against a reference it is no change of the machine, only of what was run
NOT_JUDGED_HERE = ("NOT RUN",)


def claim_changes(ours: pd.DataFrame, theirs: pd.DataFrame) -> list[tuple[str, str, str]]:
    """(claim, their verdict, ours) for each claim whose verdict differs, leaving out the
    claims this run did not run (a run of one experiment is not 44 changes)."""
    before = dict(zip(theirs.claim, theirs.verdict))
    return [(c, before[c], v) for c, v in zip(ours.claim, ours.verdict)
            if c in before and before[c] != v and v not in NOT_JUDGED_HERE]


def same_kind(tag: str, runs: list) -> object | None:
    """The shipped reference run of this run's device kind (cpu or cuda), or None."""
    kind = "cpu" if tag.startswith("cpu") else "cuda"
    for r in runs:
        if r.claims is not None and str(r.meta.get("tag", "")).startswith(kind):
            return r
    return None


def tally_html(claims: pd.DataFrame, verdicts: tuple[str, ...], reference) -> str:
    """The claims' tally, and each claim whose verdict changed against ``reference``."""
    esc = html.escape
    counts = [(v, int((claims.verdict == v).sum())) for v in verdicts]
    line = " · ".join(f"{v} {n}" for v, n in counts if n)
    out = [f'<p><strong>The chapter\'s {len(claims)} claims here:</strong> {esc(line)} '
           '(<a href="#Claims">the table</a>)</p>']
    if reference is not None:
        changed = claim_changes(claims, reference.claims)
        head = f"Against the shipped reference run {reference.label}: "
        out.append("<p>" + esc(head) + (
            esc(f"{len(changed)} changed — ") + ", ".join(
                f'<a href="#claim-{esc(c.lower())}">{esc(c)}</a> {esc(a)} → {esc(b)}'
                for c, a, b in changed) if changed else "no verdict changed") + "</p>")
    return "".join(out)


def show_claims(mode: str, workload: str, chapter_workload: str) -> bool:
    """Whether the report shows the chapter's claims: ``all`` always, ``none`` never,
    ``auto`` only for a run of the chapter's own workload (a user's workload would be judged
    by claims about the chapter's model)."""
    if mode not in ("auto", "all", "none"):
        raise ValueError(f"report_claims must be auto, all or none, not {mode!r}")
    return mode == "all" or (mode == "auto" and workload in ("", chapter_workload))


def section_id(title: str) -> str:
    """A chapter section's anchor: ``4 · Localize: decompose the step`` ->
    ``sec-4-localize-decompose-the-step``."""
    return "sec-" + "-".join(re.findall(r"[a-z0-9]+", title.lower()))


def nav_html(links: list[tuple[str, str, bool]]) -> str:
    """The sidebar: (anchor, text, is a sub-entry) in page order."""
    sub_class = ' class="sub"'
    items = "".join(f'<a href="#{html.escape(a)}"{sub_class if sub else ""}>'
                    f"{html.escape(t)}</a>" for a, t, sub in links)
    return f'<nav class="perflab-nav"><strong>perflab report</strong>{items}</nav>'
