"""ARTIFACT.md's generated tables: each claim's command and cost, and each machine's time.

The claim table is read from the claims themselves (their experiment; whether their stated
judgement needs C00's A/A floor, so the command runs C00 beside) and from the shipped
reference runs' provenance (each job's own ``wall_s``, summed over an experiment's jobs:
its main job, its per-size or cold/warm jobs, its further processes). The machine table is
each shipped run's ``run.json`` and the same provenance. Nothing is typed by hand, so a new
claim or a new shipped run cannot leave the table behind.

    python -m perflab.views.artifact_table          # rewrite the tables in ARTIFACT.md
    python -m perflab.views.artifact_table --check  # exit 1 when they are stale

``tests/test_docs.py`` fails when ARTIFACT.md's tables are not what this writes.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

from perflab.experiments import claim_registry, modules

ROOT = Path(__file__).resolve().parents[2]
ARTIFACT = ROOT / "ARTIFACT.md"
REFERENCE = ROOT / "report" / "reference"
#: the shipped runs whose costs the claim table quotes: (column, directory)
MACHINES = (("2-core CPU", REFERENCE / "cpu-2c"), ("one H200", REFERENCE / "h200"))
CLAIMS_BEGIN, CLAIMS_END = "<!-- claim table: begin -->", "<!-- claim table: end -->"
TIME_BEGIN, TIME_END = "<!-- machine table: begin -->", "<!-- machine table: end -->"


def job_walls(run: Path, slug: str) -> list[float]:
    """``wall_s`` of every job of experiment ``slug`` in a shipped run's results."""
    res = run / "results"
    files = [res / f"{slug}.json", *sorted((res / slug).glob("**/*.json")),
             *sorted((res / "processes").glob(f"{slug}_p*.json"))]
    walls = []
    for f in files:
        if f.is_file():
            w = json.loads(f.read_text()).get("wall_s")
            if isinstance(w, (int, float)):
                walls.append(float(w))
    return walls


def _ids(cids: list[str]) -> str:
    """C10, C11, C12, C13 -> C10–C13 (runs of consecutive ids joined)."""
    nums = sorted(int(c[1:]) for c in cids)
    out, start = [], nums[0]
    for prev, n in zip(nums, nums[1:] + [None]):
        if n != prev + 1:
            out.append(f"C{start:02d}" if start == prev else f"C{start:02d}–C{prev:02d}")
            start = n
    return ", ".join(out)


def needs_floor(tolerances: list[str]) -> bool:
    """Whether a claim's stated judgement reads C00's A/A floor (then C00 runs beside)."""
    return any("A/A floor" in t or "(C00)" in t for t in tolerances)


def claim_table() -> str:
    by_eid: dict[str, list] = {}
    for c in claim_registry().values():
        by_eid.setdefault(c.eid, []).append(c)
    head = ("| claims | what the experiment tests | command (alone) | "
            + " | ".join(f"{m} (s)" for m, _ in MACHINES) + " |")
    lines = [head, "|" + " --- |" * (3 + len(MACHINES))]
    for eid, mod in modules().items():
        cs = by_eid.get(eid)
        if not cs:
            continue
        e = mod.ENTRY
        floor = needs_floor([c.tolerance for c in cs]) and eid != "C00"
        run = f"C00,{eid}" if floor else eid
        cores = max(e.devices, 2) if e.devices > 1 else 1
        cmd = f"snakemake --cores {cores} --config run={run}"
        costs = []
        for _, d in MACHINES:
            walls = job_walls(d, e.slug) + (job_walls(d, "c00_calibration") if floor else [])
            s = sum(walls)
            costs.append(("not run" if not walls else f"{s:.0f}" if s >= 10 else f"{s:.1f}"))
        lines.append(f"| {_ids([c.cid for c in cs])} | {eid} · {e.title} | `{cmd}` | "
                     + " | ".join(costs) + " |")
    return "\n".join(lines)


def _wall(meta: dict) -> str:
    try:
        s = (datetime.fromisoformat(meta["finished"])
             - datetime.fromisoformat(meta["started"])).total_seconds()
    except (KeyError, TypeError, ValueError):
        return "?"
    return f"{s / 60:.1f} min"


def machine_table() -> str:
    lines = ["| shipped run | device | scale | commit | experiments | first job to last "
             "(wall) | sum of the jobs' own wall | story |", "|" + " --- |" * 8]
    # the whole-pipeline runs; the what-if and workload runs are counted in their notes
    runs = sorted(p.parent for p in [*REFERENCE.glob("*/run.json"),
                                     *REFERENCE.glob("reproducibility/*/run.json")])
    for d in runs:
        meta = json.loads((d / "run.json").read_text())
        env = meta.get("environment", {})
        device = env.get("gpu") or env.get("device_name") or meta.get("device", "")
        walls = sum(w for m in modules().values() for w in job_walls(d, m.ENTRY.slug))
        notes = next((n for n in (d / "NOTES.md", d.parent / "NOTES.md") if n.is_file()), None)
        story = f"[NOTES.md]({notes.relative_to(ROOT)})" if notes else ""
        lines.append(f"| `{d.relative_to(REFERENCE)}` | {device} | {meta.get('scale', '')} | "
                     f"{str(meta.get('commit', ''))[:7]} | {len(meta.get('experiments', []))} | "
                     f"{_wall(meta)} | {walls / 60:.1f} min | {story} |")
    return "\n".join(lines)


def _between(text: str, begin: str, end: str, body: str) -> str:
    head, sep, rest = text.partition(begin)
    _, sep2, tail = rest.partition(end)
    if not (sep and sep2):
        raise ValueError(f"ARTIFACT.md: the markers {begin!r} and {end!r} are missing")
    return f"{head}{begin}\n{body}\n{end}{tail}"


def render(text: str) -> str:
    text = _between(text, CLAIMS_BEGIN, CLAIMS_END, claim_table())
    return _between(text, TIME_BEGIN, TIME_END, machine_table())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m perflab.views.artifact_table",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when stale")
    args = p.parse_args(argv)
    text = ARTIFACT.read_text()
    if args.check:
        stale = render(text) != text
        if stale:
            print("stale: ARTIFACT.md (python -m perflab.views.artifact_table rewrites it)")
        return int(stale)
    ARTIFACT.write_text(render(text))
    print("wrote ARTIFACT.md's claim and machine tables")
    return 0


if __name__ == "__main__":
    sys.exit(main())
