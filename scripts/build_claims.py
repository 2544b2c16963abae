"""Evaluate the chapter's claims (perflab/kit/claims.py) on one run's result CSVs -> claims.csv.

The run's raw samples CSVs go with them: a claim judged by its statistic's own interval
(perflab.kit.claims.own_interval) resamples them, and without them is not resolved. So do the
further processes `claim_processes` makes (their rows, and samples, in the same order): a
claim of such an experiment is decided only where every process decides it alike.
"""

import sys

import pandas as pd

from perflab import experiments
from perflab.core import io
from perflab.kit import claims


def main(csvs, out, samples=(), processes=(), process_samples=()):
    rows = io.read_results(csvs)
    frames = [f for f in (io.read_samples(p) for p in samples) if not f.empty]
    frame = experiments.evaluate_claims(rows, samples=pd.concat(frames, ignore_index=True)
                            if frames else None,
                            processes=io.read_processes(processes, process_samples))
    io.atomic_write_csv(out, frame)
    counts = ", ".join(f"{k} {v}" for k, v in claims.verdict_counts(frame).items() if v)
    print(f"{len(frame)} claims: {counts}", file=sys.stderr)
    for r in frame.itertuples():
        print(f"{r.claim} {r.verdict:<12} {r.statement}: {r.measured}", file=sys.stderr)


if __name__ == "__main__":
    smk = globals().get("snakemake")
    if smk is not None:
        with io.log_to(smk.log[0]):
            main(list(smk.input.csv), smk.output[0], list(smk.input.samples),
                 list(smk.input.processes), list(smk.input.process_samples))
    else:
        import argparse

        p = argparse.ArgumentParser(description=__doc__)
        p.add_argument("csv", nargs="+", help="experiment result CSVs of one run")
        p.add_argument("--out", "--out-csv", dest="out", required=True, help="claims.csv to write")
        p.add_argument("--samples", nargs="*", default=[],
                       help="the run's raw samples CSVs (<slug>_samples.csv)")
        p.add_argument("--processes", nargs="*", default=[],
                       help="result CSVs of further processes of an experiment (claim_processes)")
        p.add_argument("--process-samples", nargs="*", default=[],
                       help="their samples CSVs, in the same order")
        a = p.parse_args()
        main(a.csv, a.out, a.samples, a.processes, a.process_samples)
