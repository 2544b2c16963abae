"""Draw every experiment's figure (PNG) and its report caption, in one process.

One interpreter imports matplotlib once for all figures. A figure that fails to draw
does not stop the others: its traceback is logged, its PNG and caption say why, and
the last line names it (the job still succeeds, so the report is built; after fixing
the figure, `snakemake --cores 1 -R figures` draws them again).

Under Snakemake (``script:``): params.plan (per experiment: eid, csv, samples, png,
caption), log[0]. Standalone, from a result directory, into figures/TAG/ (``--figures-dir``):

    python scripts/make_figures.py results/TAG [E01 E05 ...]
"""

import sys
import time
from pathlib import Path

from perflab.core import io


def main(plan):
    from perflab.experiments import draw_figures  # matplotlib: after the log is open

    t0 = time.perf_counter()
    failed = draw_figures(plan)
    drawn = [job["eid"] for job in plan if job["eid"] not in failed]
    summary = (f"figures: {len(drawn)} drawn in {time.perf_counter() - t0:.1f} s"
               + "".join(f"; {eid} FAILED ({why})" for eid, why in failed.items()))
    print(summary, file=sys.stderr)
    return summary, failed


def plan_for(results, figures_dir, eids):
    """The plan for a result directory: ``eids``, or every experiment with a result CSV."""
    from perflab.experiments.catalogue import EXPERIMENTS
    from perflab.pipeline import config

    results = Path(results)
    cfg = {"results_dir": results.parent, "figures_dir": figures_dir, "resolved_tag": results.name}
    plan = config.figure_plan(cfg, [e.upper() for e in eids] or list(EXPERIMENTS))
    return plan if eids else [job for job in plan if Path(job["csv"]).is_file()]


if __name__ == "__main__":
    smk = globals().get("snakemake")
    if smk is not None:
        with io.log_to(smk.log[0]):
            summary, failed = main(smk.params.plan)
        if failed:  # on the console too: the log is shown only for a failed job
            print(f"perflab: {summary} (log: {smk.log[0]})", file=sys.stderr)
    else:
        import argparse

        p = argparse.ArgumentParser(description=__doc__,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("results", help="result directory of one run, results/<tag>")
        p.add_argument("eids", nargs="*", help="experiment ids (default: every one with a CSV)")
        p.add_argument("--figures-dir", default="figures",
                       help="writes <figures-dir>/<tag>/<slug>.png and captions/ (default: figures)")
        a = p.parse_args()
        _, failed = main(plan_for(a.results, a.figures_dir, a.eids))
        sys.exit(1 if failed else 0)
