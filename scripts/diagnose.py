"""Write the verdict — what is the machine waiting for — from a run's result CSVs.

Under Snakemake (``script:``): input.csv, output.md, output.csv, log[0]. Standalone:

    python scripts/diagnose.py results/TAG/*.csv --md diagnosis.md --out-csv diagnosis.csv
"""

import sys

from perflab import diagnose, io
from perflab.runner import log_to


def main(csvs, md_out, csv_out):
    rows, md, _ = diagnose.build(csvs)
    io.atomic_write_csv(csv_out, rows)
    io.atomic_write_text(md_out, md)
    print(md, file=sys.stderr)


if __name__ == "__main__":
    smk = globals().get("snakemake")
    if smk is not None:
        with log_to(smk.log[0]):
            main(list(smk.input.csv), smk.output.md, smk.output.csv)
    else:
        import argparse

        p = argparse.ArgumentParser(description=__doc__)
        p.add_argument("csv", nargs="+", help="experiment result CSVs of one run")
        p.add_argument("--md", required=True)
        p.add_argument("--out-csv", required=True)
        a = p.parse_args()
        main(a.csv, a.md, a.out_csv)
