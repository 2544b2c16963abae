"""Ship a finished run as a reference run under report/reference/<name>/.

Copies the run's experiment CSVs and provenance, its ledger and claims, and
writes run.json (tag, device, scale, commit, environment), so the report of
any later run sets itself beside this one. Run it after a complete pipeline
run, then commit the new directory:

    python scripts/ship_reference.py results/cuda-nvidia-h200 --name h200
"""

import argparse
from pathlib import Path

from perflab.views import reference

if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="the result directory of one run (results/<tag>)")
    p.add_argument("--name", help="reference run name (default: the result directory's tag)")
    p.add_argument("--root", default=str(reference.REFERENCE_DIR), help="where reference runs live")
    p.add_argument("--commit", help="the commit the run ran at (default: from its provenance)")
    a = p.parse_args()
    dest = Path(a.root) / (a.name or Path(a.results).name)
    reference.ship(a.results, dest, commit=a.commit)
    print(f"shipped {a.results} -> {dest}")
