"""Write the verdict — what is the machine waiting for — from a run's result CSVs.

Under Snakemake (``script:``): input.csv, output.md, output.csv, log[0]. Standalone:

    python scripts/diagnose.py results/TAG/*.csv --md diagnosis.md --out-csv diagnosis.csv
"""

from perflab.core.aggregation import run_aggregation
from perflab.views import diagnose

if __name__ == "__main__":
    run_aggregation(diagnose.build, __doc__, globals().get("snakemake"))
