"""The few lines every run ends with: the verdict, the claims' tally, the report's path.

Printed by the workflow's ``onsuccess`` (so plain ``snakemake --cores 1`` ends with them) and
by ``perflab`` after Snakemake returns. Read from the files the run's rules wrote
(``diagnosis.csv``, ``claims.csv``, ``w01_whatif.md``, ``report.html``); a file the run did
not make is left out, never guessed. A file older than the run's start is said to be so.
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

#: claims.csv's verdicts in the order the tally names them (perflab.kit.claims' names)
VERDICT_ORDER = ("REPRODUCED", "DIFFERS", "INCONCLUSIVE", "ERROR", "NOT RUN", "UNSUPPORTED")


def _rows(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def verdict(result_dir: Path) -> str | None:
    """"<label> — <because>" of the diagnosis's verdict, "no verdict: ..." when no candidate
    fits, None without a diagnosis.csv."""
    path = Path(result_dir) / "diagnosis.csv"
    if not path.is_file():
        return None
    rows = _rows(path)
    chosen = [r for r in rows if r.get("verdict") == "True"]
    if chosen:
        return f"{chosen[0]['label']} — {chosen[0]['because']}"
    return "no verdict: no candidate fits its evidence (diagnosis.md says why for each)"


def tally(result_dir: Path) -> str | None:
    """"40 claims: 30 REPRODUCED, 6 DIFFERS, ..." from claims.csv, None without it."""
    path = Path(result_dir) / "claims.csv"
    if not path.is_file():
        return None
    counts = Counter(r["verdict"] for r in _rows(path))
    order = [v for v in VERDICT_ORDER if counts[v]] + sorted(set(counts) - set(VERDICT_ORDER))
    return f"{sum(counts.values())} claims: " + ", ".join(f"{counts[v]} {v}" for v in order)


def best_whatif(result_dir: Path) -> str | None:
    """W01's "Best measured" line (its table's first line), None without w01_whatif.md."""
    path = Path(result_dir) / "w01_whatif.md"
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        if line.startswith("**Best measured:**") or line.startswith("**No intervention"):
            return line.replace("**", "")
    return None


def lines(result_dir: Path, since: float | None = None, claims: bool = True) -> list[str]:
    """The summary's lines, each "perflab: <what>: <it>"; ``since`` (a time.time()): files
    older than it are marked as from an earlier run; ``claims``: False leaves the chapter's
    claims out (a user's workload: perflab.views.first_screen.show_claims)."""
    d = Path(result_dir)

    def old(name: str) -> str:
        p = d / name
        return (" (from an earlier run)" if since is not None and p.is_file()
                and p.stat().st_mtime < since else "")

    out = []
    for name, label, value in (("diagnosis.csv", "verdict", verdict(d)),
                               ("claims.csv", "claims", tally(d) if claims else None),
                               ("w01_whatif.md", "what-if", best_whatif(d))):
        if value:
            out.append(f"perflab: {label}: {value}{old(name)}")
    for name, label in (("report.html", "report"), ("diagnosis.md", "diagnosis")):
        if (d / name).is_file():
            out.append(f"perflab: {label}: {d / name}{old(name)}")
            break
    if not out:
        out.append(f"perflab: results in {d}/")
    return out
