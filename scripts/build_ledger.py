"""Build the PERFORMANCE LEDGER (Markdown block + cited rows) from the result CSVs.

Under Snakemake (``script:``): input.csv, output.md, output.csv, log[0]. Standalone:

    python scripts/build_ledger.py results/TAG/*.csv --md ledger.md --out-csv ledger.csv
"""

from perflab.core.aggregation import run_aggregation
from perflab.views import ledger

if __name__ == "__main__":
    run_aggregation(ledger.build, __doc__, globals().get("snakemake"),
                    what="experiment result CSVs of one device")
