"""Draw one experiment's figure (PNG) from its result CSV and samples CSV.

Under Snakemake (``script:``): input.csv, input.samples, output[0], log[0], and
the experiment from the ``eid`` wildcard (e.g. ``e01``). Standalone:

    python scripts/make_figure.py E01 results/TAG/e01_x.csv results/TAG/e01_x_samples.csv out.png
"""

import sys

from perflab.figures import make_figure
from perflab.runner import log_to


def main(eid, csv, samples, out):
    path = make_figure(eid, csv, samples, out)
    print(f"{eid.upper()}: figure -> {path}", file=sys.stderr)


if __name__ == "__main__":
    smk = globals().get("snakemake")
    if smk is not None:
        with log_to(smk.log[0]):
            main(smk.wildcards.eid.upper(), smk.input.csv, smk.input.samples, smk.output[0])
    else:
        import argparse

        p = argparse.ArgumentParser(description=__doc__,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("eid", help="experiment id, e.g. E01")
        p.add_argument("csv", help="the experiment's result CSV")
        p.add_argument("samples", help="the experiment's samples CSV (may be absent)")
        p.add_argument("out", help="PNG to write")
        a = p.parse_args()
        main(a.eid, a.csv, a.samples, a.out)
