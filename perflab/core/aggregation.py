"""The entry of an aggregation script (ledger, diagnosis): result CSVs in, Markdown + rows out.

Apart from :mod:`perflab.pipeline.runner` because that module imports torch (the experiments' harness)
and an aggregation reads CSVs only: each of these jobs is a fresh interpreter, and importing
torch was most of its time (about 3 s of a 6 s ledger job on a 2-core CPU).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from perflab.core import io


def run_aggregation(build: Callable[[list[str]], tuple], doc: str | None, snakemake: Any = None,
                    what: str = "experiment result CSVs of one run") -> None:
    """Entry of a script that turns result CSVs into a Markdown block and a CSV of rows.

    ``build(csvs)`` returns ``(rows, markdown, ...)``. Under Snakemake the inputs are
    ``input.csv`` and the outputs ``output.md``/``output.csv``; by hand, positional CSVs and
    ``--md``/``--out-csv``. Both outputs are written atomically; the block is echoed to stderr.
    """
    def main(csvs, md_out, csv_out):
        rows, md = build(list(csvs))[:2]
        io.atomic_write_csv(csv_out, rows)
        io.atomic_write_text(md_out, md)
        print(md, file=sys.stderr)

    if snakemake is not None:
        with io.log_to(snakemake.log[0]):
            main(snakemake.input.csv, snakemake.output.md, snakemake.output.csv)
        return
    p = argparse.ArgumentParser(description=doc)
    p.add_argument("csv", nargs="+", help=what)
    p.add_argument("--md", required=True)
    p.add_argument("--out-csv", required=True)
    a = p.parse_args()
    main(a.csv, a.md, a.out_csv)
