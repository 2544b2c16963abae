"""Compare this run's result directory with another (a reference run, or the same machine again).

Under Snakemake (rule ``compare``): this run's directory is where its result
CSVs are, the other is the config key ``compare_to``. Standalone:

    python scripts/compare_runs.py results/cuda-nvidia-h200 results/cuda-nvidia-h200-rerun --out DIR
"""

import sys
from pathlib import Path

from perflab.core.io import log_to
from perflab.views import compare


def main(this_dir, ref_dir, out_dir):
    if not str(ref_dir).strip():
        sys.exit("compare: set the config key compare_to to the result directory to compare "
                 "with, e.g. --config compare_to=results/cuda-nvidia-h200")
    res = compare.compare(this_dir, ref_dir, out_dir)
    print((Path(out_dir) / "summary.md").read_text(), file=sys.stderr)
    return res


if __name__ == "__main__":
    smk = globals().get("snakemake")
    if smk is not None:
        with log_to(smk.log[0]):
            main(Path(smk.input.csv[0]).parent, smk.params.compare_to,
                 Path(smk.output.summary).parent)
    else:
        import argparse

        p = argparse.ArgumentParser(description=__doc__,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("this", help="this run's result directory (results/<tag>)")
        p.add_argument("ref", help="the result directory to compare with")
        p.add_argument("--out", help="output directory (default: <this>/compare)")
        a = p.parse_args()
        main(a.this, a.ref, a.out or str(Path(a.this) / "compare"))
