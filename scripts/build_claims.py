"""Evaluate the chapter's claims (perflab/claims.py) on one run's result CSVs -> claims.csv."""

import sys

from perflab import claims, io


def main(csvs, out):
    rows = io.read_results(csvs)
    frame = claims.evaluate(rows)
    io.atomic_write_csv(out, frame)
    counts = ", ".join(f"{k} {v}" for k, v in claims.verdict_counts(frame).items() if v)
    print(f"{len(frame)} claims: {counts}", file=sys.stderr)
    for r in frame.itertuples():
        print(f"{r.claim} {r.verdict:<12} {r.statement}: {r.measured}", file=sys.stderr)


if __name__ == "__main__":
    smk = globals().get("snakemake")
    if smk is not None:
        with io.log_to(smk.log[0]):
            main(list(smk.input.csv), smk.output[0])
    else:
        import argparse

        p = argparse.ArgumentParser(description=__doc__)
        p.add_argument("csv", nargs="+", help="experiment result CSVs of one run")
        p.add_argument("--out", "--out-csv", dest="out", required=True, help="claims.csv to write")
        a = p.parse_args()
        main(a.csv, a.out)
