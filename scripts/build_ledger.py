"""Build the PERFORMANCE LEDGER (Markdown block + cited rows) from the result CSVs.

Under Snakemake (``script:``): input.csv, output.md, output.csv, log[0]. Standalone:

    python scripts/build_ledger.py results/TAG/*.csv --md ledger.md --out-csv ledger.csv
"""

from perflab import ledger
from perflab.aggregation import run_aggregation

if __name__ == "__main__":
    run_aggregation(ledger.build, __doc__, globals().get("snakemake"),
                    what="experiment result CSVs of one device")
