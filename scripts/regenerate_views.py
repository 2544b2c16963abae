"""Rebuild every view of a finished run from its result CSVs alone, into one directory.

The views are what the read side computes from a run's rows: the claims, the ledger,
the diagnosis, each experiment's table and side-by-side frame, and (given a second run)
the comparison. Two checkouts that regenerate the same views from the same rows read
those rows the same way, which is how a refactor of the read side is shown to change
nothing it should not:

    python scripts/regenerate_views.py report/reference/h200 --out /tmp/before/h200 \
        --compare-to report/reference/reproducibility/h200-rerun
    # ... change the code ...
    python scripts/regenerate_views.py report/reference/h200 --out /tmp/after/h200 ...
    diff -r /tmp/before/h200 /tmp/after/h200

A run is a result directory (``results/<tag>``) or a shipped reference run
(``report/reference/<name>``, CSVs under ``results/``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

import pandas as pd

from perflab import experiments
from perflab.core import io
from perflab.kit import tables
from perflab.views import compare, diagnose, ledger, reference


def _experiments(rows: pd.DataFrame) -> list[str]:
    return sorted(rows.experiment.unique(), key=reference.section_key) if not rows.empty else []


def regenerate(run: Path, out: Path, compare_to: Path | None = None) -> list[Path]:
    """Write the views of ``run`` under ``out``; returns the files written."""
    csv_dir, claims_dir = compare.result_dir(run)
    csvs = compare.result_csvs(csv_dir)
    if not csvs:
        raise SystemExit(f"{run}: no result CSV with the contract's columns")
    rows = io.read_results(csvs)
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def save(name: str, frame: pd.DataFrame) -> None:
        io.atomic_write_csv(out / name, frame)
        written.append(out / name)

    def save_text(name: str, text: str) -> None:
        io.atomic_write_text(out / name, text)
        written.append(out / name)

    # the raw samples beside the CSVs, where the run has them (the shipped ones carry none)
    save("claims.csv", experiments.evaluate_claims(rows, samples=compare.load_samples(csv_dir),
                                       processes=io.read_processes(*io.process_files(csv_dir))))
    led, md = ledger.build(csvs)[:2]
    save("ledger.csv", led)
    save_text("ledger.md", md)
    diag_rows, diag_md = diagnose.build(csvs)[:2]
    save("diagnosis.csv", diag_rows)
    save_text("diagnosis.md", diag_md)
    chapter = reference.load_chapter()
    for eid in _experiments(rows):
        save(f"table_{eid}.csv", tables.format_table(experiments.table(eid, rows)))
        save(f"side_by_side_{eid}.csv", reference.side_by_side(rows, eid, chapter))
    if compare_to is not None:
        # compare reads this run's claims and diagnosis from beside its CSVs: give it the
        # regenerated ones, so the comparison reflects this checkout's read side alone
        with tempfile.TemporaryDirectory() as tmp:
            this = Path(tmp) / run.name
            shutil.copytree(csv_dir, this)
            for name in ("claims.csv", "diagnosis.csv"):
                shutil.copy(out / name, this / name)
            cmp_out = out / "compare"
            res = compare.compare(this, compare_to, cmp_out)
            for name in ("rows", "tables", "verdicts", "samples"):
                written.append(cmp_out / f"{name}.csv")
            written.append(cmp_out / "summary.md")
            (cmp_out / "compare.png").unlink(missing_ok=True)  # pixels are not a view
            del res
    return written


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, help="a result directory or a shipped reference run")
    p.add_argument("--out", type=Path, required=True, help="directory to write the views to")
    p.add_argument("--compare-to", type=Path, help="a second run to compare with")
    a = p.parse_args(argv)
    files = regenerate(a.run, a.out, a.compare_to)
    print(f"{a.run}: {len(files)} views -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
